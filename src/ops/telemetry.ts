/**
 * What the router exposes about itself: Prometheus metrics (per-request truth summed per
 * replica, plus live gauges) and the /status document. Both read the same live state.
 */
import { shownUrl } from "../_shown-url.ts";
import pkg from "../../package.json" with { type: "json" };
import type { Cluster, ClusterStatus } from "../cluster/cluster.ts";
import type { CapacityWatch } from "../fleet/capacity.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Replica } from "../fleet/replica.ts";
import type { RequestRecord } from "../proxy/proxy.ts";
import type { CapacityEvidence } from "../route/evidence.ts";
import type { Router } from "../route/router.ts";
import { DEFAULT_METRICS_PATH, type Config } from "../config.ts";
import { missingFacts } from "../engines/discover.ts";
import { Registry } from "./prom.ts";
import { duration } from "./table.ts";
import { RecentRequests } from "./recent.ts";

export interface LiveState {
  config: Config;
  fleet: Fleet;
  router: Router;
  capacity: CapacityWatch;
  startedAt: number;
  /** Shared state with other router instances, when [cluster] is configured. */
  cluster?: Cluster;
}

const TTFT_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160];
const DURATION_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

export class Telemetry {
  readonly registry = new Registry();
  private readonly requests = this.registry.counter("llmroute_requests_total", "Requests finished, by replica, route reason, endpoint, HTTP status and outcome.");
  private readonly ttft = this.registry.histogram("llmroute_ttft_seconds", "Time to first byte of streamed responses, as seen by the router.", TTFT_BUCKETS);
  private readonly duration = this.registry.histogram("llmroute_request_duration_seconds", "Whole request time.", DURATION_BUCKETS);
  private readonly promptTokens = this.registry.counter("llmroute_prompt_tokens_total", "Prompt tokens reported by the engines' usage, summed.");
  private readonly cachedTokens = this.registry.counter("llmroute_cached_tokens_total", "Prompt tokens the engines reported as served from their prefix cache, summed.");
  private readonly completionTokens = this.registry.counter("llmroute_completion_tokens_total", "Completion tokens reported by the engines' usage, summed.");
  private readonly availableTokens = this.registry.counter(
    "llmroute_available_tokens_total",
    "Prompt tokens the index believed cached on some replica when the request was routed (hit rate, first of three: available).",
  );
  private readonly capturedTokens = this.registry.counter(
    "llmroute_captured_tokens_total",
    "Prompt tokens the index believed cached on the chosen replica (second of three: captured; the third, delivered, is llmroute_cached_tokens_total).",
  );
  private readonly predictions = this.registry.counter(
    "llmroute_cache_predictions_total",
    "Responses whose cached_tokens the router compared with its index: hit, miss (the engine had evicted it; the index is corrected), unexpected_hit, cold, unsettled.",
  );
  /** The last requests and the last minutes, for the dashboard. */
  readonly recent = new RecentRequests();

