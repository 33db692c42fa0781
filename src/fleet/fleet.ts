/**
 * Replica state: health, in-flight counts, models, and per-replica calibration. Health is
 * checked actively (the server schedules `checkAll`) and passively (a failed request
 * demotes a replica at once). No timers here; the caller owns the schedule.
 */
import type { ReplicaConfig } from "../config.ts";
import type { Log } from "../log.ts";
import { parsePrometheus, readEngine, type EngineReading } from "../engines/metrics.ts";
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

/** Default characters per token before any usage is observed. */
export const DEFAULT_CHARS_PER_TOKEN = 4;

export class Replica {
  healthy = false;
  /** At least one health check has completed (up or down). */
  checked = false;
  inflight = 0;
  served = 0;
  failovers = 0;
  errors = 0;
  lastError?: { message: string; at: number };
  downSince?: number;
  /** Model cards from /v1/models (or synthesised from config). */
  cards: ModelCard[] = [];
  discovered = false;
  /** Characters of canonical prompt per engine token, learned from usage.prompt_tokens. */
  charsPerToken = DEFAULT_CHARS_PER_TOKEN;
  private observedChars = 0;
  private observedTokens = 0;
  /** Engine-reported queue (waiting requests) when metrics are scraped. */
  engineWaiting = 0;
  /** The last scrape of the engine's /metrics (when `metrics` is configured). */
  engine?: EngineReading & { at: number; error?: string };
  /** Prefill sent here and not yet started answering; the measured prefill rate. */
  readonly prefill = new PrefillQueue();

  constructor(public config: ReplicaConfig) {
    this.cards = config.models.map((id) => ({ id, object: "model", owned_by: "llmroute" }));
  }

  get name(): string {
    return this.config.name;
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
   * template overhead skews their own ratio, barely moves it.
   */
  observeTokens(chars: number, promptTokens: number): void {
    if (!(promptTokens > 0) || !(chars > 0)) return;
    this.observedChars = this.observedChars * TOKENS_DECAY + chars;
    this.observedTokens = this.observedTokens * TOKENS_DECAY + promptTokens;
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
  now?: () => number;
  /** Called when a replica that was down passes a check again (its cache is presumably gone). */
  onRecovered?: (replica: Replica) => void;
}

export class Fleet {
  replicas: Replica[];
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
  configure(settings: Pick<FleetOptions, "healthPath" | "healthTimeoutMs">): void {
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
      if (c.models.length > 0) existing.cards = c.models.map((id) => ({ id, object: "model", owned_by: "llmroute" }));
      return existing;
    });
    const added = next.filter((r) => !this.replicas.includes(r)).map((r) => r.name);
    this.replicas = next;
    return { added, removed: [...old.keys()], replaced };
  }

  /** Demote at once after a failed request; the next passing check restores it. */
  demote(replica: Replica, reason: string): void {
    replica.errors++;
    replica.lastError = { message: reason, at: this.now() };
    if (!replica.healthy) return;
    replica.healthy = false;
    replica.downSince = this.now();
    this.options.log.warn("replica down", { replica: replica.name, reason });
  }

  /** Check every replica (or only those currently down) once, in parallel. */
  async checkAll(onlyDown = false): Promise<void> {
    await Promise.all(this.replicas.filter((r) => !onlyDown || !r.healthy).map((r) => this.check(r)));
  }

  async check(replica: Replica): Promise<void> {
    const { healthPath, healthTimeoutMs } = this.options;
    let failure: string | undefined;
    try {
      const res = await this.fetch(`${replica.config.url}${replica.config.health_path ?? healthPath}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(healthTimeoutMs),
      });
      await res.body?.cancel();
      if (res.status !== 200) failure = `health check: HTTP ${res.status}`;
    } catch (error) {
      failure = `health check: ${describeFetchError(error)}`;
    }
    if (!failure) {
      await Promise.all([
        replica.config.models.length === 0 ? this.discoverModels(replica) : undefined,
        replica.config.metrics ? this.scrape(replica) : undefined,
      ]);
    }

    replica.checked = true;
    if (failure) {
      if (replica.healthy) this.demote(replica, failure);
      else replica.lastError = { message: failure, at: this.now() };
      return;
    }
    if (!replica.healthy) {
      const wasDown = replica.downSince !== undefined;
      replica.healthy = true;
      replica.downSince = undefined;
      this.options.log.info(wasDown ? "replica up again" : "replica up", { replica: replica.name, models: replica.cards.map((c) => c.id).join(",") });
      if (wasDown) this.options.onRecovered?.(replica);
    }
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
      const reading = readEngine(parsePrometheus(await res.text()), LOAD_SIGNALS);
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
      replica.cards = body.data.filter((c): c is ModelCard => !!c && typeof (c as ModelCard).id === "string");
      replica.discovered = true;
    } catch {
      // Model discovery is best effort: a replica whose list is unknown accepts any model.
    }
  }
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
