/**
 * `llmroute bench --routers N`: each arm runs N in-process router instances sharing one
 * Redis (`--redis URL`, or a redis-server the bench starts), and the bench client sends each
 * request to the next instance, as a round-robin load balancer would. Each arm gets its own
 * namespace in Redis, so no arm starts from another's learning; it is deleted afterwards.
 */
import type { Config } from "../config.ts";
import { dropNamespace } from "../cluster/namespace.ts";
import { memoryLog } from "../log.ts";
import type { StatusDocument } from "../ops/telemetry.ts";
import { startRouter } from "../proxy/server.ts";
import { sendChat, type FetchLike } from "./client.ts";
import { withIndexView, type Arm, type IndexedRecord } from "./targets.ts";

export interface RouterFleetOptions {
  routers: number;
  redis: string;
}

export async function routerFleetArm(config: Config, fleet: RouterFleetOptions, fetchImpl?: FetchLike): Promise<Arm> {
  const namespace = `llmroute-bench-${crypto.randomUUID().slice(0, 8)}`;
  // Each instance's own records, so the hit-rate figures come from the instance that routed.
  const pending: IndexedRecord[][] = Array.from({ length: fleet.routers }, () => []);
  const servers = await Promise.all(
    Array.from({ length: fleet.routers }, (_, i) =>
      startRouter(
        { ...config, cluster: { redis: fleet.redis, name: `bench-${i + 1}`, namespace, catch_up_timeout_ms: 5_000, snapshot_interval_ms: 30_000 } },
        { log: memoryLog(), onRecord: (r) => void (r.outcome === "ok" && pending[i]!.push(r)) },
      ),
    ),
  );
  let next = 0;
  return {
    name: config.routing.policy,
    async send(body) {
      const i = next++ % servers.length;
      return withIndexView(await sendChat(servers[i]!.url, body, { fetch: fetchImpl }), pending[i]!);
    },
    async status() {
      // Capacity warnings are per instance: the first one's view, like one router's.
      const res = await fetch(`${servers[0]!.url}/status`);
      return (await res.json()) as StatusDocument;
    },
    async stop() {
      await Promise.all(servers.map((s) => s.stop()));
      await dropNamespace(fleet.redis, namespace);
    },
  };
}
