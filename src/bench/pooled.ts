/**
 * The trace's yardsticks, which no policy chooses: the hit rate of one LRU prefix cache
 * holding all N cards' KV (the "pooled" cache: what the fleet's KV could deliver if it were
 * one card), and of an infinite one (the trace's ceiling: every block seen before hits).
 * Each is run over the replayed requests in arrival order; the warm-up's requests fill the
 * cache but are not counted.
 *
 * A request hits its leading blocks present in the cache (a prefix cache serves a prefix:
 * the first absent block ends the hit) and only full blocks count, as an engine caches only
 * full blocks; then all its blocks are inserted or refreshed, the first most recently used:
 * an engine frees a finished request's blocks tail first, so its tail is evicted first
 * (vllm/v1/core/kv_cache_manager.py KVCacheManager.free: "we free the blocks in reverse
 * order so that the tail blocks are evicted first"). Hits are in tokens: full blocks hit ×
 * block tokens, ÷ the counted requests' input tokens. Running sequences' KV and output
 * tokens are not modelled: the yardstick is the cache, not the scheduler.
 */
import type { TracePlan, TraceRecord } from "./trace.ts";

export interface YardstickFigure {
  /** Σ hit tokens ÷ Σ input tokens over the measured requests. */
  hitRate: number;
  hitTokens: number;
}

export interface TraceYardstick {
  /** Measured requests and their input tokens (the denominator). */
  requests: number;
  promptTokens: number;
  /** The infinite cache, in the trace's blocks. */
  ceiling: YardstickFigure;
  /** The pooled LRU cache in the trace's blocks (the report's "pooled" column); undefined when the cards' KV is unknown. */
  pooled?: YardstickFigure & { kvTokens: number; blockTokens: number };
  /** The same cache in the sim's 16-token blocks (a partial trace block's full 16-token blocks count and take room). */
  pooledFine?: YardstickFigure & { kvTokens: number; blockTokens: number };
}

/** What the yardstick sees of a request: its block keys, the tokens of its last block, and whether it is counted. */
export interface BlockRequest {
  keys: readonly number[];
  /** Tokens in the last block (= block tokens when it is full). */
  lastTokens: number;
  inputTokens: number;
  counted: boolean;
}

/**
 * A set of block keys in recency order with a fixed room: a doubly linked list over slots
 * (Int32Arrays) and a map from key to slot, so a touch and an eviction are O(1). (A Map
 * used as the list — delete and re-set to move a key to the end, evict its first key — was
 * quadratic in Bun: each first-key lookup walks past the deleted entries before it.)
 */
export class LruBlocks {
  readonly capacity: number;
  private readonly slot = new Map<number, number>();
  private readonly keys: Float64Array;
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  /** Least and most recently used slots (-1: empty). */
  private head = -1;
  private tail = -1;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.keys = new Float64Array(capacity);
    this.prev = new Int32Array(capacity).fill(-1);
    this.next = new Int32Array(capacity).fill(-1);
  }

  get size(): number {
    return this.slot.size;
  }

  has(key: number): boolean {
    return this.slot.has(key);
  }

  /** Make `key` the most recently used, inserting it (and evicting the least recently used when full). */
  touch(key: number): void {
    if (this.capacity === 0) return;
    let s = this.slot.get(key);
    if (s !== undefined) {
      this.unlink(s);
    } else if (this.slot.size < this.capacity) {
      s = this.slot.size;
    } else {
      s = this.head;
      this.unlink(s);
      this.slot.delete(this.keys[s]!);
    }
    this.keys[s] = key;
    this.slot.set(key, s);
    this.prev[s] = this.tail;
    this.next[s] = -1;
    if (this.tail >= 0) this.next[this.tail] = s;
    this.tail = s;
    if (this.head < 0) this.head = s;
  }

  private unlink(s: number): void {
    const p = this.prev[s]!;
    const n = this.next[s]!;
    if (p >= 0) this.next[p] = n;
    else this.head = n;
    if (n >= 0) this.prev[n] = p;
    else this.tail = p;
  }
}

