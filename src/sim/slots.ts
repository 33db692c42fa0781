/**
 * llama.cpp's KV model: `llama-server`'s slots and its host-RAM prompt cache, on the same
 * fluid time model as the vLLM-like engine (fluid.ts). It runs the llamacpp profile, and the
 * ollama profile too (Ollama runs GGUF models on llama-server: profiles/ollama.ts). Every
 * rule below names the llama.cpp source it imitates (commit 80fb11a, the prebuilt
 * ../shared/engines/llama-server; `server-context.cpp` = tools/server/server-context.cpp).
 *
 * - `parallel` slots, each with its own KV of n_ctx / parallel tokens (or, unified, a
 *   share of one n_ctx pool). A slot runs one request at a time; more requests than slots
 *   wait, first come first served (server-context.cpp process_single_task defers a task
 *   when get_available_slot finds no slot; server-queue.cpp pop_deferred_task puts the
 *   oldest deferred task first when a slot is released).
 * - A request gets the idle slot whose cached tokens share the longest common prefix with
 *   its prompt, relative to the prompt's length, if that is above `slotPromptSimilarity`;
 *   otherwise the least recently released idle slot (server-context.cpp get_available_slot).
 * - It reuses that slot's longest common prefix at token granularity, minus one token when
 *   the whole prompt matches (pre_decode, run by update_slots: n_past = get_common_prefix;
 *   [TAG_PROMPT_LOGITS]).
 *   Concurrent requests in different slots share nothing.
 * - Work runs in steps (update_slots: one llama_decode of the generating slots' next tokens
 *   plus up to `batchSize` prompt tokens). A request that arrives during a step waits for
 *   its end (server-queue.cpp yield_to_queue: a completion task is declined while decoding
 *   and offered again after), so a burst's later requests can find the first one's slot
 *   already released and reuse it. Between steps the main loop takes every queued task
 *   (process_new_tasks), and RAM-cache saves and restores are copies made right there: a
 *   request arriving while they run joins the same step, and they delay its start. Within
 *   a step, time is the fluid model's.
 * - The RAM prompt cache (server-task.cpp server_prompt_cache; prompt-cache.ts): when a
 *   slot is taken by LRU, or by similarity while keeping under half of its tokens, its
 *   tokens are saved there and the cached prompt that matches the request better is moved
 *   into the slot (a restore, not a prefill); idle slots are saved whenever a task starts
 *   (--cache-idle-slots).
 *
 * Tokens are the sim's tokenizer's: c characters each (tokenizer.ts). A slot holds a text;
 * two texts share a token when they share all its characters, so the common prefix in
 * tokens is the common prefix in characters, rounded down to a whole token (a prompt's
 * last, partial token is shared only by an identical text).
 */
import { chainHash, rootHash, type BlockHash } from "./block-pool.ts";
import { realClock, type Clock } from "./clock.ts";
import {
  TTFT_BUCKETS,
  zeroStats,
  type EndReason,
  type EngineStats,
  type FinishReason,
  type KvSnapshot,
  type PrefixStop,
  type SequenceResult,
  type SequenceState,
  type SimEngineApi,
  type SimSequence,
  type SlotInfo,
  type SubmitInput,
} from "./engine-api.ts";
import { Histogram, Sequence } from "./engine.ts";
import { EPS, FluidTimer, nextFluidEvent, runFluidUntil, type FluidEvent, type FluidHost } from "./fluid.ts";
import { slotContext, type EngineOptions, type LlamaCppOptions } from "./options.ts";
import { PromptCache, type PromptCacheView } from "./prompt-cache.ts";
import { commonPrefixTokens, Tokenizer } from "./tokenizer.ts";

export type SlotEngineOptions = EngineOptions & LlamaCppOptions;

/** Model seconds within which two instants count as one (a step's start, a step's end). */
const SAME_INSTANT_S = 1e-7;

export interface SlotSubmitInput extends SubmitInput {
  /** The request's `cache_prompt` (default: the server's, `prefixCache`); false = reuse nothing. */
  cachePrompt?: boolean;
}

