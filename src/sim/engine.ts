/**
 * The simulated engine: a continuous-batching scheduler over a vLLM-style KV pool.
 *
 * Time is a fluid model in "model seconds" (real ms / 1000 / timeScale):
 * - sequences prefilling at once use `prefillTps` as `prefillOrder` says (fluid.ts): oldest
 *   admitted first (vLLM, SGLang) or an equal share each; a prefill's work is its uncached
 *   tokens plus `cachedTokenCost` × its cached tokens (attention over the cached context is
 *   not free), so TTFT = queueing + prefill of what is not cached;
 * - prefill completion emits the first token; then each sequence decodes at
 *   `decodeTps / (1 + decodeBatchSlowdown · (running − 1))`, in admission order slower or
 *   not at all while a prefill runs (`decodeWhilePrefilling`);
 * - a waiting request is admitted (FCFS, head-of-line) when a slot is free (`maxSeqs`) and
 *   the pool can give it every block of its prompt; cached leading blocks are reused;
 * - a decoding sequence that needs a block when none is free preempts the most recently
 *   admitted sequence (recompute, as vLLM does): its computed blocks stay cached but
 *   evictable, and it waits at the head of the queue.
 *
 * The engine processes events in model-time order up to "now" whenever it is woken (by its
 * one timer, a new request, a cancel or a read), so a late timer never changes the result.
 */
import { BlockPool, chainHash, rootHash, type BlockHash } from "./block-pool.ts";
import { realClock, type Clock } from "./clock.ts";
import { ComputedRecord } from "./computed-record.ts";
import {
  TTFT_BUCKETS,
  zeroStats,
  type EndReason,
  type EngineStats,
  type FinishReason,
  type HistogramView,
  type KvSnapshot,
  type PrefixStop,
  type SequenceListener,
  type SequenceResult,
  type SequenceState,
  type SimEngineApi,
  type SimSequence,
  type SubmitInput,
} from "./engine-api.ts";
import { EPS, FluidTimer, nextFluidEvent, runFluidUntil, type FluidHost } from "./fluid.ts";
import type { EngineOptions } from "./options.ts";
import { outputSeed, Tokenizer } from "./tokenizer.ts";

/** Relative tolerance under which the prefills ahead count as down to one chunk (float noise). */
const BATCH_SLACK = 1e-9;

export { TTFT_BUCKETS } from "./engine-api.ts";
export type { EndReason, EngineStats, FinishReason, PrefixStop, SequenceListener, SequenceResult, SequenceState, SubmitInput } from "./engine-api.ts";

export class Sequence implements SimSequence {
  readonly id: number;
  readonly prompt: string;
  readonly promptTokens: number;
  readonly maxTokens: number;
  readonly finishReason: FinishReason;
  readonly salt: string | undefined;
  readonly seed: number;
  readonly listener: SequenceListener;
  readonly output: ((index: number) => string) | undefined;
  readonly done: Promise<SequenceResult>;
  state: SequenceState = "waiting";
  generated = 0;
  genText = "";
  cachedTokens = 0;
  prefixStop: PrefixStop | undefined;
  heldTokens = 0;
  computedTokens = 0;
  admissions = 0;
  blocks: number[] = [];
  hashes: BlockHash[] = [];
  committed = 0;
  /** Tokens found cached at the current admission. */
  base = 0;
  prefillWork = 0;
  prefillDone = 0;
  decodeFrac = 0;
  readonly arrivalMs: number;
  readonly arrivalModel: number;
  firstTokenMs: number | undefined;
  firstTokenModel: number | undefined;
  endRequested: EndReason | undefined;
  resolve!: (result: SequenceResult) => void;

  constructor(id: number, input: SubmitInput, promptTokens: number, arrivalMs: number, arrivalModel: number) {
    this.id = id;
    this.prompt = input.prompt;
    this.promptTokens = promptTokens;
    this.maxTokens = input.maxTokens;
    this.finishReason = input.finishReason;
    this.salt = input.salt;
    this.seed = outputSeed(input.prompt);
    this.listener = input.listener ?? {};
    this.output = input.output;
    this.arrivalMs = arrivalMs;
    this.arrivalModel = arrivalModel;
    this.done = new Promise((resolve) => (this.resolve = resolve));
  }

