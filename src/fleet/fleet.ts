/**
 * Replica state: health, in-flight counts, models, and per-replica calibration.
 *
 * Health tells a blip from a death (Envoy's outlier detection and a circuit breaker's
 * half-open state, in small): a refused connection or a failed active check demotes a
 * replica at once; a 502/503/504, a reset or a timeout only after `failures` in a row. A
 * replica demoted by what an active check sees (a refused connection, a failing /health) is
 * up again at its next passing check: that check answers the question that demoted it, and
 * a quiet fleet must not wait for traffic to look healthy. A replica demoted by failed
 * requests is half-open when its check passes (its /health may have passed all along): one
 * request goes there, and its success brings the replica back. When every replica of a pool
 * is down, requests go to all of them anyway (panic mode) rather than to none. What a
 * replica has cached is declared lost only on evidence — it refused connections at an active
 * check (no process listens), or its engine reports a new process start time or counters
 * that went back — never because of a failed request. No timers here; the caller owns the
 * schedule.
 */
import type { ReplicaConfig } from "../config.ts";
import type { Log } from "../log.ts";
import { ENGINE_METRICS, parsePrometheus, readEngine, total, type EngineReading } from "../engines/metrics.ts";
import type { FleetView } from "../route/router.ts";
import { PrefillQueue } from "./prefill.ts";

export interface ModelCard {
  id: string;
  object?: string;
  [key: string]: unknown;
}

export type FetchLike = (input: string | URL | Request, init?: RequestInit & { timeout?: number | boolean }) => Promise<Response>;

/** The engine signals the router uses (others are the probe's business). */
const LOAD_SIGNALS = ["running", "waiting", "kv_usage"] as const;

/** Each observation keeps this share of the previous sums: recent traffic counts most. */
const TOKENS_DECAY = 0.95;

/** Default characters per token until enough usage is observed. */
export const DEFAULT_CHARS_PER_TOKEN = 4;

/**
 * Prompt tokens a replica must have reported (in all) before its own ratio replaces the
 * default. A chat template adds some 10–30 tokens to every request, so a one-line prompt
 * reads as well under one character per token: learnt from one "hi" (13 tokens), the ratio
 * was 0.54 and the replica's KV budget in characters 7× too small. 1,000 tokens is less
 * than one real agent turn (a system prompt and tools alone are thousands), so a replica
 * serving real work calibrates on its first large request, while a few short chats leave
 * the default alone.
 */
export const CALIBRATION_MIN_TOKENS = 1000;

/**
 * Prompts shorter than this are not learnt from at all: with template overhead a third or
 * more of their tokens, a hundred "hi"s would otherwise pass the threshold above and set
 * the same skewed ratio.
 */
export const CALIBRATION_MIN_SAMPLE_TOKENS = 64;

/** up: routed to; half-open: one trial request may go there; down: not routed to (except in panic mode). */
export type HealthState = "up" | "half-open" | "down";

/** Why a request to a replica failed, as health weighs it. */
export interface Failure {
  /** refused: nothing listens (demote at once); the others count towards `health.failures`. */
  kind: "refused" | "status" | "timeout" | "network";
  reason: string;
  /** Which deadline fired, for a timeout. */
  timer?: TimerKind;
}

export type TimerKind = "connect" | "first_byte" | "stream_idle";

