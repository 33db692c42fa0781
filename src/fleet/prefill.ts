/**
 * A replica's prefill queue as the router sees it: the prompt tokens it sent there that
 * have not reached their first byte, and the prefill rate it measures from how long they
 * took. hybrid prices a replica by (queued + this request's uncached tokens) ÷ rate.
 */

/** Tokens per second assumed before the first measurement (a 3090-class card on a 30B model). */
export const DEFAULT_PREFILL_RATE = 4_000;

/** Each measurement keeps this share of the previous sums: recent traffic counts most. */
const RATE_DECAY = 0.9;
/** Prefills shorter than this are dominated by fixed overhead and say little about the rate. */
const MIN_SAMPLE_TOKENS = 512;

interface Pending {
  tokens: number;
  /** When the request's decision was committed (ms, the index's clock). */
  committedAt: number;
  /** Tokens queued ahead of it when it was sent. */
  ahead: number;
}

export class PrefillQueue {
  /** Estimated prompt tokens sent here and not yet prefilled. */
  queuedTokens = 0;
  rate = DEFAULT_PREFILL_RATE;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private work = 0;
  private seconds = 0;
  /** Mean tokens per request sent here: prices the engine's own queue when it is scraped. */
  private meanTokens = 0;

  get size(): number {
    return this.pending.size;
  }

  /** A rate was measured here (else `rate` is the default: a fleet's views price it at its peers' mean). */
  get measured(): boolean {
    return this.seconds > 0;
  }

  /** A request carrying `tokens` of prefill was sent; returns its handle. */
  begin(tokens: number, committedAt: number): number {
    const id = this.nextId++;
    this.pending.set(id, { tokens, committedAt, ahead: this.queuedTokens });
    this.queuedTokens += tokens;
    this.meanTokens = this.meanTokens === 0 ? tokens : this.meanTokens * 0.9 + tokens * 0.1;
    return id;
  }

  /**
   * The request's first byte arrived after `ttftMs` (a 2xx streamed answer to a prompt), or
   * it ended without one: failed, cancelled, answered an error (which prefilled nothing), or
   * not streamed (the first byte is the whole answer and times nothing about prefill) — pass
   * undefined.
   */
  end(id: number, ttftMs?: number): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    this.queuedTokens = Math.max(0, this.queuedTokens - p.tokens);
    if (this.pending.size === 0) this.queuedTokens = 0;
    const work = p.ahead + p.tokens;
    if (ttftMs === undefined || !(ttftMs > 0) || work < MIN_SAMPLE_TOKENS) return;
    this.work = this.work * RATE_DECAY + work;
    this.seconds = this.seconds * RATE_DECAY + ttftMs / 1000;
    this.rate = Math.min(1e7, Math.max(50, this.work / this.seconds));
  }

  /**
   * The engine's own prefill counters moved by `tokens` over `seconds` (llama.cpp's
   * prompt_tokens_total and prompt_seconds_total, cached tokens excluded): the truest rate
   * there is, so it counts like a measurement from the first scrape on, before the router
   * has timed a single long prefill.
   */
  observeEngine(tokens: number, seconds: number): void {
    if (!(tokens >= MIN_SAMPLE_TOKENS) || !(seconds > 0)) return;
    this.work = this.work * RATE_DECAY + tokens;
    this.seconds = this.seconds * RATE_DECAY + seconds;
    this.rate = Math.min(1e7, Math.max(50, this.work / this.seconds));
  }

  /** The prefill tokens of each request still prefilling here, oldest first. */
  pendingTokens(): number[] {
    const out: number[] = [];
    for (const p of this.pending.values()) out.push(p.tokens);
    return out;
  }

  /**
   * Commit time of the oldest request still prefilling, if any. Read for every replica on
   * every decision, so not a scan: requests begin in the order they were committed and a
   * Map keeps insertion order, so the first pending one is the oldest.
   */
  oldestCommit(): number | undefined {
    return this.pending.values().next().value?.committedAt;
  }

  /** Queued tokens including requests the engine reports waiting that this router did not send. */
  withEngineQueue(engineWaiting: number): number {
    const others = Math.max(0, engineWaiting - this.pending.size);
    return this.queuedTokens + others * this.meanTokens;
  }
}
