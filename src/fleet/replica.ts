/**
 * One replica as the router knows it: its config and what its engine is, its health state,
 * and each concern of its own in a room: health's record (health.ts), counters (`stats`),
 * the tokenisation it learnt (calibration.ts), the KV wall (kv-wall.ts), the requests running
 * and queued there (prefill.ts, slot-queue.ts), the models it holds (residency.ts) and what
 * watching its engine remembers (watch.ts). `dispatch` is the one owner of a request's
 * bookkeeping here (dispatch.ts).
 */
import type { ReplicaConfig } from "../config.ts";
import type { EngineFacts, ModelCard } from "../engines/discover.ts";
import { profileOf } from "../engines/index.ts";
import type { EngineReading } from "../engines/metrics.ts";
import type { EngineProfile } from "../engines/profile.ts";
import type { FleetView } from "../route/router.ts";
import { Calibration } from "./calibration.ts";
import { Dispatch, type DispatchOptions } from "./dispatch.ts";
import type { TimerKind } from "./failure.ts";
import { HealthRecord, type HealthState } from "./health.ts";
import { KV_WALL_SHARE, KvWall } from "./kv-wall.ts";
import { PrefillQueue } from "./prefill.ts";
import { Residency } from "./residency.ts";
import { RunningCommits, SlotQueue } from "./slot-queue.ts";
import { WatchState } from "./watch.ts";

/** What happened to the requests sent to a replica, counted (for /status and /metrics). */
export class ReplicaStats {
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
  readonly timeouts: Record<TimerKind, number> = { connect: 0, first_byte: 0, stream_idle: 0 };
  /** Times its cache was declared lost (a restart). */
  cacheLosses = 0;
  /** Requests held for a slot here that keeps their prefix (proxy `holdForSlot`), and how long they waited in all (ms). */
  holds = 0;
  heldMs = 0;
}

export class Replica {
  state: HealthState = "down";
  readonly health = new HealthRecord();
  readonly stats = new ReplicaStats();
  /** Removed (or replaced) by a config reload: requests that hold it finish, nothing is remembered for it. */
  removed = false;
  /** Requests in flight here through this router. */
  inflight = 0;
  /** What the engine is and publishes (discovered at its first passing check, after a restart and on reload). */
  facts?: EngineFacts;
  /** Model cards from /v1/models (or synthesised from config). */
  cards: ModelCard[] = [];
  discovered = false;
  /** The KV the router believes this card holds, in tokens (starting belief bounded by evidence); undefined = unknown. */
  kvBelief?: number;
  /** Engine-reported queue (waiting requests) when metrics are scraped. */
  engineWaiting = 0;
  /** The last scrape of the engine's /metrics (when `metrics` is configured). */
  engine?: EngineReading & { at: number; error?: string };
  readonly calibration = new Calibration();
  readonly wall = new KvWall();
  /** The requests running here by their decision's commit tag (slot holds, overflow clearing). */
  readonly running = new RunningCommits();
  /** Prefill sent here and not yet started answering; the measured prefill rate. */
  readonly prefill = new PrefillQueue();
  /** The requests in flight here as an engine with slots runs them. */
  readonly slotQueue = new SlotQueue();
  readonly residency = new Residency();
  readonly watch = new WatchState();

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
    return this.state === "up" || (this.state === "half-open" && !this.health.trial);
  }

  /** Characters of canonical prompt per engine token, as learnt here. */
  get charsPerToken(): number {
    return this.calibration.charsPerToken;
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
    return slots === undefined ? undefined : Math.max(slots, this.slotQueue.concurrentSeen);
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

  /** A request admitted at the KV wall is sent here now: its bookkeeping, until it ends, is the handle's. */
  dispatch(options: DispatchOptions): Dispatch {
    return new Dispatch(this, options);
  }

  view(now = Date.now()): FleetView {
    const pendingSince = this.prefill.oldestCommit();
    const slots = this.slots;
    const serving = this.servingSlots;
    const wall = this.wall.standing(now);
    return {
      name: this.name,
      healthy: this.healthy,
      inflight: this.inflight,
      inflightTokens: this.wall.inflightTokens,
      ...(wall ? { wall: { admitsBelow: KV_WALL_SHARE * wall.tokens, waitedSeconds: this.wall.waitedMs(now) / 1000 } } : {}),
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
      ...(slots ? { slots, busyWith: (commit: number) => this.running.busyWith(commit) } : {}),
      ...(serving !== undefined && this.slotQueue.size >= serving ? { slotWait: () => this.slotQueue.waitSeconds(serving, now) } : {}),
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

/** The card of a configured model the engine has not listed (yet). */
export function configCard(id: string): ModelCard {
  return { id, object: "model", owned_by: "llmroute" };
}
