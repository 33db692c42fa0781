/**
 * Replica state: health, in-flight counts, models, and per-replica calibration.
 *
 * Health tells a blip from a death (Envoy's outlier detection and a circuit breaker's
 * half-open state, in small): a refused connection or a failed active check demotes a
 * replica at once; a 502/503/504, a reset or a timeout only after `failures` in a row (an
 * engine that says its KV or its queue is full is busy, not failing: no count). A
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
import { DEFAULT_METRICS_PATH, type ReplicaConfig } from "../config.ts";
import { clip, type Log } from "../log.ts";
import { askResident, discoverEngine, readMetricsAnswer, residentCapacity, startTokenOf, type EngineFacts, type FetchLike, type ModelCard } from "../engines/discover.ts";
import { profileOf } from "../engines/index.ts";
import { readEngine, total, type EngineReading, type Sample } from "../engines/metrics.ts";
import type { CacheCounters, EngineProfile, ResidentModel } from "../engines/profile.ts";
import type { FleetView } from "../route/router.ts";
import type { Endpoint } from "../route/shape.ts";
import { PrefillQueue } from "./prefill.ts";
import { SlotQueue } from "./slot-queue.ts";

export type { FetchLike, ModelCard };

/** The engine signals the router uses for load (others are the probe's business). */
const LOAD_SIGNALS = ["running", "waiting", "kv_usage"] as const;

/** Each observation keeps this share of the previous sums: recent traffic counts most. */
const TOKENS_DECAY = 0.95;

/**
 * Share of a KV wall (in-flight prompt tokens a card failed at) that requests must stay under
 * to be sent beside each other: the router counts prompts from characters, the engine also
 * holds their generated tokens.
 */