  constructor(readonly live: () => LiveState) {
    const replicas = () => this.live().fleet.replicas;
    const each = (f: (r: ReturnType<typeof replicas>[number]) => number) => () =>
      replicas().map((r): [Record<string, string>, number] => [{ replica: r.name }, f(r)]);
    const r = this.registry;
    r.gauge("llmroute_replica_up", "1 while the replica passes health checks.", each((x) => (x.healthy ? 1 : 0)));
    r.gauge("llmroute_replica_half_open", "1 while the replica is half-open: back from down, its next request a trial.", each((x) => (x.state === "half-open" ? 1 : 0)));
    r.gauge("llmroute_replica_consecutive_failures", "Failed requests (502/503/504, reset, timeout) since the replica last answered; health.failures demote it.", each((x) => x.health.consecutiveFailures));
    r.gauge("llmroute_timeouts_total", "Upstream deadlines that fired: connect and first_byte (failed over), stream_idle (stream ended).", () =>
      replicas().flatMap((x) => (["connect", "first_byte", "stream_idle"] as const).map((kind): [Record<string, string>, number] => [{ replica: x.name, kind }, x.stats.timeouts[kind]])), "counter");
    r.gauge("llmroute_cache_losses_total", "Times the replica's cache was declared lost (it refused connections at a check, or its engine restarted) and its prefixes forgotten.", each((x) => x.stats.cacheLosses), "counter");
    r.gauge("llmroute_panic_routes_total", "Requests routed while every replica of their pool was down (panic mode: routed to all).", () => [[{}, this.live().fleet.panic.routes]], "counter");
    r.gauge("llmroute_inflight", "Requests in flight to the replica through this router.", each((x) => x.inflight));
    r.gauge("llmroute_failovers_total", "Requests that failed on this replica before the first byte and were retried elsewhere.", each((x) => x.stats.failovers), "counter");
    r.gauge("llmroute_slot_holds_total", "Requests the router held for the replica's slot that kept their prefix, busy with another request (llama.cpp gives a request an idle slot, which would prefill the prefix again): route reason suffix ',held'. Each counted once, however its wait ended (the slot freed, the wait reached the prefill it would save, the client left).", each((x) => x.stats.holds), "counter");
    r.gauge("llmroute_slot_held_seconds_total", "Seconds those requests waited for the slot, in all.", each((x) => x.stats.heldMs / 1000), "counter");
    r.gauge("llmroute_kv_full_total", "Requests the replica's engine turned away before the first byte because its KV could not hold them beside the running ones (llama.cpp's unified KV: \"Context size has been exceeded.\"); each was failed over.", each((x) => x.stats.kvFull), "counter");
    r.gauge("llmroute_prompts_over_context_total", "Prompts sent to the replica longer than the context its engine cuts them to (Ollama's num_ctx, from /api/ps): the engine dropped their oldest messages, so their cache could not be reused.", each((x) => x.stats.overContext), "counter");
    r.gauge("llmroute_engine_busy_total", "Requests the replica's engine turned away before computing anything because its queue was full (Ollama's scheduler, vLLM's admission control); each was sent elsewhere, or answered 503 when no other replica was left to try.", each((x) => x.stats.busy), "counter");
    r.gauge("llmroute_index_entries", "Prefix index entries held per replica.", each((x) => this.live().router.index.replicaStats(x.name).entries));
    r.gauge("llmroute_conversations", "Remembered prompt tips (conversations and one-shots) per replica.", each((x) => this.live().router.index.replicaStats(x.name).tips));
    r.gauge("llmroute_working_set_tokens", "Estimated tokens of distinct prefixes used within routing.capacity_window.", () =>
      this.live().capacity.readings.map((c): [Record<string, string>, number] => [{ replica: c.replica }, c.workingSetTokens]),
    );
    r.gauge("llmroute_kv_budget_tokens", "The KV the router believes the replica holds: the engine's published capacity and kv_tokens, bounded by the evidence of hits and misses (0 = unknown).", each((x) => x.kvBelief ?? 0));
    r.gauge("llmroute_fleet_working_set_tokens", "Distinct active prefixes across all replicas, each counted once.", () => [[{}, this.live().capacity.fleet.workingSetTokens]]);
    r.gauge("llmroute_capacity_exceeded", "1 while the replica's working set exceeds its KV budget.", () =>
      this.live().capacity.readings.map((c): [Record<string, string>, number] => [{ replica: c.replica }, c.over ? 1 : 0]),
    );
    r.gauge("llmroute_capacity_warnings_total", "Over-budget episodes warned about.", () =>
      replicas().map((x): [Record<string, string>, number] => [{ replica: x.name }, this.live().capacity.warnings.get(x.name) ?? 0]), "counter");
    r.gauge("llmroute_engine_requests_running", "Engine-reported running requests (scraped; absent when not scraped).", () => engine("running"));
    r.gauge("llmroute_engine_requests_waiting", "Engine-reported waiting requests (scraped).", () => engine("waiting"));
    r.gauge("llmroute_engine_kv_usage_ratio", "Engine-reported KV cache usage, 0..1 (scraped).", () => engine("kv_usage"));
    r.gauge("llmroute_prefill_queue_tokens", "Prompt tokens sent to the replica that have not reached their first byte (plus the engine's own queue where scraped).", each((x) => Math.round(x.prefill.withEngineQueue(x.engineWaiting))));
    r.gauge("llmroute_prefill_rate_tokens_per_second", "Measured prefill throughput the default policy prices a replica with.", each((x) => Math.round(x.prefill.rate)));
    r.gauge("llmroute_index_corrections_total", "Index entries dropped because the engine's cached_tokens showed it had evicted them.", each((x) => this.live().router.evidence.of(x.name).corrected), "counter");
    r.gauge("llmroute_index_memory_bytes", "Bytes held by the prefix index's arrays.", () => [[{}, this.live().router.index.memoryBytes()]]);
    r.gauge("llmroute_chars_per_token", "Learned characters of prompt per engine token (calibrates token estimates).", each((x) => Math.round(x.charsPerToken * 1000) / 1000));
    const cluster = (f: (c: Cluster) => number) => () => {
      const c = this.live().cluster;
      return c ? [[{}, f(c)] as [Record<string, string>, number]] : [];
    };
    r.gauge("llmroute_cluster_connected", "1 while this instance reaches the cluster's Redis (absent without [cluster]).", cluster((c) => (c.state === "up" ? 1 : 0)));
    r.gauge("llmroute_cluster_instances", "Router instances seen alive in the cluster, this one included.", cluster((c) => c.instanceCount()));
    r.gauge("llmroute_cluster_sync_lag_seconds", "How old the newest event from another instance was when this instance applied it.", cluster((c) => c.lagMs / 1000));
    r.gauge("llmroute_cluster_backlog_events", "Events learned here and not yet shared (Redis away or slow).", cluster((c) => c.backlogEvents()));
    r.gauge("llmroute_cluster_disconnects_total", "Times this instance lost Redis.", cluster((c) => c.counts.disconnects), "counter");
    r.gauge("llmroute_cluster_events_total", "Cluster events: sent (shared by this instance), applied (from others), dropped (backlog full), malformed, other_version (from an instance of another llmroute version), unencodable (not shared).", () => {
      const c = this.live().cluster;
      if (!c) return [];
      return (["sent", "applied", "dropped", "malformed", "other_version", "unencodable"] as const).map((k): [Record<string, string>, number] => [{ direction: k }, c.counts[k]]);
    }, "counter");
    const engine = (signal: "running" | "waiting" | "kv_usage") =>
      replicas().flatMap((x): [Record<string, string>, number][] => {
        const v = x.engine?.values[signal];
        return v === undefined ? [] : [[{ replica: x.name }, v]];
      });
  }