export class Replica {
  state: HealthState = "down";
  /** At least one health check has completed (up or down). */
  checked = false;
  /** Failed requests since the last success (a 502/503/504, reset or timeout). */
  consecutiveFailures = 0;
  /** A half-open replica's one trial request is in flight. */
  trial = false;
  /** Removed (or replaced) by a config reload: requests that hold it finish, nothing is remembered for it. */
  removed = false;
  /** Its cache was declared lost in this down episode (so it is forgotten once, not at every check). */
  cacheLost = false;
  inflight = 0;
  served = 0;
  failovers = 0;
  errors = 0;
  /** Deadlines that fired, by kind. */
  timeouts: Record<TimerKind, number> = { connect: 0, first_byte: 0, stream_idle: 0 };
  /** Times its cache was declared lost (a restart). */
  cacheLosses = 0;
  lastError?: { message: string; at: number };
  downSince?: number;
  /**
   * What took it out of routing: "check" — nothing listened or /health failed, which a
   * passing check settles; "requests" — failed requests, which only a request can settle.
   */
  demotedBy?: "check" | "requests";
  /** What the engine's /metrics said about its process last time: a start time, a counter that only grows. */
  epoch?: { startTime?: number; promptTokens?: number };
  /** Model cards from /v1/models (or synthesised from config). */
  cards: ModelCard[] = [];
  discovered = false;
  /** Characters of canonical prompt per engine token, learned from usage.prompt_tokens. */
  charsPerToken = DEFAULT_CHARS_PER_TOKEN;
  private observedChars = 0;
  private observedTokens = 0;
  /** Prompt tokens learnt from in all (not decayed): the ratio is used from CALIBRATION_MIN_TOKENS on. */
  private calibrationTokens = 0;
  /** Engine-reported queue (waiting requests) when metrics are scraped. */
  engineWaiting = 0;
  /** The last scrape of the engine's /metrics (when `metrics` is configured). */
  engine?: EngineReading & { at: number; error?: string };
  /** Prefill sent here and not yet started answering; the measured prefill rate. */
  readonly prefill = new PrefillQueue();

  constructor(public config: ReplicaConfig) {
    this.cards = config.models.map(configCard);
  }

  get name(): string {
    return this.config.name;
  }

  get healthy(): boolean {
    return this.state === "up";
  }

  /** May a request be sent here (outside panic mode)? A half-open replica takes one at a time. */
  get routable(): boolean {
    return this.state === "up" || (this.state === "half-open" && !this.trial);
  }

  /** Serves `model`? Configured models are authoritative; unknown lists accept anything. */
  serves(model: string): boolean {
    if (this.config.models.length > 0) return this.config.models.includes(model);
    if (!this.discovered) return true;
    return this.cards.some((c) => c.id === model);
  }

  /**
   * Learn the engine's tokenisation from a response: the ratio of decayed sums, so large
   * prompts (the ones that fill the KV) dominate and a burst of short ones, whose chat
   * template overhead skews their own ratio, barely moves it. Short prompts are skipped and
   * the default kept until enough tokens were seen (see CALIBRATION_MIN_TOKENS).
   */
  observeTokens(chars: number, promptTokens: number): void {
    if (!(promptTokens >= CALIBRATION_MIN_SAMPLE_TOKENS) || !(chars > 0)) return;
    this.observedChars = this.observedChars * TOKENS_DECAY + chars;
    this.observedTokens = this.observedTokens * TOKENS_DECAY + promptTokens;
    this.calibrationTokens += promptTokens;
    if (this.calibrationTokens < CALIBRATION_MIN_TOKENS) return;
    this.charsPerToken = Math.min(16, Math.max(0.5, this.observedChars / this.observedTokens));
  }

  view(): FleetView {
    const pendingSince = this.prefill.oldestCommit();
    return {
      name: this.name,
      healthy: this.healthy,
      inflight: this.inflight,
      load: this.inflight + this.engineWaiting,
      queuedTokens: this.prefill.withEngineQueue(this.engineWaiting),
      prefillRate: this.prefill.rate,
      charsPerToken: this.charsPerToken,
      budgetChars: this.config.kv_tokens > 0 ? this.config.kv_tokens * this.charsPerToken : Infinity,
      ...(pendingSince === undefined ? {} : { pendingSince }),
    };
  }
}

export interface FleetOptions {
  fetch?: FetchLike;
  log: Log;
  healthPath: string;
  healthTimeoutMs: number;
  /** Consecutive failed requests (5xx, reset, timeout) that demote a replica (health.failures). */
  failures: number;
  now?: () => number;
  /** Evidence that a replica's cache is gone (its engine restarted): forget what it held. */
  onCacheLost?: (replica: Replica, reason: string) => void;
}

export class Fleet {
  replicas: Replica[];
  /** Requests routed while every replica of their pool was down. */
  panicRoutes = 0;
  /** Models (by name, "" for requests naming none) in panic mode now; logged when it starts and ends. */
  readonly panicking = new Set<string>();
  private readonly fetch: FetchLike;
  private readonly now: () => number;