/** One slot as GET /slots shows it, plus the tokens its KV holds (llama.cpp: `n_prompt_tokens`). */
export interface SlotView extends SlotInfo {
  /** Tokens whose KV the slot holds now (prompt and generated tokens; llama.cpp's slot.prompt.tokens). */
  cached_tokens: number;
}

export class SlotSequence extends Sequence {
  slot: Slot | undefined;
  readonly cachePrompt: boolean | undefined;
  /** Its slot is cleared when it ends (a unified KV overflowed). */
  clearOnEnd = false;

  constructor(id: number, input: SlotSubmitInput, promptTokens: number, arrivalMs: number, arrivalModel: number) {
    super(id, input, promptTokens, arrivalMs, arrivalModel);
    this.cachePrompt = input.cachePrompt;
  }
}

/** One llama.cpp slot (server-context.cpp server_slot). */
export class Slot {
  readonly id: number;
  readonly nCtx: number;
  /** The text whose KV an idle slot holds (slot.prompt.tokens); a busy slot's is its sequence's. */
  content = "";
  /** The request it is processing. */
  seq: SlotSequence | undefined;
  /** Order of the last release (server_slot::release sets t_last_used); -1 = never used. */
  lastUsed = -1;

  constructor(id: number, nCtx: number) {
    this.id = id;
    this.nCtx = nCtx;
  }
}

/**
 * A bounded record of the token prefixes this replica has computed since the last reset,
 * so a miss can be told apart: computed and gone (evicted) from never computed (new).
 * Keyed by the chained hash of the whole blocks before a block (block-pool.ts), holding
 * the contents computed in that block (whole or, where a text ended, partial), so a prefix
 * ending mid-block is found too. The oldest-touched keys are forgotten first; a forgotten
 * prefix reads as new.
 */
class ComputedPrefixes {
  private readonly byParent = new Map<BlockHash, string[]>();
  private readonly blockChars: number;
  private readonly capacity: number;
  private static readonly ROOT = rootHash(undefined);
  /** Distinct continuations kept per block. */
  private static readonly MAX_CHILDREN = 64;

  constructor(blockChars: number, capacity: number) {
    this.blockChars = blockChars;
    this.capacity = capacity;
  }

  /** Note that every prefix of `text` was computed. */
  add(text: string): void {
    let parent = ComputedPrefixes.ROOT;
    for (let start = 0; start < text.length; start += this.blockChars) {
      const child = text.slice(start, start + this.blockChars);
      this.note(parent, child);
      if (child.length < this.blockChars) break;
      parent = chainHash(parent, child);
    }
  }

  /** Whether the first `chars` characters of `text` were ever computed here (as one prefix). */
  has(text: string, chars: number): boolean {
    const block = Math.floor((chars - 1) / this.blockChars);
    let parent = ComputedPrefixes.ROOT;
    for (let b = 0; b < block; b++) parent = chainHash(parent, text.slice(b * this.blockChars, (b + 1) * this.blockChars));
    const need = text.slice(block * this.blockChars, chars);
    return this.byParent.get(parent)?.some((c) => c.startsWith(need)) ?? false;
  }

  clear(): void {
    this.byParent.clear();
  }

  private note(parent: BlockHash, child: string): void {
    let children = this.byParent.get(parent);
    if (children) {
      this.byParent.delete(parent);
      if (!children.some((c) => c.startsWith(child))) {
        children = children.filter((c) => !child.startsWith(c));
        children.push(child);
        if (children.length > ComputedPrefixes.MAX_CHILDREN) children.shift();
      }
    } else {
      children = [child];
    }
    this.byParent.set(parent, children);
    if (this.byParent.size > this.capacity) this.byParent.delete(this.byParent.keys().next().value as BlockHash);
  }
}

export class SlotEngine implements SimEngineApi {
  readonly options: SlotEngineOptions;
  readonly tokenizer: Tokenizer;
  readonly clock: Clock;
  stats: EngineStats = zeroStats();
  readonly finished = { stop: 0, length: 0, abort: 0 };
  readonly ttft = new Histogram(TTFT_BUCKETS);
  /** Tokens of KV one request can use at most: the context of one slot. */
  readonly perSlotContext: number;
  /** All slots' KV together (llama_n_ctx). */
  readonly totalContext: number;