  /** Prompt plus generated tokens: what the KV cache must hold. */
  get contextTokens(): number {
    return this.promptTokens + this.generated;
  }
}

export class Histogram implements HistogramView {
  readonly buckets: readonly number[];
  counts: number[];
  sum = 0;
  count = 0;

  constructor(buckets: readonly number[]) {
    this.buckets = buckets;
    this.counts = buckets.map(() => 0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) this.counts[i]!++;
  }

  reset(): void {
    this.counts = this.buckets.map(() => 0);
    this.sum = 0;
    this.count = 0;
  }
}

export class SimEngine implements SimEngineApi {
  readonly options: EngineOptions;
  readonly pool: BlockPool;
  readonly tokenizer: Tokenizer;
  readonly clock: Clock;
  stats: EngineStats = zeroStats();
  readonly finished = { stop: 0, length: 0, abort: 0 };
  readonly ttft = new Histogram(TTFT_BUCKETS);
  /** Block hashes computed here since the last reset: tells an evicted block from a new one. */
  readonly computed: ComputedRecord;

  private readonly blockChars: number;
  private modelTime: number;
  private waiting: Sequence[] = [];
  private running: Sequence[] = [];
  private nextId = 1;
  private readonly timer: FluidTimer;
  private readonly fluid: FluidHost<Sequence> = {
    running: () => this.running,
    time: () => this.modelTime,
    setTime: (t) => (this.modelTime = t),
    onDue: () => {
      this.processEvents();
      this.drainEnds();
      this.admit();
    },
    wakeAt: () => this.batchAdmissionAt(),
  };
  private busy = false;
  private pendingEnds: Sequence[] = [];
  /** Bumped whenever blocks are released or cached, so a blocked queue head is retried only then. */
  private poolEpoch = 0;
  private blockedHead: { seq: Sequence; epoch: number } | undefined;
  private readonly endListeners = new Set<(seq: Sequence, result: SequenceResult) => void>();
  private readonly submitListeners = new Set<(seq: Sequence) => void>();

  constructor(options: EngineOptions, clock: Clock = realClock) {
    this.options = options;
    this.clock = clock;
    this.pool = new BlockPool(Math.floor(options.kvTokens / options.blockTokens));
    this.computed = ComputedRecord.forPool(this.pool.numBlocks);
    this.tokenizer = new Tokenizer(options.charsPerToken);
    this.blockChars = options.blockTokens * options.charsPerToken;
    this.modelTime = this.modelNow();
    this.timer = new FluidTimer(clock, options, () => this.sync());
  }

