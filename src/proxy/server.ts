/**
 * A running router: builds fleet, index, policy and proxy from a Config, listens with
 * Bun.serve (the only place that does), and owns the schedules — health checks, index
 * eviction, capacity readings, state-file saves. Also the lifecycle: reload, drain (and
 * cutting what the drain timeout leaves), and the state file on start and stop.
 * Used by `llmroute serve`, the bench (in-process, one per policy) and tests.
 */
import type { Server } from "bun";
import { Cluster } from "../cluster/cluster.ts";
import { changedKeys, needsRestart, type Config } from "../config.ts";
import { CapacityWatch } from "../fleet/capacity.ts";
import type { FetchLike } from "../engines/discover.ts";
import { Fleet } from "../fleet/fleet.ts";
import { createLog, type Log } from "../log.ts";
import { loadState, saveState } from "../ops/state-file.ts";
import { kvView, Telemetry } from "../ops/telemetry.ts";
import { createHasher } from "../route/hash.ts";
import { createPolicy } from "../route/policies/index.ts";
import { PrefixIndex } from "../route/prefix.ts";
import { Router } from "../route/router.ts";
import { createApp, type App } from "./app.ts";
import { createProxy, type RequestRecord } from "./proxy.ts";
import type { Reachability } from "./reachability.ts";

export interface RouterServer {
  url: string;
  port: number;
  /** The admin listener's URL when server.admin_listen is set. */
  adminUrl?: string;
  readonly config: Config;
  fleet: Fleet;
  router: Router;
  telemetry: Telemetry;
  /** Shared state with the other router instances, when [cluster] is configured. */
  cluster?: Cluster;
  app: App;
  log: Log;
  /** Apply a new config: replicas added/removed, policy and thresholds changed; pins of surviving replicas kept. */
  reload(next: Config): Promise<void>;
  /** Stop listening and the schedules; with `drainMs`, let in-flight requests finish first. */
  stop(options?: { drainMs?: number }): Promise<void>;
}

export interface StartOptions {
  log?: Log;
  fetch?: FetchLike;
  reachability?: Reachability;
  /** How long a request body may take to arrive (default 60 s). */
  bodyTimeoutMs?: number;
  onRecord?: (record: RequestRecord) => void;
}

/** How often replicas that are down are re-checked, at most: a restart is noticed quickly. */
const DOWN_RECHECK_MS = 2_000;
const CAPACITY_EVERY_MS = 2_000;
/** After the drain timeout cuts what is left, how long the cut responses get to reach their clients. */
const CUT_FLUSH_MS = 1_000;

