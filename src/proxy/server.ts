/**
 * A running router: builds fleet, index, policy and proxy from a Config, listens with
 * Bun.serve (the only place that does), and owns the schedules — health checks, index
 * eviction. Used by `llmroute serve`, the bench (in-process, one per policy) and tests.
 */
import type { Server } from "bun";
import type { Config } from "../config.ts";
import { Fleet, type FetchLike } from "../fleet/fleet.ts";
import { createLog, type Log } from "../log.ts";
import { createHasher } from "../route/hash.ts";
import { createPolicy } from "../route/policies/index.ts";
import { PrefixIndex } from "../route/prefix.ts";
import { Router } from "../route/router.ts";
import { createApp, type App } from "./app.ts";
import { createProxy, type RequestRecord } from "./proxy.ts";

export interface RouterServer {
  url: string;
  port: number;
  config: Config;
  fleet: Fleet;
  router: Router;
  app: App;
  log: Log;
  /** Stop listening and the schedules; with `drainMs`, let in-flight requests finish first. */
  stop(options?: { drainMs?: number }): Promise<void>;
}

export interface StartOptions {
  log?: Log;
  fetch?: FetchLike;
  onRecord?: (record: RequestRecord) => void;
}

/** How often replicas that are down are re-checked, at most: a restart is noticed quickly. */
const DOWN_RECHECK_MS = 2_000;

export async function startRouter(config: Config, options: StartOptions = {}): Promise<RouterServer> {
  const log = options.log ?? createLog({ format: config.server.log_format });
  const hasher = await createHasher();
  const router = new Router({
    policy: createPolicy(config.routing.policy),
    index: new PrefixIndex({ maxEntries: config.routing.index_max_entries, ttlMs: config.routing.index_ttl_ms }),
    hasher,
    maxInflight: config.routing.max_inflight,
    cacheAware: config.routing.cache_aware,
  });
  const fleet = new Fleet(config.replicas, {
    log,
    fetch: options.fetch,
    healthPath: config.health.path,
    healthTimeoutMs: config.health.timeout_ms,
    onRecovered: (replica) => router.forget(replica.name),
  });
  await fleet.checkAll();

  const proxy = createProxy({ config, fleet, router, hasher, log, fetch: options.fetch, onRecord: options.onRecord });
  const app = createApp({ fleet, proxy });

  const server: Server<undefined> = Bun.serve({
    hostname: config.server.listen.host,
    port: config.server.listen.port,
    // Bodies are bounded by server.max_body in the proxy, with an API error instead of a bare 413.
    maxRequestBodySize: Math.max(config.server.max_body_bytes * 2, 1 << 30),
    fetch(req, srv) {
      // A cold prefill can keep a response silent for minutes; don't let the idle timer cut it.
      if (req.url.includes("/v1/")) srv.timeout(req, 0);
      return app.fetch(req);
    },
    error(error) {
      log.error("unhandled error", { error: error.message });
      return Response.json({ error: { message: "internal router error", type: "InternalServerError", param: null, code: 500 } }, { status: 500 });
    },
  });

  const timers = [
    setInterval(() => void guard("health", () => fleet.checkAll()), config.health.interval_ms),
    setInterval(() => void guard("recheck", () => fleet.checkAll(true)), Math.min(config.health.interval_ms, DOWN_RECHECK_MS)),
    setInterval(() => router.index.evict(Date.now()), Math.min(config.routing.index_ttl_ms, 60_000)),
  ];
  const busy = new Set<string>();
  async function guard(name: string, task: () => Promise<void>) {
    if (busy.has(name)) return;
    busy.add(name);
    try {
      await task();
    } finally {
      busy.delete(name);
    }
  }

  const url = `http://${server.hostname?.includes(":") ? `[${server.hostname}]` : server.hostname}:${server.port}`;
  log.info(`listening on ${url}`, {
    policy: config.routing.policy,
    replicas: fleet.replicas.map((r) => `${r.name}${r.healthy ? "" : "(down)"}`).join(","),
  });

  return {
    url,
    port: server.port!,
    config,
    fleet,
    router,
    app,
    log,
    async stop({ drainMs = 0 } = {}) {
      for (const t of timers) clearInterval(t);
      if (drainMs > 0) {
        const drained = server.stop(false);
        const timedOut = await Promise.race([drained.then(() => false), Bun.sleep(drainMs).then(() => true)]);
        if (timedOut) log.warn("drain timeout: closing remaining connections", { drain_ms: drainMs });
      }
      await server.stop(true);
    },
  };
}