  record(rec: RequestRecord): void {
    this.recent.record(rec, Date.now());
    const replica = rec.replica ?? "none";
    this.requests.inc({ replica, route: rec.route ?? "none", endpoint: rec.endpoint, status: String(rec.status), outcome: rec.outcome });
    if (!rec.replica) return;
    this.duration.observe({ replica }, rec.totalMs / 1000);
    if (rec.ttftMs !== undefined) this.ttft.observe({ replica }, rec.ttftMs / 1000);
    if (rec.promptTokens) this.promptTokens.inc({ replica }, rec.promptTokens);
    if (rec.cachedTokens) this.cachedTokens.inc({ replica }, rec.cachedTokens);
    if (rec.completionTokens) this.completionTokens.inc({ replica }, rec.completionTokens);
    if (rec.availableTokens) this.availableTokens.inc({ replica }, rec.availableTokens);
    if (rec.capturedTokens) this.capturedTokens.inc({ replica }, rec.capturedTokens);
    if (rec.verdict) this.predictions.inc({ replica, verdict: rec.verdict });
  }

  metrics(): string {
    return this.registry.render();
  }

  status(now: number): StatusDocument {
    const { config, fleet, router, capacity, startedAt, cluster } = this.live();
    const clusterStatus = cluster?.status(now);
    const readings = new Map(capacity.readings.map((c) => [c.replica, c]));
    const findings: Finding[] = [];
    const replicas = fleet.replicas.map((r): ReplicaStatus => {
      const stats = router.index.replicaStats(r.name);
      const cap = readings.get(r.name);
      const prompt = this.promptTokens.get({ replica: r.name });
      const cached = this.cachedTokens.get({ replica: r.name });
      const warnings: string[] = [];
      // Each warning twice: its text as /status always gave it (`llmroute status`, scripts),
      // and structured, a short line with its details apart (the dashboard's list).
      const warn = (kind: FindingKind, text: string, line = text, details: string | null = null) => {
        warnings.push(text);
        findings.push({ id: `${r.name}/${kind}`, replica: r.name, kind, line, details });
      };
      if (cap?.over && cap.finding) warn("capacity", cap.finding, cap.finding, cap.advice ?? null);
      const wall = r.wall.wall && now < r.wall.wall.until ? r.wall.wall : undefined;
      if (wall) {
        const tokens = Math.round(wall.tokens).toLocaleString("en-US");
        warn(
          "capacity",
          `its KV turned requests away as full with ~${tokens} prompt tokens in flight (llama.cpp: "Context size has been exceeded."): requests there take turns below that until ${new Date(wall.until).toISOString()}`,
          `KV full with ~${tokens} prompt tokens in flight: requests there take turns`,
          `The engine failed the requests it was running together because its KV could not hold them (a llama.cpp unified KV: all slots share one n_ctx). The router sent them again and holds requests to this card while the prompts in flight there would reach 90 % of ~${tokens} tokens, so they wait instead of failing.${config.routing.policy === "hybrid" ? " The running policy, hybrid, can move a conversation whose turns wait here to a card where it fits beside what runs, once the waits have cost as much as prefilling it there (route reason wall)." : ""} What helps: a larger -c, fewer concurrent long conversations per card, or more cards.`,
        );
      }
      if (r.state !== "up" && r.health.lastError) warn("health", ...healthWarning(r, now, config.health.interval_ms / 1000));
      const evidence = router.evidence.of(r.name);
      if (evidence.distrusted) {
        warn(
          "cache_off",
          `reported no cached tokens on ${evidence.misses} requests the index expected cached: its prefix cache may be off or unreported (check with llmroute probe); the index is not corrected from its reports`,
          `prefix cache may be off: no cached tokens on ${evidence.misses} requests expected cached`,
          `The index expected a cached prefix on ${evidence.misses} requests here and the engine reported none: its prefix cache may be off, or it does not report cached tokens. Check with llmroute probe --replica ${r.name} (a long prompt sent twice: a working cache answers the second far sooner). Until it reports a hit, the index is not corrected from its reports.`,
        );
      }
      const kv = kvView(r, evidence.capacity);
      if (kv.contradiction) warn("kv_tokens", kv.contradiction, kv.finding!.line, kv.finding!.details);
      const metricsAt = r.engine ? ` The last read: ${duration(Math.max(0, now - r.engine.at) / 1000)} ago, from ${shownUrl(r.config.url)}${r.config.metrics || DEFAULT_METRICS_PATH}.` : "";
      if (r.engine?.error) {
        warn(
          "engine_metrics",
          `engine metrics: ${r.engine.error}`,
          `engine metrics: ${r.engine.error}`,
          `The router reads the engine's /metrics at each health check.${metricsAt} Without them it sees neither the engine's queue nor its KV use, and cannot tell a restart of the engine from its counters.`,
        );
      } else if (r.engine && r.engine.missing.length > 0) {
        warn(
          "engine_metrics",
          `engine metrics missing: ${r.engine.missing.join(", ")}`,
          `engine metrics missing: ${r.engine.missing.join(", ")}`,
          `The engine's /metrics answered${r.engine.family ? ` as ${r.engine.family}` : ""} without a value for ${r.engine.missing.join(", ")}: the router leaves ${r.engine.missing.length === 1 ? "it" : "them"} unknown rather than guessing.${metricsAt}`,
        );
      }
      return {
        name: r.name,
        url: shownUrl(r.config.url),
        healthy: r.healthy,
        state: r.state,
        health_path: fleet.watch.healthPathOf(r),
        consecutive_failures: r.health.consecutiveFailures,
        timeouts: { ...r.stats.timeouts },
        cache_losses: r.stats.cacheLosses,
        last_error: r.health.lastError ? { message: r.health.lastError.message, at: new Date(r.health.lastError.at).toISOString() } : null,
        inflight: r.inflight,
        served: r.stats.served,
        failovers: r.stats.failovers,
        kv_full: r.stats.kvFull,
        kv_wall: wall ? { tokens: Math.round(wall.tokens), until: new Date(wall.until).toISOString(), waited_s: Math.round(r.wall.waitedMs(now)) / 1000 } : null,
        busy: r.stats.busy,
        over_context: r.stats.overContext,
        models: r.cards.map((c) => c.id),
        conversations: stats.tips,
        index_entries: stats.entries,
        working_set_tokens: cap?.workingSetTokens ?? 0,
        kv_tokens: r.kvBelief ?? 0,
        kv: { configured: kv.configured, published: kv.published, evidence: kv.evidence, believed: r.kvBelief ?? null },
        working_set_ratio: cap ? Math.round(cap.ratio * 1000) / 1000 : 0,
        chars_per_token: Math.round(r.charsPerToken * 100) / 100,
        prompt_tokens: prompt,
        cached_tokens: cached,
        cached_ratio: prompt > 0 ? Math.round((cached / prompt) * 1000) / 1000 : null,
        hit: {
          available_tokens: this.availableTokens.get({ replica: r.name }),
          captured_tokens: this.capturedTokens.get({ replica: r.name }),
          delivered_tokens: cached,
          predictions: { hit: evidence.hits, miss: evidence.misses, template: evidence.templates, unexpected_hit: evidence.unexpectedHits },
          corrected_entries: evidence.corrected,
        },
        prefill: { queued_tokens: Math.round(r.prefill.withEngineQueue(r.engineWaiting)), rate_tokens_per_s: Math.round(r.prefill.rate) },
        engine: r.engine
          ? { family: r.engine.family ?? null, ...r.engine.values, missing: r.engine.missing, error: r.engine.error ?? null, at: new Date(r.engine.at).toISOString() }
          : null,
        facts: r.facts
          ? {
              family: r.facts.family ?? null,
              from: r.facts.familyFrom ?? null,
              version: r.facts.version ?? null,
              capacity: r.facts.capacity ?? null,
              metrics: r.facts.metrics.state === "ok" ? r.facts.metrics.path : r.facts.metrics.state,
              cache_counters: r.facts.cacheCounters,
              cached_tokens_in_responses: r.facts.cachedTokensSeen,
              missing: missingFacts(r.facts, { kvTokens: r.config.kv_tokens }),
            }
          : null,
        warnings,
        capacity_advice: cap?.over ? (cap.advice ?? null) : null,
      };
    });
    return {
      version: pkg.version,
      policy: config.routing.policy,
      uptime_s: Math.round((now - startedAt) / 1000),
      healthy: replicas.filter((r) => r.healthy).length,
      panic: fleet.panic.active(),
      index: { entries: router.index.size, max_entries: config.routing.index_max_entries, memory_bytes: router.index.memoryBytes() },
      capacity_window_s: Math.round(config.routing.capacity_window_ms / 1000),
      health_interval_s: config.health.interval_ms / 1000,
      fleet: { working_set_tokens: capacity.fleet.workingSetTokens, kv_tokens: capacity.fleet.kvTokens },
      replicas,
      cluster: clusterStatus ?? null,
      warnings: [...replicas.flatMap((r) => r.warnings.map((w) => `${r.name}: ${w}`)), ...(clusterStatus?.warnings.map((w) => `cluster: ${w}`) ?? [])],
      findings: [...findings, ...(clusterStatus ? clusterFindings(clusterStatus, now) : [])],
    };
  }
}