/** One LRU cache of `capacityBlocks` blocks (Infinity: never evicts) over `requests` in order. */
export function lruHits(requests: Iterable<BlockRequest>, capacityBlocks: number, blockTokens: number): YardstickFigure & { requests: number; promptTokens: number } {
  const unbounded = new Set<number>();
  const lru = Number.isFinite(capacityBlocks) ? new LruBlocks(capacityBlocks) : undefined;
  const has = (key: number) => (lru ? lru.has(key) : unbounded.has(key));
  let hitTokens = 0;
  let promptTokens = 0;
  let counted = 0;
  for (const r of requests) {
    const full = r.lastTokens === blockTokens ? r.keys.length : r.keys.length - 1;
    let hit = 0;
    while (hit < full && has(r.keys[hit]!)) hit++;
    if (r.counted) {
      hitTokens += hit * blockTokens;
      promptTokens += r.inputTokens;
      counted++;
    }
    // Tail first, so the first block ends most recently used.
    for (let b = r.keys.length - 1; b >= 0; b--) {
      if (lru) lru.touch(r.keys[b]!);
      else unbounded.add(r.keys[b]!);
    }
  }
  return { hitRate: promptTokens === 0 ? NaN : hitTokens / promptTokens, hitTokens, requests: counted, promptTokens };
}

/** A record as trace blocks: its hash ids, the last one partial unless input_length is a multiple. */
export function traceBlocks(r: TraceRecord, blockTokens: number, counted: boolean): BlockRequest {
  const last = r.inputLength - (r.hashIds.length - 1) * blockTokens;
  return { keys: r.hashIds, lastTokens: last, inputTokens: r.inputLength, counted };
}

/**
 * A record in `fine`-token blocks (the sim's 16): block j of hash id h is key h × per + j,
 * per = blockTokens / fine; the partial trace block gives its full fine blocks and a partial one.
 */
export function fineBlocks(r: TraceRecord, blockTokens: number, fine: number, counted: boolean): BlockRequest {
  const per = Math.ceil(blockTokens / fine);
  const keys: number[] = [];
  let left = r.inputLength;
  let lastTokens = fine;
  for (const id of r.hashIds) {
    const tokens = Math.min(left, blockTokens);
    for (let j = 0; j * fine < tokens; j++) {
      keys.push(id * per + j);
      lastTokens = Math.min(fine, tokens - j * fine);
    }
    left -= tokens;
  }
  return { keys, lastTokens, inputTokens: r.inputLength, counted };
}

/**
 * The yardsticks over the plan's requests: the ceiling, and with the cards' KV known
 * (`kvTokens` summed over the N cards; 0 = unknown) the pooled cache at the trace's block
 * and at `fineBlockTokens`.
 */
export function traceYardstick(plan: Pick<TracePlan, "records" | "requests" | "spec">, kvTokens: number, fineBlockTokens = 16): TraceYardstick {
  const B = plan.spec.blockTokens;
  const coarse = () => plan.requests.map((p) => traceBlocks(plan.records[p.record]!, B, !p.warmup));
  const ceiling = lruHits(coarse(), Infinity, B);
  const out: TraceYardstick = { requests: ceiling.requests, promptTokens: ceiling.promptTokens, ceiling: { hitRate: ceiling.hitRate, hitTokens: ceiling.hitTokens } };
  if (kvTokens > 0) {
    const pooled = lruHits(coarse(), Math.floor(kvTokens / B), B);
    out.pooled = { hitRate: pooled.hitRate, hitTokens: pooled.hitTokens, kvTokens, blockTokens: B };
    const fine = lruHits(
      plan.requests.map((p) => fineBlocks(plan.records[p.record]!, B, fineBlockTokens, !p.warmup)),
      Math.floor(kvTokens / fineBlockTokens),
      fineBlockTokens,
    );
    out.pooledFine = { hitRate: fine.hitRate, hitTokens: fine.hitTokens, kvTokens, blockTokens: fineBlockTokens };
  }
  return out;
}
