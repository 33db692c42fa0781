/**
 * A replica's prefill queue as the router sees it: the prompt tokens it sent there that
 * have not reached their first byte, and the prefill rate it measures from how long they
 * took. hybrid prices a replica by (queued + this request's uncached tokens) ÷ rate.
 */

/** Tokens per second assumed before the first measurement (a 3090-class card on a 30B model). */
export const DEFAULT_PREFILL_RATE = 4_000;

/**
 * Each measurement keeps this share of the previous sums: about the last hundred first bytes
 * make the rate. A first byte's time swings with what else the engine runs and with misjudged
 * cache hits: a rate made of the last ten set replicas of one card 2× apart.
 */
const RATE_DECAY = 0.99;
/** Prefills shorter than this are dominated by fixed overhead and say little about the rate. */
const MIN_SAMPLE_TOKENS = 512;
/** How many of a replica's own samples weigh as much as its pool's rate (see `pricedRates`). */
const POOL_PRIOR_SAMPLES = 32;
/** A replica's own samples count half as much after this long without a new one (ms). */
const SAMPLE_HALF_LIFE_MS = 60_000;

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
  /** Timed first bytes among the samples behind `rate` (decayed as its sums are: the engine's counters time no request). */
  private timed = 0;
  /** Mean tokens per request sent here: prices the engine's own queue when it is scraped. */
  private meanTokens = 0;
  /** Samples behind `rate` (decayed as its sums are), and when the latest was taken (the queue's clock). */
  private samples = 0;
  private sampledAt = 0;
  /** The timed first bytes behind the rate, for the pool's fit of time = overhead + tokens ÷ rate. */
  private readonly fit = { n: 0, w: 0, t: 0, ww: 0, wt: 0 };

  constructor(private readonly clock: () => number = Date.now) {}

  get size(): number {
    return this.pending.size;
  }

  /** A rate was measured here (else `rate` is the default: a fleet's views price it at the pool's, `pricedRates`). */
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
    const seconds = ttftMs / 1000;
    this.sample(work, seconds, 1);
    const f = this.fit;
    f.n = f.n * RATE_DECAY + 1;
    f.w = f.w * RATE_DECAY + work;
    f.t = f.t * RATE_DECAY + seconds;
    f.ww = f.ww * RATE_DECAY + work * work;
    f.wt = f.wt * RATE_DECAY + work * seconds;
  }

  private sample(tokens: number, seconds: number, timed: number): void {
    this.work = this.work * RATE_DECAY + tokens;
    this.seconds = this.seconds * RATE_DECAY + seconds;
    this.timed = this.timed * RATE_DECAY + timed;
    this.samples = this.samples * RATE_DECAY + 1;
    this.sampledAt = this.clock();
    this.rate = Math.min(1e7, Math.max(50, this.work / this.seconds));
  }

  /** What the measured `rate` is worth now: its decayed sample count, halved for every SAMPLE_HALF_LIFE_MS without a new one. */
  weight(): number {
    if (this.samples === 0) return 0;
    return this.samples * 0.5 ** (Math.max(0, this.clock() - this.sampledAt) / SAMPLE_HALF_LIFE_MS);
  }

  /**
   * The engine's own prefill counters moved by `tokens` over `seconds` (llama.cpp's
   * prompt_tokens_total and prompt_seconds_total, cached tokens excluded): the truest rate
   * there is, so it counts like a measurement from the first scrape on, before the router
   * has timed a single long prefill.
   */
  observeEngine(tokens: number, seconds: number): void {
    if (!(tokens >= MIN_SAMPLE_TOKENS) || !(seconds > 0)) return;
    this.sample(tokens, seconds, 0);
  }

  /**
   * What pricing needs of the measurement: the rate, its weight, and its sums — tokens,
   * seconds and timed first bytes behind the rate, and those first bytes' sums for the pool's
   * fit of its overhead.
   */
  measurement(): RateMeasurement {
    return { rate: this.rate, weight: this.weight(), work: this.work, seconds: this.seconds, timed: this.timed, fit: this.fit };
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

/** One replica's prefill measurement, as `pricedRates` reads it (PrefillQueue.measurement). */
export interface RateMeasurement {
  /** The rate as measured (or as other router instances measured it); `weight` 0: not measured here. */
  rate: number;
  weight: number;
  work?: number;
  seconds?: number;
  timed?: number;
  fit?: Readonly<{ n: number; w: number; t: number; ww: number; wt: number }>;
}

/** Timed first bytes a pool needs before its fixed overhead is fitted. */
const FIT_MIN_SAMPLES = 8;

/**
 * The fixed part of a first byte's time (s) on a pool's replicas: the least-squares line
 * time = overhead + tokens ÷ rate through their timed first bytes. A first byte costs more
 * than its prefill — the engine's step (a vLLM step computes a chunk and one token for every
 * running sequence), the HTTP round trip — so a small prefill, a request that mostly hit the
 * cache, reads as a slow card: pricing such a card by the ratio of sums alone sent it nothing.
 * 0 until FIT_MIN_SAMPLES and while the fit says nothing sensible (no spread of sizes, a
 * negative slope); at most half the mean first-byte time.
 */
export function fittedOverhead(replicas: readonly RateMeasurement[]): number {
  let n = 0, w = 0, t = 0, ww = 0, wt = 0;
  for (const r of replicas) {
    if (!r.fit || !(r.weight > 0)) continue;
    n += r.fit.n;
    w += r.fit.w;
    t += r.fit.t;
    ww += r.fit.ww;
    wt += r.fit.wt;
  }
  const spread = n * ww - w * w;
  if (n < FIT_MIN_SAMPLES || !(spread > 0)) return 0;
  const slope = (n * wt - w * t) / spread;
  if (!(slope > 0)) return 0;
  return Math.min(0.5 * (t / n), Math.max(0, (t - slope * w) / n));
}

/**
 * The prefill rates a pool's replicas are priced at: each replica's measured rate shrunk
 * towards the pool's (the geometric mean of the measured rates, weighted by their samples),
 * the more the fewer and older its own samples — rate = pool × (own ÷ pool)^(w ÷ (w +
 * POOL_PRIOR_SAMPLES)). A pool's replicas serve one model, mostly on one kind of card: a
 * replica timed on a few prefills (a first-byte time also holds the engine's fixed overhead
 * and any misjudged cache hit) would otherwise be priced several times slower or faster than
 * its peers, and a replica priced slow is sent nothing, so its rate is never timed again.
 * One that is really slower (another card in the pool) is seen so once it is timed often.
 * Each rate is first freed of the pool's fixed overhead per timed first byte
 * (`fittedOverhead`). A replica not measured yet is priced at the pool's rate; when none is,
 * each at its own (the default, or what other router instances measured: src/cluster/load.ts).
 */
export function pricedRates(measured: readonly RateMeasurement[]): number[] {
  const overhead = fittedOverhead(measured);
  const replicas = measured.map((r) => {
    if (!(overhead > 0) || !(r.weight > 0) || !r.work || !r.seconds || !r.timed) return r;
    // The prefill seconds behind the rate, without the fixed part of each timed first byte.
    const prefill = Math.max(0.2 * r.seconds, r.seconds - r.timed * overhead);
    return { ...r, rate: r.rate * (r.seconds / prefill) };
  });
  let logs = 0;
  let total = 0;
  for (const r of replicas) {
    if (!(r.weight > 0) || !(r.rate > 0)) continue;
    logs += r.weight * Math.log(r.rate);
    total += r.weight;
  }
  if (total === 0) return replicas.map((r) => r.rate);
  const pool = Math.exp(logs / total);
  return replicas.map((r) => (r.weight > 0 && r.rate > 0 ? pool * (r.rate / pool) ** (r.weight / (r.weight + POOL_PRIOR_SAMPLES)) : pool));
}