  private readonly slotList: Slot[];
  private readonly ramCache: PromptCache | undefined;
  private readonly computed: ComputedPrefixes;
  private readonly cpt: number;
  private modelTime: number;
  private waiting: SlotSequence[] = [];
  private running: SlotSequence[] = [];
  private nextId = 1;
  private releases = 0;
  /** Tokens of slot KV overwritten or cleared since the last reset. */
  private droppedTokens = 0;
  private readonly timer: FluidTimer;
  private readonly fluid: FluidHost<SlotSequence> = {
    running: () => this.running,
    time: () => this.modelTime,
    setTime: (t) => (this.modelTime = t),
    onDue: () => {
      this.processEvents();
      this.drainEnds();
      this.admit();
    },
  };
  private busy = false;
  /**
   * Model seconds. `stepEnd`: when the decode step running now ends (requests arriving
   * before wait for it). `windowEnd`: when the pass that gives queued requests their slots
   * ends (its RAM-cache copies take time); requests arriving until then join it.
   */
  private stepEnd = -Infinity;
  private windowEnd = -Infinity;
  /** Requests given a slot in the current pass, whose prompts start with the next step. */
  private launched: SlotSequence[] = [];
  private pendingEnds: SlotSequence[] = [];
  private readonly endListeners = new Set<(seq: SlotSequence, result: SequenceResult) => void>();
  private readonly submitListeners = new Set<(seq: SlotSequence) => void>();

  constructor(options: SlotEngineOptions, clock: Clock = realClock) {
    if (options.parallel < 1) throw new Error(`sim: SlotEngine needs resolved options (parallel ${options.parallel}); use resolveSimOptions`);
    this.options = options;
    this.clock = clock;
    this.tokenizer = new Tokenizer(options.charsPerToken);
    this.cpt = options.charsPerToken;
    this.perSlotContext = slotContext(options);
    // llama-context.cpp: n_ctx = n_ctx_seq × n_seq_max when the KV is split per slot.
    this.totalContext = options.kvUnified ? this.perSlotContext : this.perSlotContext * options.parallel;
    this.slotList = Array.from({ length: options.parallel }, (_, id) => new Slot(id, this.perSlotContext));
    // server-context.cpp load_model: the prompt cache exists unless --cache-ram is 0; its token limit is n_ctx.
    this.ramCache =
      options.cacheRam === 0 ? undefined : new PromptCache(options.cacheRam, this.totalContext, options.cacheRamBytesPerToken, options.charsPerToken);
    const recordBlocks = Math.ceil(this.totalContext / options.blockTokens);
    this.computed = new ComputedPrefixes(options.blockTokens * options.charsPerToken, Math.max(65_536, 16 * recordBlocks));
    this.modelTime = this.modelNow();
    this.timer = new FluidTimer(clock, options, () => this.sync());
  }

