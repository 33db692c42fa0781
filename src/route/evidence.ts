/**
 * What the engines' reports prove, per replica: each delivered `cached_tokens` (or a window of
 * the engine's own cache counters) judged against what the routing decision expected — a hit,
 * an eviction (the index is corrected), or a chat template that re-rendered earlier turns
 * (./template-breaks.ts, learnt here and predicted by the router) — and the bounds those verdicts put
 * on a card's KV, whatever kv_tokens said. Pure: the router's index and the time come in.
 * The reader's account: docs/routing.md#how-the-index-is-corrected-verdicts and the sections
 * after it.
 */
import type { PrefixIndex } from "./prefix.ts";
import type { RouteEstimate } from "./router.ts";
import { explainBreak, learnedBreak, predictedEnd, type BreakPoints, type TemplateEvidence } from "./template-breaks.ts";

/**
 * How the engine's report compared with the index's expectation. `template`: short of a
 * settled prediction where nothing could have been evicted (the card had room for all it was
 * sent since): the engine's chat template rendered the earlier turns differently this time
 * (Mistral 3's tools before the last user message, Qwen3's reasoning of earlier turns), so
 * the continuation stopped being a token prefix — the index is not corrected for it.
 */
export type CacheVerdict = "hit" | "miss" | "template" | "unexpected_hit" | "cold" | "unsettled";

/** Per replica, what the engine's reports have shown: predicted vs delivered, the verdicts, and whether they are trusted. */
export interface ReplicaEvidence {
  predictedTokens: number;
  deliveredTokens: number;
  hits: number;
  misses: number;
  unexpectedHits: number;
  /** Shortfalls read as template breaks, not evictions. */
  templates: number;
  /** Where those shortfalls ended, by the kind of break that explains them (see ./template-breaks.ts). */
  template: TemplateEvidence;
  /** Entries dropped because the engine had evicted them. */
  corrected: number;
  /** What the engine's reports say of its KV (see CapacityEvidence). */
  capacity: CapacityEvidence;
  /** Tokens the index predicted cached on requests whose engine reported nothing, since the last window was read. */
  windowPredictedTokens: number;
  /**
   * What the last window left to the next (see `windowFeedback`): a short window's prediction
   * and hits, judged with the next one; or hits beyond its prediction, whose requests the
   * router saw end only after the read.
   */
  windowCarry: { predicted: number; hits: number };
  /** The engine has delivered a real hit at least once. */
  reported: boolean;
  /** Misses no eviction explains (the card had room): what an engine whose cache is off shows. */
  unexplained: number;
  /** The engine never delivered a predicted hit: its reports are not acted on (its cache may be off). */
  distrusted: boolean;
}

/**
 * What the engine's reports prove about a card's KV, in tokens: a hit on a prefix after
 * `lower` tokens of other prefixes proves it holds at least that much; an eviction after
 * `upper` proves it holds less. An LRU cache keeps a prefix exactly while what was used
 * since fits, so these bound its capacity whatever kv_tokens or the engine said.
 */
export interface CapacityEvidence {
  lowerTokens?: number;
  upperTokens?: number;
  /** When the upper bound was last confirmed (ms): it relaxes with time without new evictions. */
  upperAt?: number;
}

/** A prediction is judged only when it is worth this many tokens (block rounding, template overhead). */
const JUDGE_TOKENS = 256;
/**
 * Share of a card's believed KV that must have been used since a prefix's last use before a
 * shortfall can be an eviction. Below it the card had room: an LRU engine evicted nothing.
 * (Not 1: decode tokens, running sequences and chars-per-token error are not in the count.)
 */
const PRESSURE = 0.6;
/** An upper bound grows by this share per capacity window without a new eviction to confirm it. */
export const UPPER_RELAX = 0.1;
/** Misses without a single hit before the engine's reports stop being acted on. */
const DISTRUST_AFTER = 8;

/**
 * The evidence of every replica, kept beside the router's index: a miss that proves an
 * eviction drops what the replica used up to then from the index, and calls `evicted` so the
 * router can tell its sink.
 */
