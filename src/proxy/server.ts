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
  const listeners = await listen(config, log);
  logNotes(log, config);
  const { hasher, router, fleet, capacity, cluster, telemetry } = assemble(config, () => config, options, log);

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
    await listeners.stop(true);
    throw error;
  }

  const upkeep = new Upkeep(() => config, fleet, router, capacity, log);
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
      upkeep.changed();
      telemetry.record(record);
      options.onRecord?.(record);
    },
  });
  upkeep.syncBudgets();
  const { server, admin } = listeners;
  let adminUrl: string | undefined;
  const appDeps = { fleet, proxy, telemetry, apiKeys: () => config.server.api_keys, beforeAdmin: () => upkeep.refreshCapacity(), adminUrl: () => adminUrl };
  const app = createApp({ ...appDeps, serves: { api: true, admin: !admin } });
  listeners.serve({ api: app, ...(admin ? { admin: createApp({ ...appDeps, serves: { api: false, admin: true } }) } : {}) });
  upkeep.schedule();

  const url = urlOf(server);
  adminUrl = admin ? urlOf(admin) : undefined;
  log.info(`listening on ${url}`, {
    policy: config.routing.policy,
    replicas: fleet.replicas.map((r) => `${r.name}${r.healthy ? "" : "(down)"}`).join(","),
    ...(adminUrl ? { admin: adminUrl } : {}),
  });

  return {
    url,
    port: server.port!,
    ...(adminUrl ? { adminUrl } : {}),
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
      const { inForce, changed, added, removed } = reconfigure(config, next, { fleet, router, capacity, log, upkeep });
      config = inForce;
      upkeep.schedule();
      // Every replica is asked again what it is: an engine may have been replaced behind its URL.
      for (const r of fleet.replicas) r.watch.rediscover = true;
      await fleet.checkAll();
      log.info("config reloaded", {
        changed: changed.filter((k) => !needsRestart(k)).join(",") || "nothing",
        policy: config.routing.policy,
        replicas: fleet.replicas.map((r) => r.name).join(","),
        added: added.join(","),
        removed: removed.join(","),
      });
    },
    async stop({ drainMs = 0 } = {}) {
      upkeep.stop();
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
      await listeners.stop(true);
      await cluster?.stop();
      await upkeep.persist("stop");
    },
  };
}

interface Listeners {
  server: Server<undefined>;
  admin?: Server<undefined>;
  /** Start answering with these apps (until then a request waits; /health answers 503 "starting"). */
  serve(apps: { api: App; admin?: App }): void;
  stop(closeActive: boolean): Promise<void>;
}

/**
 * Bind first: a busy port fails here, before the state file is read, a replica checked or
 * the cluster joined (each would log as if the router were starting). A request that
 * arrives meanwhile waits for the start to finish; /health answers 503 at once, so a load
 * balancer does not count a starting router in.
 */
async function listen(config: Config, log: Log): Promise<Listeners> {
  let apps: { api: App; admin?: App } | undefined;
  let started!: () => void;
  const ready = new Promise<void>((resolve) => (started = resolve));
  const bind = (l: Config["server"]["listen"], which: "api" | "admin"): Server<undefined> =>
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
  const server = bind(config.server.listen, "api");
  let admin: Server<undefined> | undefined;
  try {
    admin = config.server.admin_listen !== undefined ? bind(config.server.admin_listen, "admin") : undefined;
  } catch (error) {
    await server.stop(true);
    throw error;
  }
  return {
    server,
    ...(admin ? { admin } : {}),
    serve(next) {
      apps = next;
      started();
    },
    async stop(closeActive) {
      await Promise.all([server.stop(closeActive), admin?.stop(closeActive)]);
    },
  };
}

/** The routing core, the fleet, the capacity watch, the cluster link and telemetry for a config. */
function assemble(config: Config, current: () => Config, options: StartOptions, log: Log) {
  const hasher = createHasher();
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
  const capacity = new CapacityWatch(log, () => current().routing.policy);
  const startedAt = Date.now();
  const c = config.cluster;
  const cluster = c
    ? new Cluster(
        { redis: c.redis, name: c.name, namespace: c.namespace, catchUpTimeoutMs: c.catch_up_timeout_ms, snapshotMs: c.snapshot_interval_ms, responseTtlMs: config.routing.index_ttl_ms },
        { router, fleet, log },
      )
    : undefined;
  router.sink = cluster?.sink;
  const telemetry = new Telemetry(() => ({ config: current(), fleet, router, capacity, startedAt, cluster }));
  return { hasher, router, fleet, capacity, cluster, telemetry };
}

const indexOptions = (c: Config) => ({ maxEntries: c.routing.index_max_entries, ttlMs: c.routing.index_ttl_ms, windowMs: c.routing.capacity_window_ms });

const urlOf = (s: Server<undefined>) => `http://${s.hostname?.includes(":") ? `[${s.hostname}]` : s.hostname}:${s.port}`;

/**
 * The router's schedules — health checks (and quicker re-checks of replicas that are down),
 * index eviction, capacity readings, state-file saves — and what they keep in step: each
 * card's KV budget in the index.
 */
class Upkeep {
  private timers: ReturnType<typeof setInterval>[] = [];
  private readonly busy = new Set<string>();
  /** Requests finished (each may have changed what the state file holds), and as of the last save. */
  private changes = 0;
  private savedAt = 0;
  private saving: Promise<void> | undefined;
  /** Per replica, the kind of KV contradiction last logged: the log says it once. */
  private readonly contradicted = new Map<string, string>();