  constructor(
    configs: ReplicaConfig[],
    private readonly options: FleetOptions,
  ) {
    this.replicas = configs.map((c) => new Replica(c));
    this.fetch = options.fetch ?? fetch;
    this.now = options.now ?? Date.now;
  }

  /** Health settings changed (config reload). */
  configure(settings: Pick<FleetOptions, "healthPath" | "healthTimeoutMs" | "failures">): void {
    Object.assign(this.options, settings);
  }

  byName(name: string): Replica | undefined {
    return this.replicas.find((r) => r.name === name);
  }

  /** Replicas serving `model` (all of them when the request names none), healthy or not. */
  pool(model: string | undefined): Replica[] {
    return model === undefined ? this.replicas : this.replicas.filter((r) => r.serves(model));
  }

  /** Every model id any replica serves, first card wins. */
  models(): ModelCard[] {
    const seen = new Map<string, ModelCard>();
    for (const r of this.replicas) for (const card of r.cards) if (!seen.has(card.id)) seen.set(card.id, card);
    return [...seen.values()];
  }

  /** Replace the replica list (config reload); state of replicas that stay is kept. */
  reconcile(configs: ReplicaConfig[]): { added: string[]; removed: string[]; replaced: string[] } {
    const old = new Map(this.replicas.map((r) => [r.name, r]));
    const replaced: string[] = [];
    const next = configs.map((c) => {
      const existing = old.get(c.name);
      if (!existing) return new Replica(c);
      old.delete(c.name);
      if (existing.config.url !== c.url) {
        replaced.push(c.name);
        return new Replica(c);
      }
      existing.config = c;
      if (c.models.length > 0) existing.cards = c.models.map((id) => existing.cards.find((card) => card.id === id) ?? configCard(id));
      return existing;
    });
    const added = next.filter((r) => !this.replicas.includes(r)).map((r) => r.name);
    for (const r of this.replicas) if (!next.includes(r)) r.removed = true;
    this.replicas = next;
    return { added, removed: [...old.keys()], replaced };
  }

  /**
   * What the policy sees of `pool` for one routing attempt: `exclude`d replicas (already
   * tried by this request) are never healthy; the others are healthy while routable, or
   * all of them when no replica of the pool is routable (panic mode: a fleet that is
   * wrongly all demoted still serves; a truly dead one fails fast with the reasons).
   */
  views(
    pool: readonly Replica[],
    exclude: ReadonlySet<string>,
    model?: string,
    view: (r: Replica) => FleetView = (r) => r.view(),
  ): { views: FleetView[]; panic: boolean } {
    const panic = pool.length > 0 && !pool.some((r) => r.routable);
    const key = model ?? "";
    if (panic && !this.panicking.has(key)) {
      this.panicking.add(key);
      this.options.log.warn("panic mode: every replica is down; routing to all of them", { model, replicas: pool.map((r) => r.name).join(",") });
    } else if (!panic && this.panicking.has(key) && pool.some((r) => r.healthy)) {
      this.panicking.delete(key);
      this.options.log.info("panic mode over: a replica is up", { model });
    }
    const views = pool.map((r) => {
      const v = view(r);
      v.healthy = !exclude.has(r.name) && (panic || r.routable);
      return v;
    });
    // A replica not measured yet is priced at its measured peers' mean rate, not at a fixed
    // guess: against sims at time scale 0.1, or cards faster than the guess, the guess made an
    // idle replica look ten times slower, so it was never sent anything and never measured.
    const measured = pool.flatMap((r, i) => (r.prefill.measured ? [views[i]!.prefillRate] : []));
    if (measured.length > 0 && measured.length < pool.length) {
      const mean = measured.reduce((a, b) => a + b, 0) / measured.length;
      pool.forEach((r, i) => {
        if (!r.prefill.measured && views[i]!.prefillRate === r.prefill.rate) views[i]!.prefillRate = mean;
      });
    }
    return { views, panic };
  }

  /** A request was sent to `replica`: on a half-open one, it is the trial. */
  dispatched(replica: Replica, panic: boolean): void {
    if (panic) this.panicRoutes++;
    if (replica.state === "half-open") replica.trial = true;
  }

  /** The replica answered (first byte, status < 500): failures reset; a trial brings it back up. */
  succeeded(replica: Replica): void {
    replica.consecutiveFailures = 0;
    if (replica.state === "half-open" && replica.trial) {
      replica.trial = false;
      this.up(replica, "replica up again: trial request succeeded");
    }
  }