export class EngineEvidence {
  private readonly replicas = new Map<string, ReplicaEvidence>();

  constructor(
    private readonly index: PrefixIndex,
    private readonly evicted: (replica: string, usedBy: number) => void,
  ) {}

  /**
   * The hit a continuation will really deliver on `replica`, in characters: what matched, or
   * less where this replica's chat template has been seen to end the cache (`breaks`).
   */
  expectedChars(replica: string, matchedChars: number, breaks: BreakPoints | undefined): number {
    const rule = breaks ? learnedBreak(this.of(replica).template) : undefined;
    return breaks && rule ? Math.min(matchedChars, predictedEnd(breaks, rule.kind, rule.toolsLate)) : matchedChars;
  }

  /**
   * What the engine delivered (usage's cached tokens) against what the decision expected,
   * for the request committed at `committedAt`. Within block rounding: a hit, and proof the
   * card held everything used since the prefix's last use. Short of a settled prediction:
   * an eviction only if the card could have run out of room — what was used there since the
   * prefix's last use (its LRU reuse distance) fills most of the KV believed, or, on an
   * engine with one prompt per slot, at least as many other conversations as it has slots.
   * Then an LRU cache evicted everything used before it too: those entries are dropped, and
   * the distance bounds the card's capacity from above. Otherwise nothing could have been
   * evicted: the engine's template rendered the earlier turns differently (a `template`
   * verdict); the index is right about what was sent and is left alone. More than predicted:
   * a hit the index did not know (the chain is recorded by the commit already), and proof the
   * card holds more. An engine that never delivers a predicted hit is not believed, so a
   * cache that is off (or an engine that reports zeros) cannot empty the index.
   * `cachedTokens` undefined: the engine said nothing (the prediction joins the window the
   * engine's counters are compared with, see `windowFeedback`).
   */
  feedback(replica: string, estimate: RouteEstimate, cachedTokens: number | undefined, committedAt: number = Date.now()): CacheVerdict | undefined {
    const evidence = this.of(replica);
    const predicted = estimate.capturedChars / estimate.charsPerToken;
    if (cachedTokens === undefined || !(cachedTokens >= 0)) {
      if (estimate.settled) evidence.windowPredictedTokens += predicted;
      return undefined;
    }
    evidence.predictedTokens += predicted;
    evidence.deliveredTokens += cachedTokens;
    // Block rounding: vLLM caches whole blocks and recomputes the last token, hybrid models use
    // blocks of hundreds of tokens; a shortfall within one block is no news.
    const margin = Math.max(JUDGE_TOKENS, estimate.blockTokens + 32);
    if (cachedTokens > predicted + Math.max(margin, predicted / 2)) {
      evidence.unexpectedHits++;
      return "unexpected_hit";
    }
    if (predicted < margin) return "cold";
    if (!estimate.settled) return "unsettled";
    // The engine caches: it has delivered a real hit (the index may still over-believe).
    if (cachedTokens >= margin) {
      evidence.reported = true;
      evidence.distrusted = false;
    }
    const cpt = estimate.charsPerToken;
    const budgetTokens = estimate.budgetChars / cpt;
    // Only distances up to twice the KV believed can say anything new.
    const since = this.index.distance(replica, estimate.matchedAt, committedAt, Number.isFinite(estimate.budgetChars) ? 2 * estimate.budgetChars : 64 * estimate.capturedChars);
    const sinceTokens = since.chars / cpt;
    // Delivered all but block rounding and template tokens: as predicted.
    if (predicted - cachedTokens < margin || cachedTokens >= predicted * 0.9) {
      evidence.hits++;
      if (!since.capped) this.proveAtLeast(evidence, sinceTokens + predicted);
      return "hit";
    }
    const eviction = this.evictionPlausible(evidence, predicted, sinceTokens, since, budgetTokens, estimate.slots);
    // Only a prompt carrying earlier turns can be rendered differently by a chat template; a
    // one-shot's prefix that fell short without pressure was evicted all the same (or its
    // engine restarted unseen): the KV believed is more than the card has.
    if (eviction !== "likely" && estimate.continuation) {
      // Where this template ends the cache, learnt to predict the next such turn's real hit.
      const kind = estimate.breaks && explainBreak(estimate.breaks, cachedTokens * cpt, Math.max(margin * cpt, 0.05 * cachedTokens * cpt));
      // On a card whose KV is unknown an eviction is only possible; a shortfall that ends just
      // where the template would end it is the template (an LRU eviction cuts a prefix at no
      // such place); read as an eviction, it would drop entries the card still holds.
      if (eviction === "no" || kind) {
        evidence.templates++;
        if (kind) evidence.template.counts[kind] = (evidence.template.counts[kind] ?? 0) + 1;
        return "template";
      }
    }
    const pressure = eviction !== "no";
    // Short, wholly or in part: the engine evicted the prefix's tail, last used at matchedAt.
    evidence.misses++;
    // A cache that is off looks like misses where nothing could have been evicted; misses on a
    // thrashing card (more conversations than slots, a full KV) say nothing about that.
    if (!pressure) evidence.unexplained++;
    if (!evidence.reported && evidence.unexplained >= DISTRUST_AFTER) evidence.distrusted = true;
    if (!evidence.distrusted) {
      // What survived plus everything used since fit; the whole prefix did not. (An engine
      // that never delivered a hit says nothing about its KV — unless it keeps one prompt
      // per slot and more conversations than slots came between: that is its wall.)
      if (!since.capped && (evidence.reported || (estimate.slots !== undefined && pressure))) {
        this.proveAtLeast(evidence, sinceTokens + cachedTokens);
        this.proveBelow(evidence, sinceTokens + predicted, committedAt);
      }
      const dropped = this.index.forgetUsedBy(replica, estimate.matchedAt);
      evidence.corrected += dropped;
      if (dropped > 0) this.evicted(replica, estimate.matchedAt);
    }
    return "miss";
  }