  /** Requests holding a slot (llama.cpp: processing), prompts started or about to. */
  get runningCount(): number {
    return this.running.length + this.launched.length;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Per slot: id, context, whether it runs a request, and the tokens its KV holds. */
  slots(): SlotView[] {
    this.sync();
    return this.slotList.map((slot) => ({
      id: slot.id,
      n_ctx: slot.nCtx,
      is_processing: slot.seq !== undefined,
      cached_tokens: this.tokenizer.count(this.contentOf(slot)),
    }));
  }

  /** The RAM prompt cache (`enabled: false` with --cache-ram 0). */
  promptCache(): PromptCacheView {
    this.sync();
    const c = this.ramCache;
    return {
      enabled: c !== undefined,
      limit_mib: this.options.cacheRam,
      limit_tokens: c?.effectiveTokenLimit ?? 0,
      bytes_per_token: this.options.cacheRamBytesPerToken,
      entries: c?.entries.length ?? 0,
      tokens: c?.tokens ?? 0,
      bytes: c?.bytes ?? 0,
      entry_tokens: c?.entries.map((e) => e.tokens) ?? [],
      saves_total: c?.saves ?? 0,
      restores_total: c?.restores ?? 0,
      restored_tokens_total: c?.restoredTokens ?? 0,
      evictions_total: c?.evictions ?? 0,
    };
  }

  /**
   * The slots' KV in blocks of `blockTokens`: used = held by slots running a request,
   * cached = held by any slot, evicted = slot tokens overwritten or cleared since reset.
   */
  kv(): KvSnapshot {
    this.sync();
    const B = this.options.blockTokens;
    let used = 0;
    let held = 0;
    for (const slot of this.slotList) {
      const tokens = this.tokenizer.count(this.contentOf(slot));
      held += tokens;
      if (slot.seq) used += tokens;
    }
    const totalBlocks = Math.floor(this.totalContext / B);
    const usedBlocks = Math.ceil(used / B);
    return {
      totalBlocks,
      freeBlocks: totalBlocks - usedBlocks,
      usedBlocks,
      cachedBlocks: Math.ceil(held / B),
      evictedBlocksTotal: Math.floor(this.droppedTokens / B),
      usage: used / this.totalContext,
    };
  }

  /** Queue a request. Its tokens arrive through `listener`; `done` resolves when it ends. */
  submit(input: SlotSubmitInput): SlotSequence {
    this.sync();
    const seq = new SlotSequence(this.nextId++, input, this.tokenizer.count(input.prompt), this.clock.now(), this.modelTime);
    this.stats.prompt_tokens_total += seq.promptTokens;
    this.waiting.push(seq);
    this.sync();
    for (const listener of this.submitListeners) listener(seq);
    return seq;
  }

  /** Stop a sequence; its slot keeps what it computed. "cancelled" counts in `cancelled_total`. Safe from a listener. */
  cancel(sequence: SimSequence, reason: Exclude<EndReason, FinishReason> = "cancelled"): void {
    const seq = sequence as SlotSequence;
    if (seq.state === "done" || seq.endRequested) return;
    if (this.busy) {
      seq.endRequested = reason;
      this.pendingEnds.push(seq);
      return;
    }
    this.sync();
    if ((seq.state as SequenceState) === "done" || seq.endRequested) return;
    seq.endRequested = reason;
    this.pendingEnds.push(seq);
    this.sync();
  }

  /**
   * How much of `prompt` a request sent now would find cached: the slot llama.cpp would
   * give it (among the idle slots, or all slots when none is idle) and the RAM entry it
   * would restore. Touches nothing (a save's evictions are not foreseen). llama.cpp has no
   * cache salt; `salt` is ignored, as llama-server ignores `cache_salt`.
   */
  match(prompt: string, _salt?: string): { promptTokens: number; cachedTokens: number } {
    this.sync();
    const promptTokens = this.tokenizer.count(prompt);
    if (!this.options.prefixCache || promptTokens === 0) return { promptTokens, cachedTokens: 0 };
    const idle = this.slotList.filter((s) => !s.seq);
    const choice = this.chooseSlot(prompt, promptTokens, idle.length > 0 ? idle : this.slotList);
    if (!choice) return { promptTokens, cachedTokens: 0 };
    let content = this.contentOf(choice.slot);
    if (choice.updateCache && this.ramCache) {
      content = this.ramCache.bestFor(content, this.tokenizer.count(content), prompt, promptTokens, false)?.content ?? content;
    }
    return { promptTokens, cachedTokens: Math.min(commonPrefixTokens(content, prompt, this.cpt), promptTokens - 1) };
  }

  /** Bring the simulation up to the present (reads call this so they see current state). */
  sync(): void {
    if (this.busy) return;
    this.busy = true;
    try {
      this.simulateUntil(this.modelNow());
    } finally {
      this.busy = false;
    }
    this.armTimer();
  }

  /** End every sequence, empty the slots and the RAM cache, forget what was computed, zero the counters. */
  reset(): void {
    this.sync();
    const all = [...this.running, ...this.launched, ...this.waiting];
    for (const seq of all) seq.endRequested = "reset";
    this.busy = true;
    try {
      this.drainEnds(all);
    } finally {
      this.busy = false;
    }
    for (const slot of this.slotList) {
      slot.content = "";
      slot.lastUsed = -1;
    }
    this.ramCache?.clear();
    this.computed.clear();
    this.releases = 0;
    this.droppedTokens = 0;
    this.windowEnd = this.stepEnd = -Infinity;
    this.stats = zeroStats();
    this.finished.stop = this.finished.length = this.finished.abort = 0;
    this.ttft.reset();
    this.armTimer();
  }

  dropCache(): void {
    this.sync();
    for (const slot of this.slotList) {
      slot.content = "";
      slot.lastUsed = -1;
    }
    this.ramCache?.clear();
    this.armTimer();
  }

  /** Stop the timer (the server is going away); running sequences end as "reset". */
  close(): void {
    this.reset();
    this.timer.clear();
  }

  /** Observe every submitted sequence. Returns an unsubscribe. */
  onSubmit(listener: (seq: SlotSequence) => void): () => void {
    this.submitListeners.add(listener);
    return () => this.submitListeners.delete(listener);
  }

  /** Observe every sequence's end. Returns an unsubscribe. */
  onSequenceEnd(listener: (seq: SlotSequence, result: SequenceResult) => void): () => void {
    this.endListeners.add(listener);
    return () => this.endListeners.delete(listener);
  }

  /** Sequences in the scheduler, for introspection. */
  sequences(): { running: readonly SlotSequence[]; waiting: readonly SlotSequence[] } {
    return { running: this.launched.length === 0 ? this.running : [...this.running, ...this.launched], waiting: this.waiting };
  }

  // --- the simulation -------------------------------------------------------------------

  private modelNow(): number {
    return this.clock.now() / 1000 / this.options.timeScale;
  }

  /** The fluid model's events, with a step boundary wherever a request waits for one. */
  private simulateUntil(target: number): void {
    this.drainEnds();
    this.admit();
    for (;;) {
      const boundary = this.stepEnd;
      if (!(boundary > this.modelTime && boundary <= target + SAME_INSTANT_S)) break;
      runFluidUntil(boundary, this.fluid, this.options);
      this.drainEnds();
      this.admit();
    }
    runFluidUntil(target, this.fluid, this.options);
  }

  private armTimer(): void {
    const next: FluidEvent = nextFluidEvent(this.running, this.modelTime, this.options);
    const pending = this.waiting.length > 0 || this.launched.length > 0;
    const boundary = pending && this.stepEnd > this.modelTime ? this.stepEnd : Infinity;
    this.timer.arm(boundary < next.at ? { at: boundary, prefill: true } : next, this.modelNow());
  }

  /**
   * Give waiting requests slots, oldest first (server-context.cpp process_single_task: a
   * task that finds no slot is deferred; a released slot brings back the oldest), between
   * decode steps only (server-queue.cpp start_loop: process_new_tasks, then update_slots).
   * The prompts start together when the pass's RAM-cache copies are done.
   */
  private admit(): void {
    const now = this.modelTime;
    const inWindow = now <= this.windowEnd + SAME_INSTANT_S;
    if (!inWindow && now < this.stepEnd - SAME_INSTANT_S) return;
    if (!inWindow) this.windowEnd = now;
    while (this.waiting.length > 0) {
      const seq = this.waiting[0]!;
      const slot = this.availableSlot(seq);
      if (!slot) break;
      this.waiting.shift();
      // launch_slot_with_task: the slot is busy from here on.
      slot.seq = seq;
      seq.slot = slot;
      this.launched.push(seq);
      this.cacheIdleSlots();
    }
    if (now < this.windowEnd - SAME_INSTANT_S) {
      this.stepEnd = this.windowEnd;
      return;
    }
    for (const seq of this.launched.splice(0)) this.startPrompt(seq.slot!, seq);
    this.stepEnd = this.running.length > 0 ? now + this.stepSeconds() : now;
  }

  /** A save to or restore from the RAM cache: the main loop copies `tokens` of state before the next step. */
  private copy(tokens: number): void {
    const seconds = (tokens * this.options.cacheRamBytesPerToken) / (this.options.cacheRamGbps * 1e9);
    this.windowEnd = Math.max(this.windowEnd, this.modelTime) + seconds;
  }

  /**
   * How long the step starting now takes: its prompt tokens (up to batchSize, across slots)
   * at the prefill rate, or, when no prompt is pending, until the next generated token.
   */
  private stepSeconds(): number {
    let prompt = 0;
    for (const seq of this.running) if (seq.state === "prefill") prompt += Math.max(0, seq.prefillWork - seq.prefillDone);
    if (prompt > 0) return Math.min(this.options.batchSize, prompt) / this.options.prefillTps;
    const next = nextFluidEvent(this.running, this.modelTime, this.options).at - this.modelTime;
    return Number.isFinite(next) ? next : 0;
  }

  /**
   * server-context.cpp get_available_slot, on the idle slots `candidates`: the best prompt
   * similarity above the threshold, else the least recently used. `updateCache`: whether the
   * RAM cache is consulted (LRU choice, or a similar slot that keeps under half its tokens).
   */
  private chooseSlot(prompt: string, promptTokens: number, candidates: readonly Slot[]): { slot: Slot; updateCache: boolean } | undefined {
    const threshold = Math.fround(this.options.slotPromptSimilarity);
    if (threshold !== 0) {
      let best: Slot | undefined;
      let fSimBest = 0;
      for (const slot of candidates) {
        const content = this.contentOf(slot);
        // "skip the slot if it does not contains cached tokens".
        if (content.length === 0) continue;
        const fSim = Math.fround(commonPrefixTokens(content, prompt, this.cpt) / promptTokens);
        if (fSim > fSimBest && fSim > threshold) {
          fSimBest = fSim;
          best = slot;
        }
      }
      if (best) {
        // "if we are about to lose a large portion of the existing context - save it in the prompt cache".
        const fKeep = Math.fround((fSimBest * promptTokens) / this.tokenizer.count(this.contentOf(best)));
        return { slot: best, updateCache: fKeep < 0.5 };
      }
    }
    // "find the slot that has been least recently used": ties go to the later slot (<=).
    let lru: Slot | undefined;
    for (const slot of candidates) if (!lru || slot.lastUsed <= lru.lastUsed) lru = slot;
    return lru ? { slot: lru, updateCache: true } : undefined;
  }

  /** get_available_slot with its side effects: save the chosen slot to RAM and restore a better prompt into it. */
  private availableSlot(seq: SlotSequence): Slot | undefined {
    const choice = this.chooseSlot(
      seq.prompt,
      seq.promptTokens,
      this.slotList.filter((s) => !s.seq),
    );
    if (!choice) return undefined;
    const { slot } = choice;
    if (choice.updateCache && this.ramCache) {
      const tokens = this.tokenizer.count(slot.content);
      if (this.ramCache.save(slot.content, tokens)) this.copy(tokens);
      const entry = this.ramCache.bestFor(slot.content, tokens, seq.prompt, seq.promptTokens, true);
      if (entry) {
        this.copy(entry.tokens);
        this.droppedTokens += tokens;
        slot.content = entry.content;
      }
      this.ramCache.update();
    }
    return slot;
  }

  /**
   * --cache-idle-slots (server-context.cpp process_single_task, after launch_slot_with_task):
   * every idle slot is saved to the RAM cache; with a unified KV it is then cleared.
   */
  private cacheIdleSlots(): void {
    const cache = this.ramCache;
    if (!this.options.cacheIdleSlots || !cache) return;
    for (const slot of this.slotList) {
      if (slot.seq) continue;
      const tokens = this.tokenizer.count(slot.content);
      if (cache.save(slot.content, tokens)) {
        this.copy(tokens);
        cache.update();
      }
      if (this.options.kvUnified) this.clearSlot(slot);
    }
  }

  /** server-context.cpp pre_decode, SLOT_STATE_STARTED: reuse the common prefix (n_past), compute the rest. */
  private startPrompt(slot: Slot, seq: SlotSequence): void {
    const n = seq.promptTokens;
    const cachePrompt = this.options.prefixCache && seq.cachePrompt !== false;
    // "reuse any previously computed tokens that are common with the new prompt"; without cache_prompt, none.
    let nPast = cachePrompt ? commonPrefixTokens(slot.content, seq.prompt, this.cpt) : 0;
    // [TAG_PROMPT_LOGITS] "need to evaluate at least 1 token for each active slot".
    if (nPast === n && nPast > 0) nPast--;
    const stop: { stop: PrefixStop; held: number; computed?: number } = cachePrompt && nPast < n - 1 ? this.stopReason(slot, seq.prompt, nPast, n) : { stop: "full", held: nPast };
    seq.prefixStop = stop.stop;
    seq.heldTokens = stop.held;
    seq.computedTokens = stop.computed ?? 0;
    // slot.prompt.tokens.keep_first(n_past): the rest of the slot's old KV is dropped.
    this.droppedTokens += Math.max(0, this.tokenizer.count(slot.content) - nPast);
    slot.content = seq.prompt.slice(0, nPast * this.cpt);
    seq.base = nPast;
    seq.cachedTokens = nPast;
    seq.prefillWork = n - nPast + this.options.cachedTokenCost * nPast;
    seq.prefillDone = 0;
    seq.state = "prefill";
    seq.admissions++;
    this.running.push(seq);
    this.stats.prefix_cache_queries_total += n;
    this.stats.prefix_cache_hits_total += nPast;
    this.stats.cached_tokens_total += nPast;
    this.stats[`stop_${seq.prefixStop}_total`]++;
    seq.listener.onAdmit?.(seq);
    if (this.options.kvUnified) this.ensureRoom();
  }

  /**
   * Why the hit of `nPast` tokens stopped (engine-api.ts PrefixStop; `elsewhere` is this
   * engine's), and how far the prompt's prefix was held here (SimSequence.heldTokens): the
   * longest match in another slot or the RAM cache, or the longest prefix computed here.
   */
  private stopReason(own: Slot, prompt: string, nPast: number, promptTokens: number): { stop: PrefixStop; held: number; computed?: number } {
    const need = nPast + 1;
    let elsewhere = 0;
    for (const slot of this.slotList) if (slot !== own) elsewhere = Math.max(elsewhere, commonPrefixTokens(this.contentOf(slot), prompt, this.cpt));
    for (const entry of this.ramCache?.entries ?? []) elsewhere = Math.max(elsewhere, commonPrefixTokens(entry.content, prompt, this.cpt));
    if (elsewhere >= need) {
      const held = Math.min(promptTokens, elsewhere);
      // Held in part elsewhere; computed here further than that, its tail was dropped since: a
      // slot another request took by similarity keeps only their common prefix
      // (server-context.cpp get_available_slot, then pre_decode's keep_first(n_past)), and one
      // taken by LRU is saved to the RAM cache, which evicts too (server-task.cpp
      // server_prompt_cache::update).
      const computed = held < promptTokens ? this.computedUpTo(prompt, held + 1, promptTokens) : 0;
      return { stop: "elsewhere", held, ...(computed > held ? { computed } : {}) };
    }
    if (!this.computed.has(prompt, need * this.cpt)) return { stop: "new", held: nPast };
    return { stop: "evicted", held: this.computedUpTo(prompt, need, promptTokens) };
  }

  /**
   * The longest prefix of `prompt` computed here, in tokens, if at least `from` was (else
   * `from` − 1): every prefix of a computed prefix was computed, so by bisection.
   */
  private computedUpTo(prompt: string, from: number, promptTokens: number): number {
    if (!this.computed.has(prompt, from * this.cpt)) return from - 1;
    let lo = from;
    let hi = promptTokens;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (this.computed.has(prompt, mid * this.cpt)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /**
   * A unified KV holds every slot's tokens in one n_ctx pool. When it overflows, idle slots
   * are cleared one at a time (server-context.cpp try_clear_idle_slots); if that is not
   * enough, every running request fails with "Context size has been exceeded." and its slot
   * is cleared (server-context.cpp decode). The sim checks when a prompt starts (its whole
   * prompt counted at once) and at every decode token.
   */
  private ensureRoom(): void {
    const held = () => this.slotList.reduce((sum, s) => sum + (s.seq ? this.liveTokens(s.seq) : this.tokenizer.count(s.content)), 0);
    while (held() > this.totalContext) {
      const idle = this.slotList.find((s) => !s.seq && s.content.length > 0);
      if (!idle) break;
      this.clearSlot(idle);
    }
    if (held() <= this.totalContext) return;
    for (const seq of this.running) {
      if (!seq.endRequested) {
        seq.endRequested = "overflow";
        this.pendingEnds.push(seq);
      }
      seq.clearOnEnd = true;
    }
  }

  /** Tokens a running sequence's slot will hold once its prompt is in (its prompt is counted whole). */
  private liveTokens(seq: SlotSequence): number {
    return seq.promptTokens + Math.max(0, seq.generated - 1);
  }

  private clearSlot(slot: Slot): void {
    this.droppedTokens += this.tokenizer.count(slot.content);
    slot.content = "";
  }

  /** The text whose KV a slot holds now: a running request's computed part, or what the last one left. */
  private contentOf(slot: Slot): string {
    const seq = slot.seq;
    // A slot just given a request still holds its old tokens until the prompt starts.
    if (!seq || seq.state === "waiting") return slot.content;
    if (seq.state === "prefill") return seq.prompt.slice(0, this.prefillComputed(seq) * this.cpt);
    // The last sampled token is never decoded, so its KV is not in the slot (server_slot::handle_last_sampled_token).
    return seq.prompt + seq.genText.slice(0, Math.max(0, seq.generated - 1) * this.cpt);
  }

  /** Tokens whose KV a prefilling sequence has computed so far. */
  private prefillComputed(seq: SlotSequence): number {
    if (seq.state !== "prefill") return seq.base;
    const fraction = seq.prefillWork === 0 ? 1 : Math.min(1, seq.prefillDone / seq.prefillWork);
    return seq.base + Math.floor((seq.promptTokens - seq.base) * fraction + 1e-6);
  }

  private processEvents(): void {
    for (const seq of [...this.running]) {
      if (seq.state === "done" || !this.running.includes(seq)) continue;
      if (seq.state === "prefill" && seq.prefillWork - seq.prefillDone <= EPS * Math.max(1, seq.prefillWork)) {
        seq.state = "decode";
        seq.decodeFrac = 0;
        this.emit(seq);
      } else if (seq.state === "decode" && seq.decodeFrac >= 1 - EPS) {
        seq.decodeFrac = Math.max(0, seq.decodeFrac - 1);
        this.emit(seq);
        if (this.options.kvUnified) this.ensureRoom();
      }
    }
  }

  private emit(seq: SlotSequence): void {
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
    if (!seq.endRequested) {
      if (seq.generated >= seq.maxTokens) seq.endRequested = seq.finishReason;
      // "stopped due to running out of context capacity" (server-context.cpp process_token, no context shift).
      else if (seq.promptTokens + seq.generated >= seq.slot!.nCtx) seq.endRequested = "length";
    }
    if (seq.endRequested) this.pendingEnds.push(seq);
  }

  /** End the sequences asked to end and release their slots (server_slot::release). */
  private drainEnds(extra: SlotSequence[] = []): void {
    const ends = [...this.pendingEnds, ...extra];
    this.pendingEnds = [];
    for (const seq of ends) {
      if (seq.state === "done") continue;
      const reason = seq.endRequested ?? "reset";
      const slot = seq.slot;
      if (slot) {
        const content = this.contentOf(slot);
        this.computed.add(content);
        slot.content = content;
        slot.seq = undefined;
        slot.lastUsed = ++this.releases;
        if (seq.clearOnEnd) this.clearSlot(slot);
      }
      this.running = this.running.filter((s) => s !== seq);
      this.launched = this.launched.filter((s) => s !== seq);
      this.waiting = this.waiting.filter((s) => s !== seq);
      seq.state = "done";
      if (reason === "stop" || reason === "length") {
        this.stats.completed_total++;
        this.finished[reason]++;
      } else if (reason === "cancelled" || reason === "fault" || reason === "overflow") {
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
}