/**
 * A replica out of routing, with how long: "down for 3m05s: health check: connection
 * refused"; a half-open one says when it was demoted and why, and that a request decides.
 * [text as /status gives it, short line, details]
 */
function healthWarning(r: Fleet["replicas"][number], now: number, intervalS: number): [string, string, string] {
  const error = r.health.lastError!;
  const age = duration((now - (r.health.downSince ?? error.at)) / 1000);
  if (r.state === "half-open") {
    return [
      `half-open: demoted ${age} ago (${error.message}); its health check passes again, so its next request is a trial`,
      `half-open: demoted ${age} ago (${error.message})`,
      "Its health check passes again, so the next request sent there is a trial: its success brings the replica back into routing, a failure takes it down again.",
    ];
  }
  const back =
    r.health.demotedBy === "requests"
      ? `Failed requests took it out; when its health check (every ${intervalS} s) passes it turns half-open, and one trial request decides.`
      : `It is back in routing at the first health check that passes (every ${intervalS} s).`;
  const lost = r.health.cacheLost ? " Nothing listened on its port, so its cache went with the process: its prefixes are forgotten, and its conversations start cold where they go next." : "";
  return [`down for ${age}: ${error.message}`, `down for ${age}: ${error.message}`, `Requests for its models go to the other replicas that serve them (to all of them, this one included, while none is up: panic mode). ${back}${lost}`];
}