  /**
   * Could the card have evicted the prefix? `likely` if what it was sent since the prefix's
   * last use (plus the prefix) fills most of its KV; `possible` if its KV is unknown and
   * something came after it that no hit has proven it holds beside it; on a slotted engine,
   * `no` unless at least as many other conversations came since as it has slots (each takes
   * the least recently used one).
   */
  private evictionPlausible(
    evidence: ReplicaEvidence,
    predicted: number,
    sinceTokens: number,
    since: { tips: number; capped: boolean },
    budgetTokens: number,
    slots: number | undefined,
  ): "likely" | "possible" | "no" {
    if (since.capped) return "likely";
    if (slots !== undefined && since.tips < slots) return "no";
    const need = sinceTokens + predicted;
    if (Number.isFinite(budgetTokens)) return need >= PRESSURE * budgetTokens ? "likely" : "no";
    // Unknown KV: an LRU cache evicts a prefix only for what came after it (and not what a hit
    // has already shown it holds).
    return sinceTokens > 0 && !(evidence.capacity.lowerTokens !== undefined && evidence.capacity.lowerTokens >= need) ? "possible" : "no";
  }

  private proveAtLeast(evidence: ReplicaEvidence, tokens: number): void {
    const c = evidence.capacity;
    if (!(tokens > (c.lowerTokens ?? 0))) return;
    c.lowerTokens = Math.round(tokens);
    // A card that held this much is not smaller: an older, lower upper bound was noise.
    if (c.upperTokens !== undefined && c.upperTokens < c.lowerTokens) {
      delete c.upperTokens;
      delete c.upperAt;
    }
  }

  private proveBelow(evidence: ReplicaEvidence, tokens: number, at: number): void {
    const c = evidence.capacity;
    if (c.lowerTokens !== undefined && tokens <= c.lowerTokens) return;
    if (c.upperTokens === undefined || tokens < c.upperTokens) c.upperTokens = Math.round(tokens);
    c.upperAt = at;
  }