  /** The request ended without a verdict on the replica (the client left first). */
  released(replica: Replica): void {
    replica.trial = false;
  }

  /**
   * A request to `replica` failed. Refused: nothing listens, demote at once. Otherwise it
   * counts; `failures` in a row demote, and a failed trial sends a half-open replica back
   * down at once.
   */
  failed(replica: Replica, failure: Failure): void {
    replica.errors++;
    replica.lastError = { message: failure.reason, at: this.now() };
    replica.consecutiveFailures++;
    const trial = replica.state === "half-open" && replica.trial;
    replica.trial = false;
    if (failure.kind === "refused" || trial || replica.consecutiveFailures >= this.options.failures) {
      const why = trial
        ? `trial request failed: ${failure.reason}`
        : failure.kind === "refused" || replica.consecutiveFailures === 1
          ? failure.reason
          : `${replica.consecutiveFailures} failures in a row, the last: ${failure.reason}`;
      this.demote(replica, why, failure.kind === "refused" && !trial ? "check" : "requests");
    }
  }

  /**
   * Take a replica out of routing now. `by` "check": a refused connection or a failed active
   * check, which its next passing check settles (up); "requests": failed requests, after
   * which a passing check makes it half-open, for one trial request.
   */
  demote(replica: Replica, reason: string, by: "check" | "requests"): void {
    replica.lastError = { message: reason, at: this.now() };
    // Evidence from requests outweighs a check's: a replica that fails requests while its
    // /health answers stays on trial until a request succeeds.
    if (by === "requests" || replica.state !== "down") replica.demotedBy = by;
    if (replica.state === "down") return;
    replica.state = "down";
    replica.trial = false;
    replica.downSince = this.now();
    this.options.log.warn("replica down", { replica: replica.name, reason });
  }

  /** Check every replica (or only those currently down) once, in parallel. */
  async checkAll(onlyDown = false): Promise<void> {
    await Promise.all(this.replicas.filter((r) => !onlyDown || r.state === "down").map((r) => this.check(r)));
  }