/**
 * The cluster's warnings come from the cluster as finished sentences; their details are the
 * cluster's own state. The id leaves out the figures (counts, times) that change while the
 * warning lasts, so a detail the reader opened stays open.
 */
function clusterFindings(c: ClusterStatus, now: number): Finding[] {
  const peers = c.instances.filter((i) => !i.self).map((i) => `${i.name} (heard ${duration(i.last_heartbeat_ms / 1000)} ago)`);
  const state = [
    `This instance, ${c.instances.find((i) => i.self)?.name ?? c.name}, shares routing state through Redis ${c.redis}: ${c.state} for ${duration(Math.max(0, now - Date.parse(c.since)) / 1000)}${c.last_error ? ` (last error: ${c.last_error})` : ""}.`,
    peers.length ? `Other instances: ${peers.join(", ")}.` : "No other instance seen.",
    `Backlog: ${c.backlog_events} events; events sent ${c.events.sent}, applied ${c.events.applied}, dropped ${c.events.dropped}.`,
  ].join(" ");
  return c.warnings.map((w) => ({ id: `cluster/${w.replace(/\d[\d,.:TZ-]*/g, "#")}`, replica: null, kind: "cluster", line: w, details: state }));
}

export type FindingKind = "capacity" | "health" | "cache_off" | "kv_tokens" | "engine_metrics" | "cluster";

