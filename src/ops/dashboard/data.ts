/**
 * GET /dashboard/data: everything the page shows, in one JSON document — the /status
 * document, whether each replica is in a capacity episode, and the last minutes from the
 * recent-requests tracker. It reads live state only: the capacity readings are the ones
 * the server refreshes every 2 s, so a poll never walks the prefix index and its cost does
 * not grow with the index.
 */
import type { RecentSnapshot } from "../recent.ts";
import type { Finding, ReplicaStatus, StatusDocument, Telemetry } from "../telemetry.ts";

export interface DashboardReplica extends ReplicaStatus {
  /** In an over-budget episode (the warning is up; clears under 90 % of kv_tokens). */
  capacity_exceeded: boolean;
}

export interface DashboardData extends Omit<StatusDocument, "replicas"> {
  /** ms since the epoch, the router's clock. */
  now: number;
  replicas: DashboardReplica[];
  /** The warnings as the page lists them: a short line each, details on demand. */
  findings: Finding[];
  recent: RecentSnapshot;
}

export function dashboardData(telemetry: Telemetry, now: number): DashboardData {
  const status = telemetry.status(now);
  const over = new Set(telemetry.live().capacity.readings.filter((c) => c.over).map((c) => c.replica));
  const names = new Set(status.replicas.map((r) => r.name));
  const recent = telemetry.recent.snapshot(now);
  return {
    ...status,
    now,
    findings: status.findings ?? [],
    replicas: status.replicas.map((r) => ({ ...r, capacity_exceeded: over.has(r.name) })),
    // Replicas removed by a reload keep samples until the window passes; show the fleet's.
    recent: { ...recent, ttft: recent.ttft.filter((t) => names.has(t.replica)) },
  };
}

export function dashboardDataResponse(telemetry: Telemetry, now = Date.now()): Response {
  return Response.json(dashboardData(telemetry, now), { headers: { "cache-control": "no-store" } });
}