const KV_WALL_SHARE = 0.9;

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
  /**
   * refused: nothing listens (demote at once); full: the engine's KV could not hold the
   * request beside those running (llama.cpp's unified KV), busy: its queue is full (Ollama's
   * scheduler), and wall: the request waited at the card's KV wall until
   * routing.first_byte_timeout without being sent — verdicts on its load, not its health
   * (never counted); the others count towards `health.failures`.
   */
  kind: "refused" | "status" | "timeout" | "network" | "full" | "busy" | "wall";
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
  /** Requests its engine turned away because its KV was full (failed over; not a health failure). */
  kvFull = 0;
  /** Requests its engine turned away because its queue was full (failed over; not a health failure). */
  busy = 0;
  /** Prompts sent here longer than the context its engine cuts them to (Ollama). */
  overContext = 0;
  /** Deadlines that fired, by kind. */
  timeouts: Record<TimerKind, number> = { connect: 0, first_byte: 0, stream_idle: 0 };
  /** Times its cache was declared lost (a restart). */
  cacheLosses = 0;
  lastError?: { message: string; at: number };
  downSince?: number;
  /** What the engine is and publishes (discovered at its first passing check, after a restart and on reload). */
  facts?: EngineFacts;
  /** Discover the engine again at the next passing check. */
  rediscover = true;
  /** The engine's own liveness path, learnt when the configured one answered 404 (Ollama's /api/version). */
  healthPath?: string;
  /** What identifies the engine's process (start-time metric or header): a change is a restart. */
  startToken?: string;
  /** The engine's cache counters at the last scrape (a window's delta is read from two). */
  counters?: CacheCounters;
  /** Prompt tokens and seconds the engine reported prefilling at the last scrape (llama.cpp). */
  prefillCounters?: { tokens: number; seconds: number };
  /** The models the engine held in memory at the last look (Ollama /api/ps). */
  resident?: ResidentLook;
  /** Looks at them asked and read: an answer older than the last one read is dropped. */
  residentAsked = 0;
  residentRead = 0;
  /** The model names this router sent generation requests for here: an unload of another one loses none of its cache. */
  readonly requestedModels = new Set<string>();
  /** How many requests this router sent here, and when the latest ones went (newest last, at most DISPATCH_TIMES). */
  dispatches = 0;
  readonly dispatchTimes: number[] = [];
  /** The KV the router believes this card holds, in tokens (starting belief bounded by evidence); undefined = unknown. */
  kvBelief?: number;
  /** Commit tags (Router.commit) of the requests running here (a slotted engine's busy slots), each with how many run under it. */
  private readonly runningCommits = new Map<number, number>();
  /** Who waits for a running request to end (`untilEnded`), by its commit tag. */
  private readonly endWaiters = new Map<number, (() => void)[]>();
  /** Commit tags of the requests that ended here, their prompts kept in their slots, since the last one was sent here (`overflowCleared`). */
  private readonly endedSinceSent = new Set<number>();
  /** Requests held for a slot here that keeps their prefix (proxy `holdForSlot`), and how long they waited in all (ms). */
  holds = 0;
  heldMs = 0;
  /**
   * What took it out of routing: "check" — nothing listened or /health failed, which a
   * passing check settles; "requests" — failed requests, which only a request can settle.
   */
  demotedBy?: "check" | "requests";
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
  /** The requests in flight here as an engine with slots runs them (src/fleet/slot-queue.ts). */
  readonly flights = new SlotQueue();

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

  /** Lists `model`? Configured models are authoritative; unknown lists accept anything. */
  serves(model: string): boolean {
    if (this.config.models.length > 0) return this.config.models.includes(model);
    if (!this.discovered) return true;
    return this.cards.some((c) => this.reaches(model, c.id));
  }

  /** Does a request naming `requested` reach the model the engine lists as `listed`? (Ollama: "qwen3" is "qwen3:latest".) */
  reaches(requested: string, listed: string): boolean {
    return requested === listed || this.profile?.sameModel?.(requested, listed) === true;
  }

  /** The engine's family profile, once known. */
  get profile(): EngineProfile | undefined {
    return this.facts?.family ? profileOf(this.facts.family) : undefined;
  }

  /**
   * Answers any model name: a single-model engine that does not check the field (llama.cpp's
   * llama-server). Not when router.toml lists its models (then they are what it serves).
   */
  get anyModelName(): boolean {
    return this.config.models.length === 0 && this.cards.length <= 1 && this.profile?.anyModelName === true;
  }

  /** The engine keeps one prompt per slot (llama.cpp): its slot count. */
  get slots(): number | undefined {
    return this.facts?.family === "llamacpp" ? this.facts.capacity?.slots : undefined;
  }

  /**
   * How many requests the engine runs at once, when it has slots (llama.cpp's, Ollama's): its
   * own figure or its family's default, and at least as many as were seen streaming at once.
   */
  get servingSlots(): number | undefined {
    const slots = this.profile?.servingSlots?.(this.facts?.capacity);
    return slots === undefined ? undefined : Math.max(slots, this.flights.concurrentSeen);
  }

  /**
   * Does this engine tell the cached tokens of a stream that did not ask for usage? Its
   * family's rule alone: what a stream the router asked usage for carries is the ask's doing
   * (Ollama's completions put a zero usage in every chunk once asked), never evidence that the
   * engine sends it unasked.
   */
  usageUnasked(endpoint: string): boolean {
    if (endpoint !== "chat" && endpoint !== "completions") return true;
    return this.profile?.stream.usageUnasked(endpoint) === true;
  }

  /**
   * Prompt tokens of the requests in flight here through this router (as the router counts
   * them: characters ÷ a learnt ratio, so a float). Exactly 0 when none is (`admitted`): add
   * and subtract cycles of floats leave a residue (0.1 + 0.2 − 0.1 − 0.2 ≠ 0) that must not
   * read as load.
   */
  inflightTokens = 0;
  /** Requests admitted here (`admit`) that have not left (`leave`). */
  private admitted = 0;
  /**
   * The engine turned requests away as KV-full (llama.cpp's unified KV) with this many prompt
   * tokens in flight here: until `until`, a request that would bring the in-flight tokens to
   * 90 % of it waits for one of them to end, or for the wall to lapse (`admit`); one alone
   * always goes. A low reading (other clients' load, a request that ended just before) only
   * makes requests wait; it lapses after a capacity window (`windowMs`). `waits`: how long
   * requests waited at it (or gave up waiting), counted from `paidAt` at the earliest — when it
   * was set or a conversation last left this card for it (`wallLeft`): what staying has cost
   * (`waitedMs`).
   */
  kvWall?: { tokens: number; until: number; windowMs: number; waits: { at: number; ms: number }[]; paidAt: number };
  /** Tokens of requests turned away as full since the last dispatch here: one overflow fails them together. */
  private overflowTokens = 0;
  private kvWaiters: (() => void)[] = [];

  /**
   * Count `tokens` more in flight here, at once when they fit beside the requests in flight
   * (its KV wall) — synchronously, so no other decision runs between the caller's and this —
   * else once they do (one ended, or the wall lapsed): a promise, false when `signal` aborted
   * first (nothing counted). The caller bounds the wait (it aborts `signal`).
   */
  admit(tokens: number, signal: AbortSignal, now: () => number): true | Promise<boolean> {
    if (!this.mustWait(tokens, now)) {
      this.reserve(tokens);
      return true;
    }
    return this.admitLater(tokens, signal, now);
  }

  private mustWait(tokens: number, now: () => number): boolean {
    return this.admitted > 0 && this.kvWall !== undefined && now() < this.kvWall.until && this.inflightTokens + tokens >= KV_WALL_SHARE * this.kvWall.tokens;
  }

  private reserve(tokens: number): void {
    this.admitted++;
    this.inflightTokens += tokens;
    this.overflowTokens = 0;
  }

  private async admitLater(tokens: number, signal: AbortSignal, now: () => number): Promise<boolean> {
    const since = now();
    while (!signal.aborted && this.mustWait(tokens, now)) {
      // Woken by a request that leaves, by its client leaving (or the caller's deadline), or
      // when the wall lapses — a timer of this wait's own; a wall set again moves `until` on.
      await new Promise<void>((resolve) => {
        let lapse: Timer | undefined;
        const wake = () => {
          clearTimeout(lapse);
          signal.removeEventListener("abort", wake);
          this.kvWaiters = this.kvWaiters.filter((w) => w !== wake);
          resolve();
        };
        lapse = setTimeout(wake, Math.max(0, this.kvWall!.until - now()) + 1);
        this.kvWaiters.push(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
    // A client that gave up waiting was kept waiting too.
    const wall = this.kvWall;
    if (wall) {
      const at = now();
      const ms = at - Math.max(since, wall.paidAt);
      if (ms > 0) wall.waits.push({ at, ms });
    }
    if (signal.aborted) return false;
    this.reserve(tokens);
    return true;
  }

  /** What requests have waited at the KV wall standing at `now`, within its capacity window, since it was last paid (ms); 0 with none. */
  waitedMs(now: number): number {
    const wall = this.kvWall;
    if (!wall || now >= wall.until) return 0;
    const from = now - wall.windowMs;
    while (wall.waits.length > 0 && wall.waits[0]!.at < from) wall.waits.shift();
    return wall.waits.reduce((sum, w) => sum + w.ms, 0);
  }

  /**
   * A conversation left this card for its KV wall (hybrid's `wall`): what staying had cost is
   * paid, and waits count again from `now`. Returns how to take that back (the move failed
   * before the first byte: nothing left).
   */
  wallLeft(now: number): () => void {
    const wall = this.kvWall;
    if (!wall) return () => {};
    const { waits, paidAt } = wall;
    wall.waits = [];
    wall.paidAt = now;
    return () => {
      if (this.kvWall !== wall) return;
      wall.waits = [...waits, ...wall.waits];
      wall.paidAt = paidAt;
    };
  }

  /** A request admitted with `tokens` is over here: those waiting for room look again, in arrival order. */
  leave(tokens: number): void {
    this.admitted = Math.max(0, this.admitted - 1);
    this.inflightTokens = this.admitted === 0 ? 0 : Math.max(0, this.inflightTokens - tokens);
    if (this.kvWaiters.length === 0) return;
    const waiters = this.kvWaiters;
    this.kvWaiters = [];
    for (const wake of waiters) wake();
  }

  /**
   * The engine turned a request of `tokens` (still in flight here) away as KV-full: what was in
   * flight then, with the others that one overflow failed before it, is the wall for a
   * capacity window (the lowest such reading while one lasts). Returns it.
   */
  turnedAwayFull(tokens: number, now: number, windowMs: number): number {
    const wall = this.inflightTokens + this.overflowTokens;
    this.overflowTokens += tokens;
    const standing = this.kvWall && now < this.kvWall.until ? this.kvWall : undefined;
    const next = standing
      ? Object.assign(standing, { tokens: Math.min(standing.tokens, wall), until: now + windowMs, windowMs })
      : { tokens: wall, until: now + windowMs, windowMs, waits: [], paidAt: now };
    this.kvWall = next;
    return next.tokens;
  }

  /**
   * The request whose decision was committed with tag `commit` (Router.commit) was sent here /
   * has ended here (`keptInSlot`: its answer ran its course, or its client left, so its prompt
   * stays in its slot: `overflowCleared`). A tag, not the commit time: two commits can share a
   * millisecond. 0 (no commit: a replica a reload removed) is not followed.
   */
  began(commit: number): void {
    this.endedSinceSent.clear();
    if (commit === 0) return;
    this.runningCommits.set(commit, (this.runningCommits.get(commit) ?? 0) + 1);
  }

  ended(commit: number, keptInSlot = false): void {
    if (commit === 0) return;
    if (keptInSlot) this.endedSinceSent.add(commit);
    const n = (this.runningCommits.get(commit) ?? 0) - 1;
    if (n > 0) return void this.runningCommits.set(commit, n);
    this.runningCommits.delete(commit);
    const waiting = this.endWaiters.get(commit);
    this.endWaiters.delete(commit);
    for (const wake of waiting ?? []) wake();
  }

  /**
   * The commits whose prompts a llama.cpp unified KV's overflow purged from idle slots
   * ("Context size has been exceeded."): before it gives up, its `decode` clears every idle
   * slot holding tokens, one per failed try (server-context.cpp try_clear_idle_slots:
   * prompt_clear, nothing saved). Into the host-RAM prompt cache every idle slot is saved when
   * a task starts (process_single_task, --cache-idle-slots, on by default with --cache-ram):
   * so lost are the prompts of the requests that ended here, kept in their slots, since the
   * last one was sent (no task started since to save them) — sent counts as started: one the
   * engine deferred for a slot starts later and saves more, and another client's task saves
   * them too; then this over-counts, which costs hits, never a wrong answer. (The slots the
   * overflow fails are cleared too, `send_error` … `prompt_clear`; of those the router takes
   * back only what the failed requests added: src/proxy/proxy.ts.)
   */
  overflowCleared(): Set<number> {
    return new Set(this.endedSinceSent);
  }

  /**
   * Resolves when the request committed with tag `commit` has ended here (at once if none
   * runs), when `ms` have passed, or when `signal` aborts, whichever is first.
   */
  untilEnded(commit: number, ms: number, signal: AbortSignal): Promise<void> {
    if (!this.runningCommits.has(commit) || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        const rest = this.endWaiters.get(commit)?.filter((w) => w !== done);
        if (rest?.length) this.endWaiters.set(commit, rest);
        else this.endWaiters.delete(commit);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.endWaiters.set(commit, [...(this.endWaiters.get(commit) ?? []), done]);
    });
  }

  /**
   * Learn the engine's tokenisation from a response: the ratio of decayed sums, so large
   * prompts (the ones that fill the KV) dominate and a burst of short ones, whose chat
   * template overhead skews their own ratio, barely moves it. Short prompts are skipped and
   * the default kept until enough tokens were seen (see CALIBRATION_MIN_TOKENS). `chars`
   * must be the whole prompt the engine counted (the proxy skips previous_response_id
   * follow-ups, whose stored conversation it never sees).
   */
  observeTokens(chars: number, promptTokens: number): void {
    if (!(promptTokens >= CALIBRATION_MIN_SAMPLE_TOKENS) || !(chars > 0)) return;
    this.observedChars = this.observedChars * TOKENS_DECAY + chars;
    this.observedTokens = this.observedTokens * TOKENS_DECAY + promptTokens;
    this.calibrationTokens += promptTokens;
    if (this.calibrationTokens < CALIBRATION_MIN_TOKENS) return;
    this.charsPerToken = Math.min(16, Math.max(0.5, this.observedChars / this.observedTokens));
  }

  view(now = Date.now()): FleetView {
    const pendingSince = this.prefill.oldestCommit();
    const slots = this.slots;
    const serving = this.servingSlots;
    const wall = this.kvWall && now < this.kvWall.until ? this.kvWall : undefined;
    return {
      name: this.name,
      healthy: this.healthy,
      inflight: this.inflight,
      inflightTokens: this.inflightTokens,
      ...(wall ? { wall: { admitsBelow: KV_WALL_SHARE * wall.tokens, waitedSeconds: this.waitedMs(now) / 1000 } } : {}),
      load: this.inflight + this.engineWaiting,
      queuedTokens: this.prefill.withEngineQueue(this.engineWaiting),
      prefillRate: this.prefill.rate,
      charsPerToken: this.charsPerToken,
      budgetChars: this.kvBelief !== undefined && this.kvBelief > 0 ? this.kvBelief * this.charsPerToken : Infinity,
      blockTokens: this.facts?.capacity?.blockTokens ?? this.profile?.blockTokens ?? 16,
      // How the engine schedules prefills, once its family is known (else a first-come queue).
      ...(this.profile ? { queue: this.prefill.pendingTokens(), concurrency: this.profile.prefillConcurrency(this.facts?.capacity) } : {}),
      ...(pendingSince === undefined ? {} : { pendingSince }),
      ...(this.profile?.matchedWhenScheduled ? { matchedWhenScheduled: true } : {}),
      ...(slots ? { slots, busyWith: (commit: number) => this.runningCommits.has(commit) } : {}),
      ...(serving !== undefined && this.flights.size >= serving ? { slotWait: () => this.flights.waitSeconds(serving, Date.now()) } : {}),
    };
  }

  /**
   * The KV the router starts from, in tokens, before the evidence of hits and misses: the
   * engine's published capacity and router.toml's kv_tokens (the operator's belief), the
   * smaller when both are given. The slots of llama-server (llama.cpp's, Ollama's) are not a
   * bound: its host-RAM prompt cache (--cache-ram, 8 GiB by default) restores evicted
   * prompts, and its size is not published.
   */
  startingKvTokens(): number | undefined {
    const configured = this.config.kv_tokens > 0 ? this.config.kv_tokens : undefined;
    const published = this.facts?.capacity && !this.profile?.ramPromptCache ? this.facts.capacity.kvTokens : undefined;
    if (configured === undefined) return published;
    if (published === undefined) return configured;
    return Math.min(configured, published);
  }
}

/**
 * One look at the models an engine holds in memory: per name, its context and when it would
 * unload if left idle — as the engine wrote it (`expiresRaw`) and on this router's clock
 * (`expiresAt`, moved by the engine's `Date` header) — with when the look was asked, whether
 * nothing of this router's ran there then, and how many requests it had sent there.
 */
export interface ResidentLook {
  at: number;
  idle: boolean;
  dispatches: number;
  models: Map<string, { contextLength?: number; expiresRaw?: number; expiresAt?: number }>;
}

/**
 * Slack when an engine's unload time is compared with this router's clock: its `Date` header
 * counts whole seconds, and the request to read it takes some time.
 */
const UNLOAD_MARGIN_MS = 2000;
/** Model names kept per replica as ones this router sent requests for. */
const MODELS_KEPT = 256;
/** Send times kept per replica to tell whether one went between two looks. */
const DISPATCH_TIMES = 64;
/** The endpoints that send a prompt for a model to generate from (an embedding input is not cut the same way). */
const GENERATING = new Set<Endpoint>(["chat", "completions", "responses", "messages"]);

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
  /** The engine's cache counters moved by this much since the last scrape (a window to compare with the index). */
  onCounters?: (replica: Replica, delta: { hits: number; queries: number }) => void;
}

export class Fleet {
  replicas: Replica[];
  /** Requests routed while every replica of their pool was down. */
  panicRoutes = 0;
  /**
   * Pools in panic mode, logged when it starts and ends, by their replicas' names (never by
   * the model a client named: any name reaches a replica whose model list is unknown, and
   * 200 names would be 200 pools). Settled whenever health changes (see `inPanic`).
   */
  readonly panicking = new Map<string, { replicas: string[]; model?: string }>();
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

  /**
   * Replicas serving `model` (all of them when the request names none), healthy or not: those
   * that list it, else those that answer any name (a single-model llama-server serves whatever
   * `model` says, so a client that works against it directly works through the router).
   */
  pool(model: string | undefined): Replica[] {
    if (model === undefined) return this.replicas;
    const listing = this.replicas.filter((r) => r.serves(model));
    return listing.length > 0 ? listing : this.replicas.filter((r) => r.anyModelName);
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
    this.settlePanic();
    const names = pool.map((r) => r.name);
    const key = names.join(",");
    if (panic && !this.panicking.has(key)) {
      this.panicking.set(key, { replicas: names, ...(model === undefined ? {} : { model }) });
      this.options.log.warn("panic mode: every replica is down; routing to all of them", { model: clip(model), replicas: key });
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

  /** Is some pool in panic mode now (every replica of it down)? From current health, not from the last request. */
  inPanic(): boolean {
    this.settlePanic();
    return this.panicking.size > 0;
  }

  /** Pools whose replicas are routable again (or were reloaded away) leave panic mode. */
  private settlePanic(): void {
    for (const [key, p] of this.panicking) {
      const now = p.replicas.map((name) => this.byName(name));
      if (now.some((r) => r === undefined) || now.some((r) => r!.routable)) {
        this.panicking.delete(key);
        this.options.log.info("panic mode over: a replica is up", { model: clip(p.model), replicas: key });
      }
    }
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
    if (failure.kind === "full") {
      // It answered, and coherently: its KV was busy with other requests. No verdict on health.
      replica.kvFull++;
      this.released(replica);
      return;
    }
    if (failure.kind === "busy") {
      replica.busy++;
      this.released(replica);
      return;
    }
    // The router's own wait at its KV wall ran out: nothing was sent; its deadline counts the timeout.
    if (failure.kind === "wall") {
      this.released(replica);
      return;
    }
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

  /** Where `replica`'s health is checked: its own health_path, else the engine's (learnt), else health.path. */
  healthPathOf(replica: Replica): string {
    return replica.config.health_path ?? replica.healthPath ?? this.options.healthPath;
  }

  /**
   * `tried` answered 404 and the replica has no health_path of its own: ask the engine what it
   * is (again: another may have replaced it behind the URL) and check it where its family
   * answers (Ollama: /api/version), or at health.path when its family has no path of its own.
   * True when there is another path to check now.
   */
  private async learnHealthPath(replica: Replica, tried: string): Promise<boolean> {
    // Checks of one replica may overlap (the interval's, a down replica's re-check, a reload's).
    if (this.healthPathOf(replica) !== tried) return true;
    await this.discover(replica);
    if (this.healthPathOf(replica) !== tried) return true;
    const own = replica.profile?.healthPath;
    if (own === replica.healthPath) {
      // Nothing new: a failure; the engine is asked again at its first passing check.
      replica.rediscover = true;
      return false;
    }
    replica.healthPath = own;
    this.options.log.info("health checked where the engine answers", {
      replica: replica.name,
      family: replica.facts?.family ?? "unknown",
      path: this.healthPathOf(replica),
      reason: `${tried} answered 404`,
    });
    return true;
  }

  /** Check every replica (or only those currently down) once, in parallel. */
  async checkAll(onlyDown = false): Promise<void> {
    await Promise.all(this.replicas.filter((r) => !onlyDown || r.state === "down").map((r) => this.check(r)));
  }

  async check(replica: Replica, learn = true): Promise<void> {
    const { healthTimeoutMs } = this.options;
    const path = this.healthPathOf(replica);
    let failure: string | undefined;
    let refused = false;
    try {
      const res = await this.fetch(`${replica.config.url}${path}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(healthTimeoutMs),
      });
      await res.body?.cancel();
      // No such route: no verdict before the engine says what it is (once, no loop).
      if (res.status === 404 && learn && replica.config.health_path === undefined && (await this.learnHealthPath(replica, path))) return this.check(replica, false);
      if (res.status !== 200) failure = `health check: HTTP ${res.status} at ${path}`;
    } catch (error) {
      const reason = describeFetchError(error);
      refused = reason === "connection refused";
      failure = `health check: ${reason}`;
    }
    if (!failure) {
      if (replica.rediscover) await this.discover(replica);
      else {
        if (replica.facts?.metrics.state === "ok") await this.scrape(replica);
        if (replica.profile?.resident) await this.readResident(replica, replica.profile.resident);
      }
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
    this.settlePanic();
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
   * Ask the engine what it is (family, version, capacity, counters, models): at its first
   * passing check, after a restart and after a reload. Its first scrape is read as any other.
   */
  async discover(replica: Replica): Promise<void> {
    // Discovery lists an Ollama's loaded models too: a look, as at a check.
    const look = this.residentLook(replica);
    const found = await discoverEngine(
      { url: replica.config.url, headers: authHeaders(replica.config), metricsPath: replica.config.metrics ?? DEFAULT_METRICS_PATH },
      this.fetch,
      this.options.healthTimeoutMs,
    );
    replica.rediscover = false;
    if (found.cards && replica.config.models.length > 0) {
      // The configured list decides what it serves; the engine's own card (vLLM's
      // max_model_len, root …) is what clients should see for the models it lists.
      replica.cards = replica.config.models.map((id) => found.cards!.find((c) => c.id === id) ?? configCard(id));
    } else if (found.cards) {
      replica.cards = found.cards;
      replica.discovered = true;
    }
    const before = replica.facts;
    replica.facts = { ...found.facts, cachedTokensSeen: before?.cachedTokensSeen ?? false };
    if (!before || before.family !== found.facts.family || before.capacity?.kvTokens !== found.facts.capacity?.kvTokens) {
      this.options.log.info("engine discovered", {
        replica: replica.name,
        family: found.facts.family ?? "unknown",
        from: found.facts.familyFrom,
        version: found.facts.version,
        kv_tokens: found.facts.capacity?.kvTokens,
        kv_from: found.facts.capacity?.source,
        slots: found.facts.capacity?.slots,
        block_tokens: found.facts.capacity?.blockTokens,
        metrics: found.facts.metrics.state === "ok" ? found.facts.metrics.path : found.facts.metrics.state,
      });
    }
    if (found.facts.prefixCacheOff && !before?.prefixCacheOff) this.options.log.warn("replica's prefix cache is off: no request can hit it", { replica: replica.name, evidence: found.facts.prefixCacheOff.evidence, fix: found.facts.prefixCacheOff.fix });
    if (found.resident) this.takeResident(replica, look, { models: found.resident, ...(found.residentDate !== undefined ? { date: found.residentDate } : {}) });
    if (found.scrape) this.absorb(replica, found.scrape, found.startToken);
    else {
      replica.engine = undefined;
      replica.engineWaiting = 0;
      replica.startToken = found.startToken ?? replica.startToken;
    }
  }

  /**
   * A request of about `tokens` prompt tokens for `model` goes to `replica` now. Longer than
   * the context its engine cuts prompts to (Ollama's num_ctx for that model, from /api/ps),
   * it is counted and said once per replica: no routing makes a cut prompt's cache hit (5 %
   * of slack for the router's estimate). True when the engine may have cut it (from 80 % of
   * the context): its usage then counts what was kept, which must not teach the router the
   * engine's tokenisation.
   */
  promptSent(replica: Replica, request: { tokens: number; model: string | undefined; endpoint: Endpoint }): boolean {
    // Kept only where loaded models are read (Ollama, which refuses unknown names with a 404).
    if (!replica.profile?.resident) return false;
    replica.dispatches++;
    replica.dispatchTimes.push(this.now());
    if (replica.dispatchTimes.length > DISPATCH_TIMES) replica.dispatchTimes.shift();
    if (request.model !== undefined && replica.requestedModels.size < MODELS_KEPT) replica.requestedModels.add(request.model);
    const cut = replica.profile.cutsLongPrompts;
    if (!cut || request.model === undefined || !GENERATING.has(request.endpoint)) return false;
    const context = [...(replica.resident?.models ?? [])].find(([name]) => replica.reaches(request.model!, name))?.[1].contextLength;
    if (!context || request.tokens < 0.8 * context) return false;
    if (request.tokens <= 1.05 * context || replica.overContext++ > 0) return true;
    this.options.log.warn(`prompt longer than ${replica.name}'s context: ${cut.fix}`, {
      replica: replica.name,
      model: request.model,
      prompt_tokens: Math.round(request.tokens),
      context_tokens: context,
      context_from: `${replica.profile.resident.path} context_length`,
      detail: cut.how,
    });
    return true;
  }

  /** Ask the engine which models it holds in memory (Ollama /api/ps); no answer changes nothing. */
  private async readResident(replica: Replica, resident: NonNullable<EngineProfile["resident"]>): Promise<void> {
    const look = this.residentLook(replica);
    this.takeResident(replica, look, await askResident(this.fetch, replica.config.url, authHeaders(replica.config), this.options.healthTimeoutMs, resident));
  }

  /** What a look at the loaded models compares with, taken before it is asked. */
  private residentLook(replica: Replica) {
    return { seq: ++replica.residentAsked, at: this.now(), idle: replica.inflight === 0, dispatches: replica.dispatches };
  }

  private takeResident(replica: Replica, look: ReturnType<Fleet["residentLook"]>, answer: { models: ResidentModel[]; date?: number } | undefined): void {
    // Checks of one replica may overlap (the interval's, a down replica's re-check, a reload's).
    if (!answer || look.seq < replica.residentRead) return;
    replica.residentRead = look.seq;
    // The engine's clock, as its Date header says, onto this router's.
    this.absorbResident(replica, answer.models, { ...look, offset: answer.date === undefined ? 0 : look.at - answer.date });
  }

  /**
   * One look at the models the engine holds in memory. A model this router sent requests for
   * that is no longer listed was unloaded (Ollama: idle past keep_alive, or its memory went to
   * another model), and its KV with it. One listed again with a new expiry, whose old one
   * passed while nothing of this router's ran there, was unloaded and loaded again between two
   * looks — unless that expiry had already passed at the earlier look (a runner busy with
   * another client's request keeps its old expiry until that request ends). Another client's
   * request that began just before the expiry kept the model loaded, and reads as an unload
   * here: the router then forgets prefixes the card still held, which costs hits, never a
   * wrong answer. The largest context listed is the replica's published KV.
   */
  private absorbResident(replica: Replica, models: ResidentModel[], look: { at: number; idle: boolean; dispatches: number; offset: number }): void {
    const before = replica.resident;
    const listed: ResidentLook["models"] = new Map(
      models.map((m) => [m.name, { contextLength: m.contextLength, expiresRaw: m.expiresAt, expiresAt: m.expiresAt === undefined ? undefined : m.expiresAt + look.offset }]),
    );
    replica.resident = { at: look.at, idle: look.idle, dispatches: look.dispatches, models: listed };
    const path = replica.profile?.resident?.path ?? "/api/ps";
    const capacity = residentCapacity(models, path);
    if (replica.facts && capacity && (!replica.facts.capacity || (replica.facts.capacity.source === capacity.source && replica.facts.capacity.kvTokens !== capacity.kvTokens))) {
      replica.facts = { ...replica.facts, capacity };
      this.options.log.info("engine capacity learnt", { replica: replica.name, kv_tokens: capacity.kvTokens, kv_from: capacity.source });
    }
    if (!before) return;
    const ours = (name: string) => [...replica.requestedModels].some((requested) => replica.reaches(requested, name));
    const label = replica.profile?.label ?? "the engine";
    const gone = [...before.models.keys()].filter((name) => !listed.has(name) && ours(name));
    if (gone.length > 0) {
      this.loseCache(replica, `${label} unloaded ${gone.join(", ")}: ${path} lists it no more (idle past its keep_alive, or its memory went to another model), and its KV went with it`, false);
      return;
    }
    if (!before.idle) return;
    // When this router's first request after the earlier look went (more than it keeps: unknown).
    const since = replica.dispatches - before.dispatches;
    if (since > replica.dispatchTimes.length) return;
    const lapsedBy = since > 0 ? replica.dispatchTimes[replica.dispatchTimes.length - since]! : look.at;
    const reloaded = [...before.models].find(
      ([name, m]) =>
        ours(name) &&
        m.expiresAt !== undefined &&
        m.expiresAt > before.at + UNLOAD_MARGIN_MS &&
        listed.has(name) &&
        listed.get(name)!.expiresRaw !== m.expiresRaw &&
        m.expiresAt + UNLOAD_MARGIN_MS < lapsedBy,
    );
    if (reloaded) {
      const [name, m] = reloaded;
      this.loseCache(replica, `${label} unloaded and loaded again ${name}: its keep_alive ran out at ${new Date(m.expiresRaw!).toISOString()} with no request of this router running there (${path})`, false);
    }
  }

  /** Read the engine's /metrics: load, cache counters, prefill counters, restart signals. A missing name is reported, never guessed. */
  async scrape(replica: Replica): Promise<void> {
    const path = replica.config.metrics ?? DEFAULT_METRICS_PATH;
    if (path === false) return;
    const at = this.now();
    let answer: { status: number; headers: Headers; text: string } | undefined;
    try {
      const res = await this.fetch(`${replica.config.url}${path}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(this.options.healthTimeoutMs),
      });
      answer = { status: res.status, headers: res.headers, text: await res.text() };
    } catch (error) {
      replica.engine = { values: {}, found: {}, missing: [], at, error: describeFetchError(error) };
      replica.engineWaiting = 0;
      return;
    }
    const read = readMetricsAnswer(answer, path);
    if (!read.metrics) {
      replica.engine = { values: {}, found: {}, missing: [], at, error: read.state.state === "absent" ? read.state.reason : "no metrics" };
      replica.engineWaiting = 0;
      return;
    }
    this.absorb(replica, read.metrics, startTokenOf(replica.profile, read.metrics, answer.headers));
  }

  /**
   * One scrape: a restart (a new start token, or counters that went back: a counter only grows
   * while its process lives) loses the cache; otherwise the window's cache counters go to the
   * feedback, and the engine's prefill counters (llama.cpp) give the measured prefill rate.
   */
  private absorb(replica: Replica, metrics: Map<string, Sample[]>, startToken: string | undefined): void {
    const at = this.now();
    replica.engine = { ...readEngine(metrics, LOAD_SIGNALS), at };
    replica.engineWaiting = replica.engine.values.waiting ?? 0;
    if (!replica.engine.family) replica.engine.error = "no vLLM, SGLang or llama.cpp metric names found";
    const profile = replica.profile ?? (replica.engine.family ? profileOf(replica.engine.family) : undefined);
    const counters = profile?.cacheCounters(metrics);
    const promptName = profile?.metrics.prompt_tokens?.find((n) => metrics.has(n));
    const secondsName = profile?.metrics.prompt_seconds?.find((n) => metrics.has(n));
    const prefill = promptName && secondsName ? { tokens: total(metrics, promptName)!, seconds: total(metrics, secondsName)! } : undefined;

    let restart: string | undefined;
    if (startToken !== undefined && replica.startToken !== undefined && startToken !== replica.startToken) {
      // "name value" → "name old → new"
      const [name, before] = splitToken(replica.startToken);
      const [, after] = splitToken(startToken);
      restart = `engine restarted: ${name} ${before} → ${after}`;
    } else if (counters && replica.counters && counters.queries < replica.counters.queries) {
      restart = `engine restarted: ${counters.names.at(-1)} went back from ${replica.counters.queries} to ${counters.queries}`;
    } else if (prefill && replica.prefillCounters && prefill.tokens < replica.prefillCounters.tokens) {
      restart = `engine restarted: ${promptName} went back from ${replica.prefillCounters.tokens} to ${prefill.tokens}`;
    }
    const previous = restart ? undefined : replica.counters;
    const previousPrefill = restart ? undefined : replica.prefillCounters;
    replica.startToken = startToken ?? replica.startToken;
    replica.counters = counters;
    replica.prefillCounters = prefill;
    if (restart) {
      // What it published (capacity, version) may have changed with the process.
      replica.rediscover = true;
      this.loseCache(replica, restart, false);
      return;
    }
    if (counters && previous) this.options.onCounters?.(replica, { hits: counters.hits - previous.hits, queries: counters.queries - previous.queries });
    if (prefill) {
      const tokens = prefill.tokens - (previousPrefill?.tokens ?? 0);
      const seconds = prefill.seconds - (previousPrefill?.seconds ?? 0);
      replica.prefill.observeEngine(tokens, seconds);
    }
  }
}

function splitToken(token: string): [string, string] {
  const space = token.indexOf(" ");
  return space < 0 ? ["start", token] : [token.slice(0, space), token.slice(space + 1)];
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