/** One warning of /status, structured: a short line, and its details apart (the dashboard opens them on demand). */
export interface Finding {
  /** Stable while the condition lasts: "gpu0/capacity", "cluster/…". */
  id: string;
  /** The replica it is about; null for the cluster's. */
  replica: string | null;
  kind: FindingKind;
  line: string;
  /** Why, and what helps; null when the line says all there is. */
  details: string | null;
}

export interface ReplicaStatus {
  name: string;
  url: string;
  healthy: boolean;
  state: "up" | "half-open" | "down";
  /** Where its health is checked: its health_path, the engine's own (learnt), or health.path. */
  health_path: string;
  consecutive_failures: number;
  timeouts: { connect: number; first_byte: number; stream_idle: number };
  cache_losses: number;
  last_error: { message: string; at: string } | null;
  inflight: number;
  served: number;
  failovers: number;
  /** Requests turned away because the engine's KV was full (each failed over). */
  kv_full: number;
  /**
   * The KV wall standing there (in-flight prompt tokens its engine failed at), until when, and
   * how long requests have waited at it within the capacity window since a conversation last
   * left it for it (hybrid's `wall`); null while none stands.
   */
  kv_wall: { tokens: number; until: string; waited_s: number } | null;
  /** Requests its engine turned away with a full queue (failed over). */
  busy: number;
  /** Prompts sent longer than the context its engine cuts them to (Ollama's num_ctx). */
  over_context: number;
  models: string[];
  conversations: number;
  index_entries: number;
  working_set_tokens: number;
  /** The KV the router believes the replica holds (0 = unknown). */
  kv_tokens: number;
  /** Where that belief comes from. */
  kv: {
    configured: number | null;
    published: { tokens: number; from: string } | null;
    evidence: { lower_tokens: number | null; upper_tokens: number | null };
    believed: number | null;
  };
  working_set_ratio: number;
  chars_per_token: number;
  prompt_tokens: number;
  cached_tokens: number;
  cached_ratio: number | null;
  /** The hit rate explained: cached somewhere (available), on the chosen replica (captured), by the engine (delivered). */
  hit: {
    available_tokens: number;
    captured_tokens: number;
    delivered_tokens: number;
    predictions: { hit: number; miss: number; template: number; unexpected_hit: number };
    corrected_entries: number;
  };
  prefill: { queued_tokens: number; rate_tokens_per_s: number };
  engine: Record<string, unknown> | null;
  /** What the engine is, as discovered: family, version, capacity, counters, what is missing and how to add it. */
  facts: Record<string, unknown> | null;
  /** One line each: what needs a look. */
  warnings: string[];
  /** While its working set is over kv_tokens: why, and what helps under the running policy (the capacity warning's details). */
  capacity_advice: string | null;
}