  constructor(
    private readonly config: () => Config,
    private readonly fleet: Fleet,
    private readonly router: Router,
    private readonly capacity: CapacityWatch,
    private readonly log: Log,
  ) {}

  changed(): void {
    this.changes++;
  }

  /**
   * Each card's remembered prefixes are bounded by what its KV is believed to hold — what the
   * engine publishes and router.toml says, bounded by the evidence of hits and misses — in
   * characters as its tokenisation was measured; a card of unknown KV keeps only the global
   * bound. When the evidence contradicts kv_tokens (or the engine's own figure), the log says
   * so once, with both figures.
   */
  syncBudgets(): void {
    const now = Date.now();
    for (const r of this.fleet.replicas) {
      r.kvBelief = this.router.believedKvTokens(r.name, r.startingKvTokens(), now, this.config().routing.capacity_window_ms);
      this.router.index.setBudget(r.name, r.kvBelief !== undefined ? r.kvBelief * r.charsPerToken : undefined);
      const { contradiction } = kvView(r, this.router.evidence.of(r.name).capacity);
      const kind = contradiction?.split(":")[0];
      if (kind && this.contradicted.get(r.name) !== kind) this.log.warn(`capacity: ${r.name}: ${contradiction}`, { replica: r.name, kv_tokens: r.config.kv_tokens, believed_kv_tokens: r.kvBelief });
      if (kind) this.contradicted.set(r.name, kind);
      else this.contradicted.delete(r.name);
    }
  }

  refreshCapacity(): void {
    this.syncBudgets();
    this.capacity.update(this.fleet.replicas, this.router.index.activeWorkingSet(Date.now()), Date.now(), (name) => this.router.index.windowTips(name));
  }

  /** (Re)start the schedules at the current config's intervals. */
  schedule(): void {
    const config = this.config();
    for (const t of this.timers) clearInterval(t);
    this.timers = [
      setInterval(() => void this.guard("health", () => this.fleet.checkAll()), config.health.interval_ms),
      setInterval(() => void this.guard("recheck", () => this.fleet.checkAll(true)), Math.min(config.health.interval_ms, DOWN_RECHECK_MS)),
      setInterval(() => this.router.index.evict(Date.now()), Math.min(config.routing.index_ttl_ms, 60_000)),
      setInterval(() => this.refreshCapacity(), CAPACITY_EVERY_MS),
      // A crash or an OOM kill loses at most this much of the index.
      setInterval(() => {
        this.saving ??= this.persist("interval").finally(() => (this.saving = undefined));
      }, config.routing.state_interval_ms),
    ];
  }

  stop(): void {
    for (const t of this.timers) clearInterval(t);
  }

  /** Save the state file, if one is configured: on the interval when something changed, on stop always (after a save under way). */
  async persist(why: "interval" | "stop"): Promise<void> {
    if (why === "stop") await this.saving;
    const file = this.config().routing.state_file;
    if (!file || (why === "interval" && this.changes === this.savedAt)) return;
    const at = this.changes;
    try {
      const saved = await saveState(file, this.router, Object.fromEntries(this.fleet.replicas.map((r) => [r.name, r.config.url])), this.config().routing.chunk_chars);
      this.savedAt = at;
      if (why === "stop") this.log.info("saved routing state", { file, ...saved });
      else this.log.debug("saved routing state", { file, ...saved });
    } catch (error) {
      this.log.error("could not save routing state", { file, error: (error as Error).message });
    }
  }

  /** Runs `task` unless the last one of that name is still running. */
  private async guard(name: string, task: () => Promise<void>): Promise<void> {
    if (this.busy.has(name)) return;
    this.busy.add(name);
    try {
      await task();
    } finally {
      this.busy.delete(name);
    }
  }
}

/**
 * Apply a new config to the fleet and the routing core: replicas added/removed, policy and
 * thresholds changed, pins of surviving replicas kept; settings that need a restart keep
 * their old values (warned). Returns the config to put in force and what changed.
 */
function reconfigure(
  config: Config,
  next: Config,
  parts: { fleet: Fleet; router: Router; capacity: CapacityWatch; log: Log; upkeep: Upkeep },
): { inForce: Config; changed: string[]; added: string[]; removed: string[] } {
  const { fleet, router, capacity, log, upkeep } = parts;
  const changed = changedKeys(config, next);
  const restart = changed.filter(needsRestart);
  if (restart.length > 0) log.warn("reload: these settings need a restart and keep their old values", { keys: restart.join(",") });
  const inForce = { ...next, cluster: config.cluster, server: { ...next.server, listen: config.server.listen, admin_listen: config.server.admin_listen, log_format: config.server.log_format } };
  logNotes(log, inForce);
  const { added, removed, replaced } = fleet.reconcile(inForce.replicas);
  // A replica whose URL changed is another engine: what the old one cached is not there.
  for (const name of [...removed, ...replaced]) {
    // This instance's config changed, not the replica: the other instances are not told.
    router.forget(name, false);
    capacity.drop(name);
  }
  router.policy = createPolicy(inForce.routing.policy);
  router.maxInflight = inForce.routing.max_inflight;
  router.cacheAware = inForce.routing.cache_aware;
  router.index.configure(indexOptions(inForce));
  upkeep.syncBudgets();
  fleet.configure({ healthPath: inForce.health.path, healthTimeoutMs: inForce.health.timeout_ms, failures: inForce.health.failures });
  return { inForce, changed, added, removed };
}

/** What the loader changed in what was written (a replica URL's /v1), said once per load. */
function logNotes(log: Log, config: Config): void {
  for (const note of config.notes) log.info(`config: ${note.reason}`, { file: note.file, line: note.line, key: note.key, value: String(note.value) });
}
