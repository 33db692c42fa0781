/**
 * llama.cpp's host-RAM prompt cache (tools/server/server-task.cpp, server_prompt_cache, at
 * the commit slots.ts names): slots' prompts saved to host memory when a slot is taken, and
 * moved back into a slot when a request matches them better than the slot's own tokens.
 * The slot engine (slots.ts) decides when to save and restore (server-context.cpp); this
 * file holds the cache's own rules: what it keeps, which entry a prompt takes, what it evicts.
 */
import { commonPrefixTokens } from "./tokenizer.ts";

/** The RAM prompt cache, for /props, /slots and /sim/state. */
export interface PromptCacheView {
  enabled: boolean;
  /** --cache-ram in MiB (-1 = no byte limit). */
  limit_mib: number;
  /** The token limit (n_ctx; raised to what the byte limit holds, server_prompt_cache::update). */
  limit_tokens: number;
  bytes_per_token: number;
  entries: number;
  tokens: number;
  bytes: number;
  /** Tokens of each entry, oldest (evicted first) first. */
  entry_tokens: number[];
  saves_total: number;
  restores_total: number;
  restored_tokens_total: number;
  evictions_total: number;
}

/** A saved slot: its text and how many tokens it holds. */
export interface PromptCacheEntry {
  content: string;
  tokens: number;
}

/**
 * The host-RAM prompt cache (tools/server/server-task.cpp, server_prompt_cache). Entries in
 * insertion order: the front is evicted first.
 */
export class PromptCache {
  readonly limitBytes: number;
  readonly limitTokens: number;
  readonly bytesPerToken: number;
  private readonly cpt: number;
  entries: PromptCacheEntry[] = [];
  saves = 0;
  restores = 0;
  restoredTokens = 0;
  evictions = 0;

  constructor(limitMib: number, nCtx: number, bytesPerToken: number, charsPerToken: number) {
    // server_prompt_cache::server_prompt_cache: MiB → bytes, -1 → 0 = no byte limit; the token limit is n_ctx.
    this.limitBytes = 1024 * 1024 * Math.max(0, limitMib);
    this.limitTokens = nCtx;
    this.bytesPerToken = bytesPerToken;
    this.cpt = charsPerToken;
  }

  get tokens(): number {
    let n = 0;
    for (const e of this.entries) n += e.tokens;
    return n;
  }

  /** llama_state_seq_get_size: the saved state grows with the slot's tokens. */
  get bytes(): number {
    return this.tokens * this.bytesPerToken;
  }

  /** The token limit update() enforces: n_ctx, raised to what the byte limit holds. */
  get effectiveTokenLimit(): number {
    // server_prompt_cache::update: size_per_token = max(1, size / n_tokens), and
    // limit_tokens_cur = max(limit_tokens, limit_size / size_per_token) when there is a byte limit.
    return this.limitBytes > 0 ? Math.max(this.limitTokens, Math.floor(this.limitBytes / Math.max(1, this.bytesPerToken))) : this.limitTokens;
  }

  /** server_prompt_cache::alloc (via server_slot::prompt_save). Returns whether it saved. */
  save(content: string, tokens: number): boolean {
    // server_slot::prompt_save: an empty slot saves nothing.
    if (tokens === 0) return false;
    // "prompt is already in the cache, skipping": an entry that starts with all of it.
    for (const e of this.entries) if (commonPrefixTokens(e.content, content, this.cpt) === tokens) return false;
    const size = tokens * this.bytesPerToken;
    // "prompt state size exceeds cache size limit, skipping".
    if (this.limitBytes > 0 && size > this.limitBytes) return false;
    // "removing obsolete cached prompt": entries wholly contained in this one.
    this.entries = this.entries.filter((e) => commonPrefixTokens(e.content, content, this.cpt) !== e.tokens);
    // "making room for prompt cache entry, removing oldest entry".
    while (this.entries.length > 0 && this.limitBytes > 0 && this.bytes + size > this.limitBytes) this.evictOldest();
    this.entries.push({ content, tokens });
    this.saves++;
    return true;
  }

  /**
   * server_prompt_cache::load: the entry that beats the slot's own tokens on both kept
   * fraction (f_keep, of the entry) and similarity (f_sim, of the prompt), skipping entries
   * that would keep under a quarter ("don't trash large prompts"). The chosen entry leaves
   * the cache (its data moves into the slot). Touches nothing when `take` is false.
   */
  bestFor(slotContent: string, slotTokens: number, prompt: string, promptTokens: number, take: boolean): PromptCacheEntry | undefined {
    const lcpSlot = commonPrefixTokens(slotContent, prompt, this.cpt);
    let fKeepBest = slotTokens > 0 ? Math.fround(lcpSlot / slotTokens) : -1;
    let fSimBest = Math.fround(lcpSlot / promptTokens);
    let best = -1;
    this.entries.forEach((e, i) => {
      const lcp = commonPrefixTokens(e.content, prompt, this.cpt);
      const fKeep = Math.fround(lcp / e.tokens);
      const fSim = Math.fround(lcp / promptTokens);
      if (fKeep < 0.25) return;
      if (fKeepBest < fKeep && fSimBest < fSim) {
        fKeepBest = fKeep;
        fSimBest = fSim;
        best = i;
      }
    });
    if (best < 0) return undefined;
    const entry = this.entries[best]!;
    if (take) {
      this.entries.splice(best, 1);
      this.restores++;
      this.restoredTokens += entry.tokens;
    }
    return entry;
  }

  /** server_prompt_cache::update: the byte limit, then the (raised) token limit, oldest first. */
  update(): void {
    while (this.entries.length > 0 && this.limitBytes > 0 && this.bytes > this.limitBytes) this.evictOldest();
    const limit = this.effectiveTokenLimit;
    if (this.limitTokens > 0) while (this.entries.length > 0 && this.tokens > limit) this.evictOldest();
  }

  clear(): void {
    this.entries = [];
    this.saves = this.restores = this.restoredTokens = this.evictions = 0;
  }

  private evictOldest(): void {
    this.entries.shift();
    this.evictions++;
  }
}