  /**
   * The engine's own cache counters over a window (hits and queries since the last read),
   * for a replica whose responses carry no cached tokens: compared with what the index
   * predicted cached for the requests answered in the window. Returns the window's verdict
   * (undefined: too little predicted to judge, or judged with the next window). A window far
   * short of the prediction on a card the index believes full bounds its capacity by what
   * the index holds there.
   *
   * A prediction joins the window when the router sees its request end; the engine counts the
   * hit when it counts it — vLLM when it schedules the prefill (its prefix_cache counters move
   * with each step's scheduler stats), SGLang when the request finishes, just before or just
   * after its last chunk leaves (tokenizer_manager.py). So a read can fall between a hit and
   * its prediction either way: a short window is not a miss until the next one is short too,
   * with both counted together, and hits beyond a window's prediction meet theirs in the next.
   */
  windowFeedback(replica: string, hits: number, heldTokens: number, budgetTokens: number, now: number): "hit" | "miss" | undefined {
    const evidence = this.of(replica);
    const carry = evidence.windowCarry;
    const predicted = carry.predicted + evidence.windowPredictedTokens;
    const found = carry.hits + hits;
    evidence.windowPredictedTokens = 0;
    evidence.windowCarry = { predicted: 0, hits: 0 };
    if (predicted < JUDGE_TOKENS) {
      evidence.windowCarry.hits = hits;
      return undefined;
    }
    if (found < predicted * 0.8 && carry.predicted === 0) {
      evidence.windowCarry = { predicted, hits: found };
      return undefined;
    }
    evidence.predictedTokens += predicted;
    evidence.deliveredTokens += Math.min(found, predicted);
    if (found >= predicted * 0.8) {
      evidence.hits++;
      evidence.reported = true;
      evidence.distrusted = false;
      this.proveAtLeast(evidence, Math.min(heldTokens, found));
      evidence.windowCarry.hits = Math.max(0, Math.min(hits, found - predicted));
      return "hit";
    }
    evidence.misses++;
    const pressure = !Number.isFinite(budgetTokens) || heldTokens >= PRESSURE * budgetTokens;
    if (!pressure) evidence.unexplained++;
    if (!evidence.reported && evidence.unexplained >= DISTRUST_AFTER) evidence.distrusted = true;
    if (!evidence.distrusted && pressure && evidence.reported) this.proveBelow(evidence, heldTokens, now);
    return "miss";
  }

  /** The KV this replica is believed to hold, in tokens: the starting belief bounded by the evidence. */
  believedKvTokens(replica: string, starting: number | undefined, now: number, windowMs: number): number | undefined {
    const c = this.of(replica).capacity;
    let upper = c.upperTokens;
    if (upper !== undefined && c.upperAt !== undefined && windowMs > 0) {
      // Evictions seen long ago under other traffic say less about today's card.
      upper *= 1 + UPPER_RELAX * Math.max(0, Math.floor((now - c.upperAt) / windowMs));
    }
    let belief = starting;
    if (upper !== undefined && (belief === undefined || upper < belief)) belief = upper;
    if (c.lowerTokens !== undefined && belief !== undefined && c.lowerTokens > belief) belief = c.lowerTokens;
    return belief;
  }

  /** The replica's evidence (made empty on first use). */
  of(replica: string): ReplicaEvidence {
    let t = this.replicas.get(replica);
    if (!t) {
      t = {
        predictedTokens: 0,
        deliveredTokens: 0,
        hits: 0,
        misses: 0,
        templates: 0,
        template: { counts: {} },
        unexpectedHits: 0,
        corrected: 0,
        reported: false,
        unexplained: 0,
        distrusted: false,
        capacity: {},
        windowPredictedTokens: 0,
        windowCarry: { predicted: 0, hits: 0 },
      };
      this.replicas.set(replica, t);
    }
    return t;
  }

  /** The replica restarted or left: what its reports proved is gone with its cache. */
  forget(replica: string): void {
    this.replicas.delete(replica);
  }
}