  get runningCount(): number {
    return this.running.length;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  kv(): KvSnapshot {
    const pool = this.pool;
    return {
      totalBlocks: pool.numBlocks,
      freeBlocks: pool.freeBlocks,
      usedBlocks: pool.usedBlocks,
      cachedBlocks: pool.cachedBlocks,
      evictedBlocksTotal: pool.evictions,
      usage: pool.usage,
    };
  }

  /** Queue a request. Its tokens arrive through `listener`; `done` resolves when it ends. */
  submit(input: SubmitInput): Sequence {
    this.sync();
    const seq = new Sequence(this.nextId++, input, this.tokenizer.count(input.prompt), this.clock.now(), this.modelTime);
    this.stats.prompt_tokens_total += seq.promptTokens;
    this.waiting.push(seq);
    this.sync();
    for (const listener of this.submitListeners) listener(seq);
    return seq;
  }

  /**
   * Stop a sequence and free its KV (computed full blocks stay cached). `reason` "cancelled"
   * (the client went away) counts in `cancelled_total`. Safe to call from a listener.
   */
  cancel(sequence: SimSequence, reason: Exclude<EndReason, FinishReason> = "cancelled"): void {
    const seq = sequence as Sequence;
    if (seq.state === "done" || seq.endRequested) return;
    if (this.busy) {
      seq.endRequested = reason;
      this.pendingEnds.push(seq);
      return;
    }
    // Catch up first, so the sequence ends now and not at the last wake-up.
    this.sync();
    // sync() may have finished it meanwhile.
    if ((seq.state as SequenceState) === "done" || seq.endRequested) return;
    seq.endRequested = reason;
    this.pendingEnds.push(seq);
    this.sync();
  }

  /** How much of `prompt` this replica has cached right now. Touches nothing. */
  match(prompt: string, salt?: string): { promptTokens: number; cachedTokens: number } {
    this.sync();
    const promptTokens = this.tokenizer.count(prompt);
    if (!this.options.prefixCache || promptTokens === 0) return { promptTokens, cachedTokens: 0 };
    const B = this.options.blockTokens;
    const maxHit = Math.min(Math.floor(prompt.length / this.blockChars), Math.floor((promptTokens - 1) / B));
    let parent = rootHash(salt);
    let hit = 0;
    for (; hit < maxHit; hit++) {
      parent = chainHash(parent, prompt.slice(hit * this.blockChars, (hit + 1) * this.blockChars));
      if (this.pool.lookup(parent) === undefined) break;
    }
    return { promptTokens, cachedTokens: hit * B };
  }

  /** Bring the simulation up to the present (reads call this so they see current state). */
  sync(): void {
    if (this.busy) return;
    this.busy = true;
    try {
      this.simulateUntil(this.modelNow());
      this.commitPrefillProgress();
    } finally {
      this.busy = false;
    }
    this.armTimer();
  }

  /** End every sequence, forget the cache, zero the counters. */
  reset(): void {
    this.sync();
    for (const seq of [...this.running, ...this.waiting]) seq.endRequested = "reset";
    this.busy = true;
    try {
      this.drainEnds([...this.running, ...this.waiting]);
    } finally {
      this.busy = false;
    }
    this.pool.clearCache();
    this.computed.clear();
    this.poolEpoch++;
    this.stats = zeroStats();
    this.finished.stop = this.finished.length = this.finished.abort = 0;
    this.ttft.reset();
    this.armTimer();
  }

  dropCache(): void {
    this.sync();
    this.pool.clearCache();
    this.poolEpoch++;
    this.armTimer();
  }

  /** Stop the timer (the server is going away); running sequences end as "reset". */
  close(): void {
    this.reset();
    this.timer.clear();
  }

  /** Observe every submitted sequence. Returns an unsubscribe. */
  onSubmit(listener: (seq: Sequence) => void): () => void {
    this.submitListeners.add(listener);
    return () => this.submitListeners.delete(listener);
  }

  /** Observe every sequence's end (tests wait on this instead of polling). Returns an unsubscribe. */
  onSequenceEnd(listener: (seq: Sequence, result: SequenceResult) => void): () => void {
    this.endListeners.add(listener);
    return () => this.endListeners.delete(listener);
  }

  /** Sequences in the scheduler, for introspection. */
  sequences(): { running: readonly Sequence[]; waiting: readonly Sequence[] } {
    return { running: this.running, waiting: this.waiting };
  }

  // --- the simulation -------------------------------------------------------------------

  private modelNow(): number {
    return this.clock.now() / 1000 / this.options.timeScale;
  }

  private simulateUntil(target: number): void {
    this.drainEnds();
    this.admit();
    runFluidUntil(target, this.fluid, this.options);
  }

  private processEvents(): void {
    for (const seq of [...this.running]) {
      if (seq.state === "done" || !this.running.includes(seq)) continue;
      if (seq.state === "prefill" && seq.prefillWork - seq.prefillDone <= EPS * Math.max(1, seq.prefillWork)) {
        this.finishPrefill(seq);
      } else if (seq.state === "decode" && seq.decodeFrac >= 1 - EPS) {
        this.decodeStep(seq);
      }
    }
  }

  private finishPrefill(seq: Sequence): void {
    this.commit(seq, seq.contextTokens);
    seq.state = "decode";
    seq.decodeFrac = 0;
    this.emit(seq);
  }

  private decodeStep(seq: Sequence): void {
    // Producing the next token writes the KV of the last one: make room for it first.
    const need = Math.ceil(seq.contextTokens / this.options.blockTokens);
    while (seq.blocks.length < need) {
      const id = this.pool.grow();
      if (id !== null) {
        seq.blocks.push(id);
        continue;
      }
      const victim = this.running[this.running.length - 1]!;
      this.preempt(victim);
      if (victim === seq) return;
    }
    seq.decodeFrac = Math.max(0, seq.decodeFrac - 1);
    this.commit(seq, seq.contextTokens);
    this.emit(seq);
  }

  private emit(seq: Sequence): void {
    const index = seq.generated;
    const text = seq.output?.(index) ?? this.tokenizer.word(seq.seed, index);
    seq.genText += text;
    seq.generated++;
    this.stats.generation_tokens_total++;
    if (index === 0) {
      seq.firstTokenMs = this.clock.now();
      seq.firstTokenModel = this.modelTime;
      this.ttft.observe((seq.firstTokenMs - seq.arrivalMs) / 1000);
    }
    if (!seq.endRequested) seq.listener.onToken?.(text, index, seq);
    if (seq.generated >= seq.maxTokens && !seq.endRequested) seq.endRequested = seq.finishReason;
    if (seq.endRequested) this.pendingEnds.push(seq);
  }

  /** End the sequences asked to end (finished, cancelled, faulted, reset) and free their KV. */
  private drainEnds(extra: Sequence[] = []): void {
    const ends = [...this.pendingEnds, ...extra];
    this.pendingEnds = [];
    for (const seq of ends) {
      if (seq.state === "done") continue;
      const reason = seq.endRequested ?? "reset";
      if (seq.state === "prefill") this.commit(seq, this.prefillComputed(seq));
      this.releaseBlocks(seq);
      this.running = this.running.filter((s) => s !== seq);
      this.waiting = this.waiting.filter((s) => s !== seq);
      seq.state = "done";
      if (reason === "stop" || reason === "length") {
        this.stats.completed_total++;
        this.finished[reason]++;
      } else if (reason === "cancelled" || reason === "fault") {
        this.finished.abort++;
        if (reason === "cancelled") this.stats.cancelled_total++;
      }
      const result: SequenceResult = {
        id: seq.id,
        reason,
        text: seq.genText,
        promptTokens: seq.promptTokens,
        completionTokens: seq.generated,
        cachedTokens: seq.cachedTokens,
        prefixStop: seq.prefixStop,
        heldTokens: seq.heldTokens,
        computedTokens: seq.computedTokens,
        ttftMs: seq.firstTokenMs === undefined ? undefined : seq.firstTokenMs - seq.arrivalMs,
        ttftModelMs: seq.firstTokenModel === undefined ? undefined : (seq.firstTokenModel - seq.arrivalModel) * 1000,
        durationMs: this.clock.now() - seq.arrivalMs,
      };
      seq.resolve(result);
      seq.listener.onEnd?.(result);
      for (const listener of this.endListeners) listener(seq, result);
    }
  }

  /**
   * FCFS admission; stops at the first request that does not fit (head-of-line, like vLLM).
   * In `arrival` order, `prefixLookup` says when a request is admitted — its cache looked
   * up, its blocks allocated:
   * - scheduled: once no admitted prefill remains. vLLM V1 (vllm/v1/core/sched/scheduler.py
   *   Scheduler.schedule) takes a waiting request, and calls `get_computed_blocks` for it,
   *   only with token budget left after the running requests' chunks, whose blocks it cached
   *   as it allocated them. So a request queued behind the prefill of its prefix finds that
   *   prefix cached, and a waiting request holds no KV.
   * - batch: once the admitted prefills have at most one chunk (`prefillChunkTokens`) of work
   *   left, seeing what was computed by then. SGLang matches a waiting request against its
   *   radix tree each time it forms a prefill batch with it (scheduler.py
   *   get_new_batch_prefill → schedule_batch.py `Req.init_next_round_input`), but its overlap
   *   loop (event_loop_overlap) forms that batch while the previous one runs, before
   *   process_batch_result_prefill → `cache_unfinished_req` has put the previous batch's
   *   tokens in the tree: a request queued at least a batch behind the prefill of its prefix
   *   finds it, one in the very next batch misses that prefill's last chunk (all of it for a
   *   prompt within one chunk). The sim's prefill is fluid, not whole batches: the request is
   *   admitted when one chunk of work is left (`batchAdmissionAt` wakes the engine then), so
   *   it misses up to a whole chunk where SGLang misses only the last, possibly shorter one.
   * - arrival: as soon as it fits.
   */
  private admit(): void {
    const lookup = this.lookup();
    // What the running prefills have computed is in the tree for a batch formed now.
    if (lookup === "batch" && this.waiting.length > 0) this.commitPrefillProgress();
    while (this.waiting.length > 0 && this.running.length < this.options.maxSeqs) {
      if (lookup === "scheduled" && this.running.some((s) => s.state === "prefill")) return;
      if (lookup === "batch" && this.beyondOneChunk() > 0) return;
      const head = this.waiting[0]!;
      if (this.blockedHead?.seq === head && this.blockedHead.epoch === this.poolEpoch) return;
      if (!this.tryAdmit(head)) {
        this.blockedHead = { seq: head, epoch: this.poolEpoch };
        return;
      }
      this.blockedHead = undefined;
      this.waiting.shift();
      this.running.push(head);
    }
  }

  /**
   * With `prefixLookup` batch, when the waiting head is next admitted: the model time at which
   * the running prefills (served one at a time at the full rate) have one chunk left.
   */
  private batchAdmissionAt(): number {
    if (this.lookup() !== "batch" || this.waiting.length === 0 || this.running.length >= this.options.maxSeqs) return Infinity;
    const over = this.beyondOneChunk();
    if (over <= 0) return Infinity;
    // A wake that float rounding puts at the present moves nothing: the next event admits instead.
    const at = this.modelTime + over / this.options.prefillTps;
    return at > this.modelTime ? at : Infinity;
  }

  /** When a waiting request looks its prefix up: `prefixLookup` in arrival order, else as soon as it fits. */
  private lookup(): EngineOptions["prefixLookup"] {
    return this.options.prefillOrder === "arrival" ? this.options.prefixLookup : "arrival";
  }

  /** Prefill work the admitted sequences have left beyond one chunk (tokens; ≤ 0 within float noise of it, or less). */
  private beyondOneChunk(): number {
    let left = 0;
    for (const s of this.running) if (s.state === "prefill") left += Math.max(0, s.prefillWork - s.prefillDone);
    const over = left - this.options.prefillChunkTokens;
    return over > BATCH_SLACK * this.options.prefillChunkTokens ? over : 0;
  }

  private tryAdmit(seq: Sequence): boolean {
    const B = this.options.blockTokens;
    const context = seq.contextTokens;
    // Like vLLM, at least the last token is always computed, so a fully cached prompt still
    // recomputes its last block.
    const maxHit = this.options.prefixCache ? Math.min(this.fullBlocks(seq), Math.floor((context - 1) / B)) : 0;
    const hits: number[] = [];
    for (let b = 0; b < maxHit; b++) {
      const id = this.pool.lookup(this.hashAt(seq, b));
      if (id === undefined) break;
      hits.push(id);
    }
    const ids = this.pool.allocate(hits, Math.ceil(context / B) - hits.length);
    if (!ids) return false;
    const cached = hits.length * B;
    seq.blocks = ids;
    seq.committed = hits.length;
    seq.base = cached;
    seq.prefillWork = context - cached + this.options.cachedTokenCost * cached;
    seq.prefillDone = 0;
    seq.state = "prefill";
    this.stats.prefix_cache_queries_total += context;
    this.stats.prefix_cache_hits_total += cached;
    if (seq.admissions === 0) {
      seq.cachedTokens = cached;
      const stop = this.stopReason(seq, hits.length, maxHit);
      seq.prefixStop = stop.stop;
      seq.heldTokens = stop.stop === "evicted" ? Math.min(seq.promptTokens, stop.heldBlocks * B) : cached;
      this.stats.cached_tokens_total += cached;
      this.stats[`stop_${seq.prefixStop}_total`]++;
    }
    seq.admissions++;
    if (seq.admissions === 1) seq.listener.onAdmit?.(seq);
    return true;
  }

  /**
   * Why a hit of `hit` blocks (of at most `maxHit`) stopped there (see PrefixStop), and how
   * many leading blocks this replica had computed: beyond the hit, those evicted since.
   */
  private stopReason(seq: Sequence, hit: number, maxHit: number): { stop: PrefixStop; heldBlocks: number } {
    if (hit >= maxHit) return { stop: "full", heldBlocks: hit };
    let b = hit;
    while (b < maxHit && this.computed.has(this.hashAt(seq, b))) b++;
    return { stop: b > hit ? "evicted" : "new", heldBlocks: b };
  }

  private preempt(seq: Sequence): void {
    this.commit(seq, seq.state === "prefill" ? this.prefillComputed(seq) : seq.contextTokens - 1);
    this.releaseBlocks(seq);
    this.running = this.running.filter((s) => s !== seq);
    this.waiting.unshift(seq);
    seq.state = "waiting";
    seq.decodeFrac = 0;
    this.stats.preemptions_total++;
  }

  private releaseBlocks(seq: Sequence): void {
    if (seq.blocks.length === 0) return;
    this.pool.release(seq.blocks);
    seq.blocks = [];
    seq.committed = 0;
    this.poolEpoch++;
  }

  /** Tokens whose KV a prefilling sequence has computed so far (chunked prefill caches as it goes). */
  private prefillComputed(seq: Sequence): number {
    const fraction = seq.prefillWork === 0 ? 1 : Math.min(1, seq.prefillDone / seq.prefillWork);
    // The epsilon keeps float noise (0.4 × 1000 = 399.99…) from losing a whole block.
    return seq.base + Math.floor((seq.contextTokens - seq.base) * fraction + 1e-6);
  }

  private commitPrefillProgress(): void {
    for (const seq of this.running) if (seq.state === "prefill") this.commit(seq, this.prefillComputed(seq));
  }

  /** Publish the full blocks among the first `computedTokens` tokens under their chained hashes. */
  private commit(seq: Sequence, computedTokens: number): void {
    if (!this.options.prefixCache) return;
    const limit = Math.min(Math.floor(computedTokens / this.options.blockTokens), this.fullBlocks(seq), seq.blocks.length);
    for (let b = seq.committed; b < limit; b++) {
      const hash = this.hashAt(seq, b);
      this.pool.commit(seq.blocks[b]!, hash);
      this.computed.add(hash);
    }
    if (limit > seq.committed) {
      seq.committed = limit;
      this.poolEpoch++;
    }
  }

  /** Blocks whose every character is known (a block ending mid-token is not full). */
  private fullBlocks(seq: Sequence): number {
    return Math.floor((seq.prompt.length + seq.genText.length) / this.blockChars);
  }

  private hashAt(seq: Sequence, b: number): BlockHash {
    while (seq.hashes.length <= b) {
      const k = seq.hashes.length;
      const parent = k === 0 ? rootHash(seq.salt) : seq.hashes[k - 1]!;
      seq.hashes.push(chainHash(parent, this.textSlice(seq, k * this.blockChars, (k + 1) * this.blockChars)));
    }
    return seq.hashes[b]!;
  }

  private textSlice(seq: Sequence, start: number, end: number): string {
    const p = seq.prompt.length;
    if (end <= p) return seq.prompt.slice(start, end);
    if (start >= p) return seq.genText.slice(start - p, end - p);
    return seq.prompt.slice(start) + seq.genText.slice(0, end - p);
  }

  private armTimer(): void {
    const next = nextFluidEvent(this.running, this.modelTime, this.options);
    const wake = this.batchAdmissionAt();
    this.timer.arm(wake < next.at ? { at: wake, prefill: true } : next, this.modelNow());
  }
}