export async function startRouter(initial: Config, options: StartOptions = {}): Promise<RouterServer> {
  let config = initial;
  const log = options.log ?? createLog({ format: config.server.log_format });

  // Bind first: a busy port fails here, before the state file is read, a replica checked or
  // the cluster joined (each would log as if the router were starting). A request that
  // arrives meanwhile waits for the start to finish; /health answers 503 at once, so a load
  // balancer does not count a starting router in.
  let apps: { api: App; admin?: App } | undefined;
  let started!: () => void;
  const ready = new Promise<void>((resolve) => (started = resolve));
  const listen = (l: Config["server"]["listen"], which: "api" | "admin"): Server<undefined> =>
    Bun.serve({
      hostname: l.host,
      port: l.port,
      // Bodies are bounded by server.max_body in the proxy, with an API error instead of a bare 413.
      maxRequestBodySize: Math.max(config.server.max_body_bytes * 2, 1 << 30),
      async fetch(req, srv) {
        // A cold prefill can keep a response silent for minutes; don't let the idle timer cut
        // it (routing.first_byte_timeout and stream_idle_timeout bound it instead).
        const health = req.url.endsWith("/health");
        if (!health) srv.timeout(req, 0);
        const client = { ip: srv.requestIP(req)?.address };
        if (!apps) {
          if (health) return Response.json({ status: "starting", healthy: [], replicas: config.replicas.length }, { status: 503 });
          await ready;
        }
        return apps![which]!.fetch(req, client);
      },
      error(error) {
        log.error("unhandled error", { error: error.message });
        return Response.json({ error: { message: "internal router error", type: "InternalServerError", param: null, code: 500 } }, { status: 500 });
      },
    });
  const separateAdmin = config.server.admin_listen !== undefined;
  const server = listen(config.server.listen, "api");
  let admin: Server<undefined> | undefined;
  try {
    admin = separateAdmin ? listen(config.server.admin_listen!, "admin") : undefined;
  } catch (error) {
    await server.stop(true);
    throw error;
  }

  logNotes(log, config);
  const hasher = createHasher();
  const indexOptions = (c: Config) => ({ maxEntries: c.routing.index_max_entries, ttlMs: c.routing.index_ttl_ms, windowMs: c.routing.capacity_window_ms });
  const router = new Router({
    policy: createPolicy(config.routing.policy),
    index: new PrefixIndex(indexOptions(config)),
    hasher,
    maxInflight: config.routing.max_inflight,
    cacheAware: config.routing.cache_aware,
  });
  const fleet = new Fleet(config.replicas, {
    log,
    fetch: options.fetch,
    healthPath: config.health.path,
    healthTimeoutMs: config.health.timeout_ms,
    failures: config.health.failures,
    onCacheLost: (replica) => router.forget(replica.name),
    // An engine whose responses carry no cached tokens is judged by its cache counters per
    // window instead (vLLM without --enable-prompt-tokens-details).
    onCounters: (replica, delta) => {
      if (replica.facts?.cachedTokensSeen) return;
      const held = router.index.workingSetChars(replica.name) / replica.charsPerToken;
      router.windowFeedback(replica.name, delta.hits, held, replica.kvBelief ?? Infinity, Date.now());
    },
  });
  const capacity = new CapacityWatch(log, () => config.routing.policy);
  const startedAt = Date.now();
  const c = config.cluster;
  const cluster = c
    ? new Cluster(
        { redis: c.redis, name: c.name, namespace: c.namespace, catchUpTimeoutMs: c.catch_up_timeout_ms, snapshotMs: c.snapshot_interval_ms, responseTtlMs: config.routing.index_ttl_ms },
        { router, fleet, log },
      )
    : undefined;
  router.sink = cluster?.sink;
  const telemetry = new Telemetry(() => ({ config, fleet, router, capacity, startedAt, cluster }));

  try {
    if (config.routing.state_file) {
      // The index is a hint: an unreadable or corrupt file means a cold start, never a refusal to start.
      const loaded = await loadState(config.routing.state_file, router, (name) => fleet.byName(name)?.config.url, config.routing.chunk_chars);
      if (loaded.status === "restored") log.info("restored routing state", { file: config.routing.state_file, ...loaded.counts });
      else if (loaded.status === "unusable") log.warn("routing state not restored; starting cold", { file: config.routing.state_file, reason: loaded.reason });
    }
    // A new instance catches up from the cluster (bounded by catch_up_timeout) before it serves.
    await Promise.all([fleet.checkAll(), cluster?.start()]);
  } catch (error) {
    await Promise.all([server.stop(true), admin?.stop(true)]);
    throw error;
  }
  // Every request that finished may have changed what the state file holds.
  let changes = 0;

  const proxy = createProxy({
    config: () => config,
    fleet,
    router,
    hasher,
    log,
    fetch: options.fetch,
    reachability: options.reachability,
    bodyTimeoutMs: options.bodyTimeoutMs,
    ...(cluster ? { cluster } : {}),
    onRecord: (record) => {
      changes++;
      telemetry.record(record);
      options.onRecord?.(record);
    },
  });
  // Each card's remembered prefixes are bounded by what its KV is believed to hold — what the
  // engine publishes and router.toml says, bounded by the evidence of hits and misses — in
  // characters as its tokenisation was measured; a card of unknown KV keeps only the global bound.
  // When the evidence contradicts kv_tokens (or the engine's own figure), the log says so once, with both figures.
  const contradicted = new Map<string, string>();
  const syncBudgets = () => {
    const now = Date.now();
    for (const r of fleet.replicas) {
      r.kvBelief = router.believedKvTokens(r.name, r.startingKvTokens(), now, config.routing.capacity_window_ms);
      router.index.setBudget(r.name, r.kvBelief !== undefined ? r.kvBelief * r.charsPerToken : undefined);
      const { contradiction } = kvView(r, router.evidence.of(r.name).capacity);
      const kind = contradiction?.split(":")[0];
      if (kind && contradicted.get(r.name) !== kind) log.warn(`capacity: ${r.name}: ${contradiction}`, { replica: r.name, kv_tokens: r.config.kv_tokens, believed_kv_tokens: r.kvBelief });
      if (kind) contradicted.set(r.name, kind);
      else contradicted.delete(r.name);
    }
  };
  syncBudgets();
  const refreshCapacity = () => {
    syncBudgets();
    capacity.update(fleet.replicas, router.index.activeWorkingSet(Date.now()), Date.now(), (name) => router.index.windowTips(name));
  };
  let adminUrl: string | undefined;
  const appDeps = { fleet, proxy, telemetry, apiKeys: () => config.server.api_keys, beforeAdmin: refreshCapacity, adminUrl: () => adminUrl };
  const app = createApp({ ...appDeps, serves: { api: true, admin: !separateAdmin } });
  apps = { api: app, ...(admin ? { admin: createApp({ ...appDeps, serves: { api: false, admin: true } }) } : {}) };
  started();

  const busy = new Set<string>();
  const guard = async (name: string, task: () => Promise<void>) => {
    if (busy.has(name)) return;
    busy.add(name);
    try {
      await task();
    } finally {
      busy.delete(name);
    }
  };
  let savedAt = 0;
  let saving: Promise<void> | undefined;
  const persist = async (why: "interval" | "stop") => {
    const file = config.routing.state_file;
    if (!file || (why === "interval" && changes === savedAt)) return;
    const at = changes;
    try {
      const saved = await saveState(file, router, Object.fromEntries(fleet.replicas.map((r) => [r.name, r.config.url])), config.routing.chunk_chars);
      savedAt = at;
      if (why === "stop") log.info("saved routing state", { file, ...saved });
      else log.debug("saved routing state", { file, ...saved });
    } catch (error) {
      log.error("could not save routing state", { file, error: (error as Error).message });
    }
  };
  let timers: ReturnType<typeof setInterval>[] = [];
  const schedule = () => {
    for (const t of timers) clearInterval(t);
    timers = [
      setInterval(() => void guard("health", () => fleet.checkAll()), config.health.interval_ms),
      setInterval(() => void guard("recheck", () => fleet.checkAll(true)), Math.min(config.health.interval_ms, DOWN_RECHECK_MS)),
      setInterval(() => router.index.evict(Date.now()), Math.min(config.routing.index_ttl_ms, 60_000)),
      setInterval(refreshCapacity, CAPACITY_EVERY_MS),
      // A crash or an OOM kill loses at most this much of the index.
      setInterval(() => {
        saving ??= persist("interval").finally(() => (saving = undefined));
      }, config.routing.state_interval_ms),
    ];
  };
  schedule();

  const urlOf = (s: Server<undefined>) => `http://${s.hostname?.includes(":") ? `[${s.hostname}]` : s.hostname}:${s.port}`;
  const url = urlOf(server);
  adminUrl = admin ? urlOf(admin) : undefined;
  log.info(`listening on ${url}`, {
    policy: config.routing.policy,
    replicas: fleet.replicas.map((r) => `${r.name}${r.healthy ? "" : "(down)"}`).join(","),
    ...(admin ? { admin: urlOf(admin) } : {}),
  });

  return {
    url,
    port: server.port!,
    ...(admin ? { adminUrl: urlOf(admin) } : {}),
    get config() {
      return config;
    },
    fleet,
    router,
    telemetry,
    ...(cluster ? { cluster } : {}),
    app,
    log,
    async reload(next) {
      const changed = changedKeys(config, next);
      const restart = changed.filter(needsRestart);
      if (restart.length > 0) log.warn("reload: these settings need a restart and keep their old values", { keys: restart.join(",") });
      next = { ...next, cluster: config.cluster, server: { ...next.server, listen: config.server.listen, admin_listen: config.server.admin_listen, log_format: config.server.log_format } };
      logNotes(log, next);
      const { added, removed, replaced } = fleet.reconcile(next.replicas);
      // A replica whose URL changed is another engine: what the old one cached is not there.
      for (const name of [...removed, ...replaced]) {
        // This instance's config changed, not the replica: the other instances are not told.
        router.forget(name, false);
        capacity.drop(name);
      }
      router.policy = createPolicy(next.routing.policy);
      router.maxInflight = next.routing.max_inflight;
      router.cacheAware = next.routing.cache_aware;
      router.index.configure(indexOptions(next));
      syncBudgets();
      fleet.configure({ healthPath: next.health.path, healthTimeoutMs: next.health.timeout_ms, failures: next.health.failures });
      config = next;
      schedule();
      // Every replica is asked again what it is: an engine may have been replaced behind its URL.
      for (const r of fleet.replicas) r.watch.rediscover = true;
      await fleet.checkAll();
      log.info("config reloaded", {
        changed: changed.filter((k) => !needsRestart(k)).join(",") || "nothing",
        policy: next.routing.policy,
        replicas: fleet.replicas.map((r) => r.name).join(","),
        added: added.join(","),
        removed: removed.join(","),
      });
    },
    async stop({ drainMs = 0 } = {}) {
      for (const t of timers) clearInterval(t);
      const servers = [server, ...(admin ? [admin] : [])];
      if (drainMs > 0) {
        const drained = server.stop(false);
        const within = (ms: number) => Promise.race([drained.then(() => true), Bun.sleep(ms).then(() => false)]);
        if (!(await within(drainMs))) {
          // What is left ends with the API's error (503, or an error event in a stream) rather
          // than a connection closed without a word; each is logged as drain_timeout.
          log.warn("drain timeout: ending the requests still in flight", { drain_ms: drainMs, requests: proxy.active });
          proxy.cutAll();
          await within(CUT_FLUSH_MS);
        }
      }
      await Promise.all(servers.map((s) => s.stop(true)));
      await cluster?.stop();
      await saving;
      await persist("stop");
    },
  };
}

/** What the loader changed in what was written (a replica URL's /v1), said once per load. */
function logNotes(log: Log, config: Config): void {
  for (const note of config.notes) log.info(`config: ${note.reason}`, { file: note.file, line: note.line, key: note.key, value: String(note.value) });
}