  async check(replica: Replica): Promise<void> {
    const { healthPath, healthTimeoutMs } = this.options;
    let failure: string | undefined;
    let refused = false;
    try {
      const res = await this.fetch(`${replica.config.url}${replica.config.health_path ?? healthPath}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(healthTimeoutMs),
      });
      await res.body?.cancel();
      if (res.status !== 200) failure = `health check: HTTP ${res.status}`;
    } catch (error) {
      const reason = describeFetchError(error);
      refused = reason === "connection refused";
      failure = `health check: ${reason}`;
    }
    if (!failure) {
      await Promise.all([
        this.discoverModels(replica),
        replica.config.metrics ? this.scrape(replica) : undefined,
      ]);
    }

    const first = !replica.checked;
    replica.checked = true;
    if (failure) {
      // Nothing listens on its port: the engine process is gone, and its cache with it. (At
      // the first check this only clears pins a state file restored; "replica down" says why.)
      if (refused) this.loseCache(replica, "connection refused at an active check", true, !first);
      if (first) {
        replica.lastError = { message: failure, at: this.now() };
        replica.downSince = this.now();
        replica.demotedBy = "check";
        this.options.log.warn("replica down", { replica: replica.name, reason: failure });
      } else this.demote(replica, failure, "check");
      return;
    }
    if (first) this.up(replica, "replica up");
    else if (replica.state === "down" && replica.demotedBy !== "requests") this.up(replica, "replica up again: health check passed");
    else if (replica.state === "down") {
      replica.state = "half-open";
      replica.trial = false;
      this.options.log.info("replica half-open: health check passed; the next request is a trial", { replica: replica.name });
    }
  }

  private up(replica: Replica, msg: string): void {
    replica.state = "up";
    replica.trial = false;
    replica.downSince = undefined;
    replica.demotedBy = undefined;
    replica.cacheLost = false;
    replica.consecutiveFailures = 0;
    this.options.log.info(msg, { replica: replica.name, models: replica.cards.map((c) => c.id).join(",") });
  }

  /**
   * Evidence that the replica's cache is gone: forget what it held. Once per down episode
   * (a replica that stays down is re-checked every few seconds); `episode` false for
   * evidence from a live engine, which marks no episode.
   */
  private loseCache(replica: Replica, reason: string, episode = true, announce = true): void {
    if (replica.cacheLost) return;
    if (episode) replica.cacheLost = true;
    replica.cacheLosses++;
    if (announce) this.options.log.warn("replica cache lost: forgetting its prefixes", { replica: replica.name, reason });
    this.options.onCacheLost?.(replica, reason);
  }

  /**
   * A restart between two checks leaves no refused connection behind, but the engine's
   * /metrics tells: vLLM and SGLang export `process_start_time_seconds`, and every
   * engine's prompt-token counter only grows while its process lives.
   */
  private noticeRestart(replica: Replica, metrics: ReturnType<typeof parsePrometheus>, reading: EngineReading): void {
    const startTime = total(metrics, "process_start_time_seconds");
    const counterName = reading.family ? ENGINE_METRICS[reading.family].prompt_tokens?.find((n) => metrics.has(n)) : undefined;
    const promptTokens = counterName ? total(metrics, counterName) : undefined;
    const before = replica.epoch;
    replica.epoch = { startTime, promptTokens };
    if (!before) return;
    let evidence: string | undefined;
    if (startTime !== undefined && before.startTime !== undefined && startTime !== before.startTime) {
      evidence = `engine restarted: process_start_time_seconds ${before.startTime} → ${startTime}`;
    } else if (promptTokens !== undefined && before.promptTokens !== undefined && promptTokens < before.promptTokens) {
      evidence = `engine restarted: ${counterName} went back from ${before.promptTokens} to ${promptTokens}`;
    }
    if (evidence) this.loseCache(replica, evidence, false);
  }

  /** Read the engine's load signals; a missing name is reported, never guessed. */
  async scrape(replica: Replica): Promise<void> {
    const at = this.now();
    try {
      const res = await this.fetch(`${replica.config.url}${replica.config.metrics}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(this.options.healthTimeoutMs),
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`HTTP ${res.status}`);
      }
      const metrics = parsePrometheus(await res.text());
      const reading = readEngine(metrics, LOAD_SIGNALS);
      this.noticeRestart(replica, metrics, reading);
      replica.engine = { ...reading, at };
      replica.engineWaiting = reading.values.waiting ?? 0;
      if (!reading.family) replica.engine.error = "no vLLM, SGLang or llama.cpp metric names found";
    } catch (error) {
      replica.engine = { values: {}, found: {}, missing: [], at, error: describeFetchError(error) };
      replica.engineWaiting = 0;
    }
  }

  private async discoverModels(replica: Replica): Promise<void> {
    try {
      const res = await this.fetch(`${replica.config.url}/v1/models`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(this.options.healthTimeoutMs),
      });
      if (!res.ok) {
        await res.body?.cancel();
        return;
      }
      const body = (await res.json()) as { data?: unknown };
      if (!Array.isArray(body.data)) return;
      const listed = body.data.filter((c): c is ModelCard => !!c && typeof (c as ModelCard).id === "string");
      if (replica.config.models.length > 0) {
        // The configured list decides what it serves; the engine's own card (vLLM's
        // max_model_len, root …) is what clients should see for the models it lists.
        replica.cards = replica.config.models.map((id) => listed.find((c) => c.id === id) ?? configCard(id));
        return;
      }
      replica.cards = listed;
      replica.discovered = true;
    } catch {
      // Model discovery is best effort: a replica whose list is unknown accepts any model.
    }
  }
}

/** The card of a configured model the engine has not listed (yet). */
function configCard(id: string): ModelCard {
  return { id, object: "model", owned_by: "llmroute" };
}

/** The replica's own key, never the client's. */
export function authHeaders(config: ReplicaConfig): Record<string, string> {
  return config.api_key ? { authorization: `Bearer ${config.api_key}` } : {};
}

export function describeFetchError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: string }).code;
    if (error.name === "TimeoutError") return "timed out";
    if (code === "ConnectionRefused" || code === "ECONNREFUSED") return "connection refused";
    if (code === "ECONNRESET" || code === "ConnectionClosed") return "connection reset";
    return code ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
