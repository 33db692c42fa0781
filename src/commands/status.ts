import { defineCommand } from "citty";
import { loadConfigFile, type Listen } from "../config.ts";
import { LlmrouteError } from "../errors.ts";
import { describeFetchError } from "../fleet/fleet.ts";
import { int, pct, table } from "../ops/table.ts";
import type { StatusDocument } from "../ops/telemetry.ts";

export default defineCommand({
  meta: { name: "status", description: "Show a running router's replicas, load, pins and capacity (exit 0 ok, 1 degraded, 2 unreachable)" },
  args: {
    url: { type: "string", description: "Router (or admin listener) URL; default from --config, else http://127.0.0.1:8080" },
    config: { type: "string", alias: "c", description: "Config file to find the router's address in", default: "router.toml" },
    "api-key": { type: "string", description: "Key for a router with server.api_keys (default: env LLMROUTE_API_KEY)" },
    json: { type: "boolean", description: "Print the raw /status JSON" },
  },
  async run({ args }) {
    const base = args.url ?? (await urlFromConfig(args.config));
    const key = args["api-key"] ?? process.env.LLMROUTE_API_KEY;
    let status: StatusDocument;
    try {
      const res = await fetch(`${base.replace(/\/+$/, "")}/status`, {
        headers: key ? { authorization: `Bearer ${key}` } : {},
        signal: AbortSignal.timeout(5000),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
      status = (await res.json()) as StatusDocument;
    } catch (error) {
      throw new LlmrouteError("unreachable", `cannot read ${base}/status: ${describeFetchError(error)}`, { exitCode: 2 });
    }
    if (args.json) console.log(JSON.stringify(status, null, 2));
    else console.log(formatStatus(status, Date.now()));
    return status.healthy === status.replicas.length && status.warnings.length === 0 ? 0 : 1;
  },
});

async function urlFromConfig(path: string): Promise<string> {
  const fallback = "http://127.0.0.1:8080";
  if (!(await Bun.file(path).exists())) return fallback;
  const config = await loadConfigFile(path);
  const l: Listen = config.server.admin_listen ?? config.server.listen;
  const host = l.host === "0.0.0.0" ? "127.0.0.1" : l.host === "::" ? "::1" : l.host;
  return `http://${host.includes(":") ? `[${host}]` : host}:${l.port}`;
}

export function formatStatus(s: StatusDocument, now: number): string {
  const head = `llmroute ${s.version} · policy ${s.policy} · up ${duration(s.uptime_s)} · ${s.healthy}/${s.replicas.length} healthy · index ${int(s.index.entries)}/${int(s.index.max_entries)} entries`;
  const rows = s.replicas.map((r) => [
    r.name,
    r.healthy ? "up" : "DOWN",
    r.inflight,
    int(r.served),
    r.failovers,
    r.conversations,
    r.kv_tokens > 0 ? `${int(r.working_set_tokens)} / ${int(r.kv_tokens)} ${pct(r.working_set_ratio)}` : `${int(r.working_set_tokens)} / ?`,
    r.cached_ratio === null ? "-" : pct(r.cached_ratio),
    r.engine ? engineCell(r.engine) : "-",
  ]);
  const body = table(["REPLICA", "HEALTH", "INFLIGHT", "SERVED", "FAILOVERS", "CONVERSATIONS", `WORKING SET (${Math.round(s.capacity_window_s / 60)}m) / KV`, "CACHED", "ENGINE run/wait/kv"], rows, { right: [2, 3, 4, 5] });
  const warnings = s.replicas.flatMap((r) =>
    r.warnings.map((w) => `  ${r.name}: ${w}${w.startsWith("down") && r.last_error ? ` (${duration((now - Date.parse(r.last_error.at)) / 1000)} ago)` : ""}`),
  );
  const global = s.warnings.filter((w) => w.startsWith("cluster: ")).map((w) => `  ${w}`);
  return [head, "", body, ...clusterSection(s), ...(warnings.length + global.length ? ["", "warnings:", ...warnings, ...global] : [])].join("\n");
}

/** The router instances sharing state (absent without [cluster], and from older routers). */
function clusterSection(s: StatusDocument): string[] {
  const c = s.cluster;
  if (!c) return [];
  const head = `cluster ${c.namespace} on ${c.redis} · ${c.state === "up" ? "connected" : c.state.toUpperCase()} · ${c.instances.length} instance${c.instances.length === 1 ? "" : "s"} · backlog ${int(c.backlog_events)} event${c.backlog_events === 1 ? "" : "s"}`;
  const rows = c.instances.map((i) => [
    i.self ? `${i.name} (this)` : i.name,
    i.self ? "-" : `${(i.last_heartbeat_ms / 1000).toFixed(1)}s ago`,
    `${i.lag_ms.toFixed(1)} ms`,
    i.inflight,
  ]);
  return ["", head, "", table(["INSTANCE", "LAST HEARTBEAT", "SYNC LAG", "INFLIGHT"], rows, { right: [1, 2, 3] })];
}

function engineCell(e: Record<string, unknown>): string {
  if (e.error) return `error: ${e.error}`;
  const v = (k: string) => (typeof e[k] === "number" ? (k === "kv_usage" ? pct(e[k] as number) : String(e[k])) : "?");
  return `${v("running")}/${v("waiting")}/${v("kv_usage")}`;
}

function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