export interface StatusDocument {
  version: string;
  policy: string;
  uptime_s: number;
  healthy: number;
  /** Every replica of a pool is down and requests go to all of them. */
  panic: boolean;
  index: { entries: number; max_entries: number; memory_bytes: number };
  capacity_window_s: number;
  /** How often replicas are checked (and engines scraped): an older scrape is stale. */
  health_interval_s: number;
  /** Distinct prefixes across replicas (each once) vs the summed kv_tokens. */
  fleet: { working_set_tokens: number; kv_tokens: number };
  replicas: ReplicaStatus[];
  /** The router instances sharing state through Redis; null without [cluster]. */
  cluster: ClusterStatus | null;
  /** One line each, "<replica>: …" or "cluster: …" (for `llmroute status` and scripts). */
  warnings: string[];
  /**
   * The same warnings structured, in the same order, one each: the line apart from its
   * details. Absent from routers before it, which `llmroute status` may be reading.
   */
  findings?: Finding[];
}

/**
 * Where a replica's KV belief comes from, and the warning when the evidence contradicts what
 * router.toml or the engine said (both figures, so the operator can see which to fix).
 */
export function kvView(r: Replica, evidence: CapacityEvidence): {
  configured: number | null;
  published: { tokens: number; from: string } | null;
  evidence: { lower_tokens: number | null; upper_tokens: number | null };
  contradiction?: string;
  /** The contradiction as a short line and its details. */
  finding?: { line: string; details: string };
} {
  const configured = r.config.kv_tokens > 0 ? r.config.kv_tokens : null;
  const published = r.facts?.capacity ? { tokens: r.facts.capacity.kvTokens, from: r.facts.capacity.source } : null;
  const fmt = (n: number) => Math.round(n).toLocaleString("en-US");
  let contradiction: string | undefined;
  let finding: { line: string; details: string } | undefined;
  const fix = (to: string) => `Set this replica's kv_tokens in router.toml ${to} and the warning goes.`;
  const { lowerTokens: lower, upperTokens: upper } = evidence;
  if (configured !== null && upper !== undefined && upper < 0.8 * configured) {
    const line = `kv_tokens ${fmt(configured)} is more than this card holds`;
    const why = `the engine evicted prefixes after ~${fmt(upper)} tokens of others; the router assumes ~${fmt(r.kvBelief ?? upper)}`;
    contradiction = `${line}: ${why}`;
    finding = { line, details: `The engine evicted prefixes after ~${fmt(upper)} tokens of others; the router assumes ~${fmt(r.kvBelief ?? upper)}. ${fix("near that figure")}` };
  } else if (configured !== null && lower !== undefined && lower > 1.25 * configured) {
    const line = `kv_tokens ${fmt(configured)} is less than this card holds`;
    contradiction = `${line}: the engine kept prefixes across ~${fmt(lower)} tokens of others; the router assumes ~${fmt(r.kvBelief ?? lower)}`;
    finding = { line, details: `The engine kept prefixes across ~${fmt(lower)} tokens of others; the router assumes ~${fmt(r.kvBelief ?? lower)}. ${fix("near that figure")}` };
  } else if (configured !== null && published && !r.profile?.ramPromptCache && configured > 1.2 * published.tokens) {
    // (llama-server's slots, llama.cpp's and Ollama's, are no bound: its RAM prompt cache holds more.)
    // (A kv_tokens below the engine's own is the operator's choice, e.g. room kept for running sequences.)
    const line = `kv_tokens ${fmt(configured)} is more than the engine's own ${fmt(published.tokens)}`;
    contradiction = `${line} (${published.from}); the router assumes ${fmt(published.tokens)}`;
    finding = { line, details: `The engine publishes ${fmt(published.tokens)} tokens of KV (${published.from}); the router assumes ${fmt(published.tokens)}. ${fix("at or below it")}` };
  }
  return {
    configured,
    published,
    evidence: { lower_tokens: lower ?? null, upper_tokens: upper ?? null },
    ...(contradiction ? { contradiction, finding } : {}),
  };
}
