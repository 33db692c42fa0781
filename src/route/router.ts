/**
 * The routing decision, end to end and still pure: previous_response_id stickiness, the
 * configured policy, the `max_inflight` spill every policy honours, and what the decision
 * expected of the cache. The caller passes the fleet snapshot and the clock, commits the
 * decision it acted on, and reports what the engine delivered (`feedback`), which corrects
 * the index when the engine has evicted what the index still believed held.
 */
import { chainChars, continuationLink, linkHash, type PrefixChain } from "./chain.ts";
import { hex64, type Hasher } from "./hash.ts";
import type { CacheAwareOptions } from "./options.ts";
import { bestMatch, live, type Decision, type Policy, type PolicyContext, type ReplicaView, type RouteInput } from "./policy.ts";
import type { PrefixIndex, PrefixMatch } from "./prefix.ts";
import { breakPoints, explainBreak, learnedBreak, predictedEnd, type BreakPoints, type TemplateEvidence } from "./template.ts";

export interface RouterOptions {
  policy: Policy;
  index: PrefixIndex;
  hasher: Hasher;
  maxInflight: number;
  cacheAware: CacheAwareOptions;
  /** Responses API ids remembered (LRU). */
  maxResponses?: number;
  /** Session keys remembered (LRU; each costs a fixed size, whatever the client sent). */
  maxSessions?: number;
  random?: () => number;
  /** Where this router's commit tags start (default random; see Router.commit). */
  commitSeed?: number;
}

/**
 * Where a router's learning goes besides its own index: src/cluster shares it with the
 * other router instances. Called after the local state changed, never awaited, inside the
 * request path: an implementation must not throw (the cluster counts and logs its own
 * failures, and the request goes on).
 */
export interface RouterSink {
  /**
   * `tag`: the commit's identity (see Router.commit), by which a retract names it.
   * `session`: the session key's 64-bit identity (see Router.sessionKey).
   */
  commit(chains: readonly PrefixChain[], replica: string, now: number, tag: number, continued: boolean, session?: bigint): void;
  /** The replica's cache is gone (it restarted): forget everything it held. */
  forget(replica: string): void;
  /** The engine evicted what the replica last used at or before `usedBy`. */
  forgetUsedBy(replica: string, usedBy: number): void;
  response(id: string, replica: string): void;
  /** The commit tagged `tag` is taken back: the replica never computed it (see Router.commit). */
  retract(chains: readonly PrefixChain[], replica: string, tag: number, created: readonly number[]): void;
}

/** What the fleet knows of a replica; the router adds what its index knows. */
export type FleetView = Omit<ReplicaView, "cachedChars" | "recentChars"> & {
  /** Commit time (ms) of the oldest request sent here that has not reached its first byte. */
  pendingSince?: number;
  /**
   * The engine looks a request's prefix up when it starts its prefill, first-come (vLLM): a
   * request queued behind the prefill of its prefix finds it cached.
   */
  matchedWhenScheduled?: boolean;
  /** Tokens per block the engine caches (1 = token by token): a shortfall within it is rounding. */
  blockTokens?: number;
  /**
   * The engine keeps one prompt per slot (llama.cpp): this many conversations stay in its
   * KV, and a prefix a running request holds is not shared with another slot.
   */
  slots?: number;
  /** For a slotted engine: the request whose decision was committed with tag `commit` (Router.commit) is still running there (its slot is busy). */
  busyWith?: (commit: number) => boolean;
};

/** What a decision expected of the cache, in characters of prompt; the proxy reports them. */
export interface RouteEstimate {
  totalChars: number;
  /** Cached on some replica of the pool, by the index (each sequence's deepest holder). */
  availableChars: number;
  /** Cached on the chosen replica, by the index. */
  capturedChars: number;
  /** When the chosen replica last used what matched (0 = nothing matched). */
  matchedAt: number;
  /** The match was computed before this decision (no earlier request to it is still prefilling). */
  settled: boolean;
  /** The chosen replica's characters per token, to turn the above into tokens. */
  charsPerToken: number;
  /** Prompt tokens the chosen replica must prefill (its queue grows by this much): all of them when the match is not settled, unless the engine looks it up only when it starts this request. */
  uncachedTokens: number;
  /** The chosen replica's cache granularity in tokens. */
  blockTokens: number;
  /** The chosen replica's KV as the router believes it, in characters (Infinity: unknown). */
  budgetChars: number;
  /** The chosen replica's slots, for an engine that keeps one prompt per slot. */
  slots?: number;
  /**
   * The chosen replica keeps what matched in the slot of the request whose decision was
   * committed with this tag (Router.commit), still running there, so the engine gives this
   * one another slot and prefills it again (llama.cpp): the proxy may hold it until that one
   * ends (`holdForSlot`). Only for a policy that waits for slots (Policy.waitsForSlot).
   */
  busyWith?: number;
  /** The request carries earlier turns: only such a prompt can be re-rendered differently by a chat template. */
  continuation: boolean;
  /** Where a chat template could end this continuation's cache (it adds a user turn to a prefix the replica held). */
  breaks?: BreakPoints;
}

export interface Routed extends Decision {
  estimate: RouteEstimate;
}

/**
 * How the engine's report compared with the index's expectation. `template`: short of a
 * settled prediction where nothing could have been evicted (the card had room for all it was
 * sent since): the engine's chat template rendered the earlier turns differently this time
 * (Mistral 3's tools before the last user message, Qwen3's reasoning of earlier turns), so
 * the continuation stopped being a token prefix — the index is not corrected for it.
 */
export type Verdict = "hit" | "miss" | "template" | "unexpected_hit" | "cold" | "unsettled";

/** Undo a commit's new links (see Router.commit); returns how many were removed. */
export type Retract = () => number;

/** An acted-on decision (Router.commit): called, it is taken back; `tag` is its identity. */
export type Commit = Retract & { readonly tag: number };

/** Per replica: predicted vs delivered, and whether the engine's reports are trusted. */
export interface ReplicaTruth {
  predictedTokens: number;
  deliveredTokens: number;
  hits: number;
  misses: number;
  unexpectedHits: number;
  /** Shortfalls read as template breaks, not evictions. */
  templates: number;
  /** Where those shortfalls ended, by the kind of break that explains them (see ./template.ts). */
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
/** Continuations whose gap since their previous turn is remembered (see `Router.turnHorizon`). */
const TURN_GAPS = 64;
/** Continuations seen before their gaps are trusted to say when a prompt is not coming back. */
const TURN_GAPS_TRUSTED = 8;

export class Router {
  policy: Policy;
  maxInflight: number;
  cacheAware: CacheAwareOptions;
  readonly index: PrefixIndex;
  /** Set when this router shares its state with other instances (src/cluster). */
  sink?: RouterSink;
  /** Spread counter: advanced only by decisions that consumed it. */
  counter = 0;
  private readonly responses = new Map<string, string>();
  /** Session identity (a 64-bit hash of the client's key) → the replica it last ran on. */
  private readonly sessions = new Map<bigint, string>();
  private readonly truths = new Map<string, ReplicaTruth>();
  private readonly maxResponses: number;
  private readonly maxSessions: number;
  private readonly hasher: Hasher;
  private readonly random: () => number;
  /** The last commit tag given out. */
  private tag: number;
  /** How long the latest continuations came after their conversation's previous turn (ms): a ring. */
  private readonly turnGaps = new Float64Array(TURN_GAPS);
  private turnGapsSeen = 0;
  /**
   * Requests whose turn gap is counted: one routed again (after a hold for a busy slot, or a
   * failover) came back once, not twice, and the second gap would add the wait.
   */
  private readonly gapCounted = new WeakSet<RouteInput>();

  constructor(options: RouterOptions) {
    this.policy = options.policy;
    this.index = options.index;
    this.hasher = options.hasher;
    this.maxInflight = options.maxInflight;
    this.cacheAware = options.cacheAware;
    this.maxResponses = options.maxResponses ?? 100_000;
    this.maxSessions = options.maxSessions ?? 100_000;
    this.random = options.random ?? Math.random;
    this.tag = (options.commitSeed ?? Math.floor(Math.random() * 0x1_0000_0000)) >>> 0;
  }

  /** Choose a replica among `fleet` (already narrowed to the request's model), or none. */
  route(input: RouteInput, fleet: readonly FleetView[], now: number = Date.now()): Routed | undefined {
    this.index.advance(now);
    const replicas: ReplicaView[] = fleet.map(({ pendingSince: _p, matchedWhenScheduled: _m, blockTokens: _b, slots: _s, busyWith: _w, ...r }) => ({
      ...r,
      cachedChars: this.index.workingSetChars(r.name),
      recentChars: this.index.recentChars(r.name),
    }));
    const matches = this.matchAll(input.chains, replicas);
    const totalChars = input.chains.reduce((s, c) => s + chainChars(c), 0);
    const continuation = input.shape.continuation || this.extendsServedPrompt(input, matches);
    let keepSince: number | undefined;
    let displaced: Map<string, number> | undefined;
    const estimate = (replica: string, decision: Decision): Routed => {
      const view = fleet.find((r) => r.name === replica)!;
      const m = matches.find((x) => x.replica === replica)!;
      // A prefix another request is still prefilling is not cached yet; on an engine that keeps
      // one prompt per slot, not while that request runs (its slot is busy, another slot has
      // its own KV: a burst does not share).
      const busy = m.commit !== 0 && view.busyWith?.(m.commit) === true;
      const settled = (view.pendingSince === undefined || m.lastUsed < view.pendingSince) && !busy;
      // An engine that looks it up only when this request's turn comes, after that prefill
      // (vLLM), will have it: the queue grows by what is really new. Not judged, though: two
      // requests sent at once may reach the engine the other way round.
      const cachedThen = settled || view.matchedWhenScheduled === true;
      // A continuation that adds a user turn: where this replica's template has been seen to
      // end the cache, the hit it will really deliver.
      const breaks = continuation && m.chars > 0 && input.shape.sequences.length === 1 ? breakPoints(input.shape.sequences[0]!, m.chars) : undefined;
      const rule = breaks ? learnedBreak(this.truthOf(replica).template) : undefined;
      const captured = breaks && rule ? Math.min(m.chars, predictedEnd(breaks, rule.kind, rule.toolsLate)) : m.chars;
      return {
        ...decision,
        estimate: {
          totalChars,
          availableChars: input.chains.length === 1 ? Math.max(0, ...matches.map((x) => x.chars)) : this.available(input.chains, replicas),
          capturedChars: captured,
          matchedAt: m.lastUsed,
          settled,
          charsPerToken: view.charsPerToken,
          // A prefix another request is still prefilling there is not cached yet: the engine
          // computes it again for this one, and its queue grows by all of it (not on an engine
          // that looks it up only when this one's turn comes: `cachedThen`).
          uncachedTokens: Math.max(0, totalChars - (cachedThen ? captured : 0)) / view.charsPerToken,
          blockTokens: view.blockTokens ?? 16,
          budgetChars: view.budgetChars,
          ...(view.slots ? { slots: view.slots } : {}),
          ...(busy && this.policy.waitsForSlot ? { busyWith: m.commit } : {}),
          continuation,
          ...(breaks ? { breaks } : {}),
        },
      };
    };

    const stickyId = input.shape.previousResponseId;
    const owner = stickyId ? this.responses.get(stickyId) : undefined;
    const ownerView = owner === undefined ? undefined : replicas.find((x) => x.name === owner);
    if (ownerView) {
      // The response state lives only there: never spill it, never send it elsewhere.
      return ownerView.healthy ? estimate(ownerView.name, { replica: ownerView.name, reason: "sticky" }) : undefined;
    }
    // An owner outside this model's pool cannot take the request: the engines answer it.

    const ctx: PolicyContext = {
      counter: this.counter,
      random: this.random,
      hash: (text) => hex64(this.hasher.hash(text, 0n)),
      matches: () => matches,
      sentSince: (replica, after, limitChars) => this.index.sentSince(replica, after, input.chains, limitChars),
      remembered: (replica) => input.chains.reduce((s, c) => s + this.index.matchRemembered(c, replica).chars, 0),
      displaces: (replica, chars) => {
        keepSince ??= now - this.turnHorizon();
        displaced ??= new Map();
        const key = `${replica}\n${chars}`;
        let lost = displaced.get(key);
        if (lost === undefined) displaced.set(key, (lost = this.index.displaces(replica, chars, input.chains, keepSince)));
        return lost;
      },
      totalChars,
      continuation,
      ...(input.shape.session ? { sessionReplica: this.sessions.get(this.sessionKey(input)) } : {}),
      cacheAware: this.cacheAware,
    };
    // How long this conversation took to come back: from its previous turn (its longest
    // match; a shorter one elsewhere, a system prompt another conversation just used, says
    // nothing of this one) to now.
    const previous = continuation ? bestMatch(replicas, ctx) : undefined;
    if (previous && now >= previous.match.lastUsed && !this.gapCounted.has(input)) {
      this.gapCounted.add(input);
      this.turnGaps[this.turnGapsSeen++ % TURN_GAPS] = now - previous.match.lastUsed;
    }
    const decision = this.policy.choose(input, replicas, ctx);
    if (!decision) return undefined;
    const final = this.spill(decision, replicas);
    return estimate(final.replica, final);
  }

  /**
   * Record an acted-on decision: the replica now holds this prefix. Each commit gets its own
   * tag, which the index keeps on every link it records and a retract names: neither its
   * time (two commits of one prompt can share a millisecond; a peer's commit applied after
   * local ones is moved up in time) nor anything else identifies it. Tags count up from a
   * random start, so instances sharing an index through the cluster almost never meet. The
   * tag is also what names the request while it runs (FleetView.busyWith), for the same reason.
   */
  commit(input: RouteInput, decision: Decision, now: number): Commit {
    if (decision.usedCounter) this.counter++;
    const tag = this.nextTag();
    const created = input.chains.map((chain) => this.index.record(chain, decision.replica, now, input.shape.continuation, tag));
    const session = input.shape.session ? this.sessionKey(input) : undefined;
    if (session !== undefined) remember(this.sessions, session, decision.replica, this.maxSessions);
    this.sink?.commit(input.chains, decision.replica, now, tag, input.shape.continuation, session);
    // A replica that never computed the prompt (refused, or answered an error) does not hold
    // it: left in the index, the next request there would be a "miss" that drops what the
    // replica really holds.
    const retract = () => {
      this.sink?.retract(input.chains, decision.replica, tag, created);
      return this.applyRetract(input.chains, decision.replica, tag, created);
    };
    return Object.assign(retract, { tag });
  }

  /** Take back the new links of the commit tagged `tag` (this instance's, or another's through the cluster). */
  applyRetract(chains: readonly PrefixChain[], replica: string, tag: number, created: readonly number[]): number {
    return chains.reduce((n, chain, i) => n + this.index.retract(chain, replica, created[i] ?? 0, tag), 0);
  }

  /** Another router instance committed a decision (at `now` on this instance's clock): the same record, not shared again. */
  applyCommit(chains: readonly PrefixChain[], replica: string, now: number, tag: number, continued: boolean, session?: bigint): void {
    for (const chain of chains) this.index.record(chain, replica, now, continued, tag);
    if (session !== undefined) remember(this.sessions, session, replica, this.maxSessions);
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
  feedback(replica: string, estimate: RouteEstimate, cachedTokens: number | undefined, committedAt: number = Date.now()): Verdict | undefined {
    const truth = this.truthOf(replica);
    const predicted = estimate.capturedChars / estimate.charsPerToken;
    if (cachedTokens === undefined || !(cachedTokens >= 0)) {
      if (estimate.settled) truth.windowPredictedTokens += predicted;
      return undefined;
    }
    truth.predictedTokens += predicted;
    truth.deliveredTokens += cachedTokens;
    // Block rounding: vLLM caches whole blocks and recomputes the last token, hybrid models use
    // blocks of hundreds of tokens; a shortfall within one block is no news.
    const margin = Math.max(JUDGE_TOKENS, estimate.blockTokens + 32);
    if (cachedTokens > predicted + Math.max(margin, predicted / 2)) {
      truth.unexpectedHits++;
      return "unexpected_hit";
    }
    if (predicted < margin) return "cold";
    if (!estimate.settled) return "unsettled";
    // The engine caches: it has delivered a real hit (the index may still over-believe).
    if (cachedTokens >= margin) {
      truth.reported = true;
      truth.distrusted = false;
    }
    const cpt = estimate.charsPerToken;
    const budgetTokens = estimate.budgetChars / cpt;
    // Only distances up to twice the KV believed can say anything new.
    const since = this.index.distance(replica, estimate.matchedAt, committedAt, Number.isFinite(estimate.budgetChars) ? 2 * estimate.budgetChars : 64 * estimate.capturedChars);
    const sinceTokens = since.chars / cpt;
    // Delivered all but block rounding and template tokens: as predicted.
    if (predicted - cachedTokens < margin || cachedTokens >= predicted * 0.9) {
      truth.hits++;
      if (!since.capped) this.proveAtLeast(truth, sinceTokens + predicted);
      return "hit";
    }
    const eviction = this.evictionPlausible(truth, predicted, sinceTokens, since, budgetTokens, estimate.slots);
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
        truth.templates++;
        if (kind) truth.template.counts[kind] = (truth.template.counts[kind] ?? 0) + 1;
        return "template";
      }
    }
    const pressure = eviction !== "no";
    // Short, wholly or in part: the engine evicted the prefix's tail, last used at matchedAt.
    truth.misses++;
    // A cache that is off looks like misses where nothing could have been evicted; misses on a
    // thrashing card (more conversations than slots, a full KV) say nothing about that.
    if (!pressure) truth.unexplained++;
    if (!truth.reported && truth.unexplained >= DISTRUST_AFTER) truth.distrusted = true;
    if (!truth.distrusted) {
      // What survived plus everything used since fit; the whole prefix did not. (An engine
      // that never delivered a hit says nothing about its KV — unless it keeps one prompt
      // per slot and more conversations than slots came between: that is its wall.)
      if (!since.capped && (truth.reported || (estimate.slots !== undefined && pressure))) {
        this.proveAtLeast(truth, sinceTokens + cachedTokens);
        this.proveBelow(truth, sinceTokens + predicted, committedAt);
      }
      const dropped = this.index.forgetUsedBy(replica, estimate.matchedAt);
      truth.corrected += dropped;
      if (dropped > 0) this.sink?.forgetUsedBy(replica, estimate.matchedAt);
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
    truth: ReplicaTruth,
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
    return sinceTokens > 0 && !(truth.capacity.lowerTokens !== undefined && truth.capacity.lowerTokens >= need) ? "possible" : "no";
  }

  private proveAtLeast(truth: ReplicaTruth, tokens: number): void {
    const c = truth.capacity;
    if (!(tokens > (c.lowerTokens ?? 0))) return;
    c.lowerTokens = Math.round(tokens);
    // A card that held this much is not smaller: an older, lower upper bound was noise.
    if (c.upperTokens !== undefined && c.upperTokens < c.lowerTokens) {
      delete c.upperTokens;
      delete c.upperAt;
    }
  }

  private proveBelow(truth: ReplicaTruth, tokens: number, at: number): void {
    const c = truth.capacity;
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
    const truth = this.truthOf(replica);
    const carry = truth.windowCarry;
    const predicted = carry.predicted + truth.windowPredictedTokens;
    const found = carry.hits + hits;
    truth.windowPredictedTokens = 0;
    truth.windowCarry = { predicted: 0, hits: 0 };
    if (predicted < JUDGE_TOKENS) {
      truth.windowCarry.hits = hits;
      return undefined;
    }
    if (found < predicted * 0.8 && carry.predicted === 0) {
      truth.windowCarry = { predicted, hits: found };
      return undefined;
    }
    truth.predictedTokens += predicted;
    truth.deliveredTokens += Math.min(found, predicted);
    if (found >= predicted * 0.8) {
      truth.hits++;
      truth.reported = true;
      truth.distrusted = false;
      this.proveAtLeast(truth, Math.min(heldTokens, found));
      truth.windowCarry.hits = Math.max(0, Math.min(hits, found - predicted));
      return "hit";
    }
    truth.misses++;
    const pressure = !Number.isFinite(budgetTokens) || heldTokens >= PRESSURE * budgetTokens;
    if (!pressure) truth.unexplained++;
    if (!truth.reported && truth.unexplained >= DISTRUST_AFTER) truth.distrusted = true;
    if (!truth.distrusted && pressure && truth.reported) this.proveBelow(truth, heldTokens, now);
    return "miss";
  }

  /** The KV this replica is believed to hold, in tokens: the starting belief bounded by the evidence. */
  believedKvTokens(replica: string, starting: number | undefined, now: number, windowMs: number): number | undefined {
    const c = this.truthOf(replica).capacity;
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

  truthOf(replica: string): ReplicaTruth {
    let t = this.truths.get(replica);
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
      this.truths.set(replica, t);
    }
    return t;
  }

  /** A Responses API response `id` was produced by `replica` (`share`: tell the sink). */
  rememberResponse(id: string, replica: string, share = true): void {
    remember(this.responses, id, replica, this.maxResponses);
    if (share) this.sink?.response(id, replica);
  }

  /** The replica holding a Responses API response's state, if known. */
  responseOwner(id: string): string | undefined {
    return this.responses.get(id);
  }

  /** Oldest first, for the state file. */
  savedResponses(): [string, string][] {
    return [...this.responses];
  }

  /**
   * Forget what a replica held: it restarted (its cache is gone) or left the fleet. `share`
   * tells the sink (a restart is news for every instance; a replica leaving this instance's
   * config is not, and what another instance heard from elsewhere is not shared again).
   */
  forget(replica: string, share = true): void {
    this.index.forget(replica);
    this.truths.delete(replica);
    for (const [id, owner] of this.responses) if (owner === replica) this.responses.delete(id);
    for (const [key, owner] of this.sessions) if (owner === replica) this.sessions.delete(key);
    if (share) this.sink?.forget(replica);
  }

  /**
   * The engine dropped what the requests of these commits (tags, Router.commit) held there:
   * forget the prefixes they last recorded. Not shared with other instances (the cluster
   * shares whole forgets and evictions by time); theirs learn it from the engine's reports.
   */
  forgetCommits(replica: string, commits: ReadonlySet<number>): number {
    return this.index.forgetCommits(replica, commits);
  }

  /** Per replica, what it holds of the request: summed over sequences, the newest use (and its commit). */
  private matchAll(chains: readonly PrefixChain[], replicas: readonly ReplicaView[]): PrefixMatch[] {
    return replicas.map((r) => {
      const total: PrefixMatch = { replica: r.name, depth: 0, chars: 0, lastUsed: 0, commit: 0 };
      for (const chain of chains) {
        const m = this.index.match(chain, r.name);
        total.depth = Math.max(total.depth, m.depth);
        total.chars += m.chars;
        if (m.lastUsed > total.lastUsed) Object.assign(total, { lastUsed: m.lastUsed, commit: m.commit });
      }
      return total;
    });
  }

  private available(chains: readonly PrefixChain[], replicas: readonly ReplicaView[]): number {
    let chars = 0;
    for (const chain of chains) {
      let best = 0;
      for (const r of replicas) best = Math.max(best, this.index.match(chain, r.name).chars);
      chars += best;
    }
    return chars;
  }

  /**
   * How long after its previous turn a conversation's next turn may still come: the longest
   * gap of the last 64 continuations this router saw (from the last use of the longest prefix
   * held of each — its previous turn — to now). A prompt sent once and idle longer than that
   * is not expected back (what a card would lose by evicting it, `displaces`). Infinity until
   * 8 continuations have been seen: everything sent within the window is then worth keeping.
   */
  turnHorizon(): number {
    if (this.turnGapsSeen < TURN_GAPS_TRUSTED) return Infinity;
    const n = Math.min(this.turnGapsSeen, TURN_GAPS);
    let longest = 0;
    for (let i = 0; i < n; i++) longest = Math.max(longest, this.turnGaps[i]!);
    return longest;
  }

  /**
   * A raw completions prompt carries no roles, so whether it continues an earlier one shows
   * only in the index: a replica holds all its full chunks up to where an earlier prompt
   * ended, and the earlier prompt's last, partial chunk is a prefix of this one's text there.
   */
  private extendsServedPrompt(input: RouteInput, matches: readonly PrefixMatch[]): boolean {
    if (input.shape.endpoint !== "completions" || input.chains.length !== 1) return false;
    const chain = input.chains[0]!;
    const prompt = input.shape.sequences[0]!.at(-1)![1];
    const promptStart = chainChars(chain) - prompt.length;
    for (const m of matches) {
      if (m.depth === 0) continue;
      if (m.depth === chain.length) return true; // the same prompt again
      const tail = this.index.tailAfter(chain, m.depth, m.replica);
      const offset = chain.ends[m.depth - 1]! - promptStart;
      if (tail === 0 || offset <= 0 || offset + tail > prompt.length) continue;
      const link = continuationLink(linkHash(chain, m.depth - 1), prompt, offset, tail, this.hasher);
      if (this.index.holds(link.lo, link.hi, m.replica)) return true;
    }
    return false;
  }

  /** The next commit tag: never 0 (an untagged entry). */
  private nextTag(): number {
    this.tag = (this.tag + 1) >>> 0;
    if (this.tag === 0) this.tag = 1;
    return this.tag;
  }

  /**
   * A session's identity: xxhash64 of tenant, model and the client's key. A client chooses
   * the key (a header, `prompt_cache_key`, `metadata.user_id`) and may make it megabytes
   * long: kept as it came, 100k remembered sessions could hold gigabytes, and a peer would
   * receive each one whole. Eight bytes, whatever was sent.
   */
  private sessionKey(input: RouteInput): bigint {
    return this.hasher.hash(`${input.shape.tenant}\u001f${input.shape.model ?? ""}\u001f${input.shape.session}`, SESSION_SEED);
  }

  private spill(decision: Decision, replicas: readonly ReplicaView[]): Decision {
    if (this.maxInflight <= 0) return decision;
    const chosen = replicas.find((r) => r.name === decision.replica);
    if (!chosen || chosen.inflight < this.maxInflight) return decision;
    let target: ReplicaView | undefined;
    for (const r of live(replicas)) {
      if (r.inflight >= this.maxInflight) continue;
      if (!target || r.inflight < target.inflight) target = r;
    }
    // Every replica at the threshold: stay with the policy's choice and let the engine queue.
    return target ? { replica: target.name, reason: "spill", usedCounter: decision.usedCounter } : decision;
  }
}

/** Seeds the session hash apart from prefix identities (which start from tenant‖model). */
const SESSION_SEED = 0x5e5510a0n;

function remember<K>(map: Map<K, string>, key: K, value: string, max: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) {
    const oldest = map.keys().next();
    if (!oldest.done) map.delete(oldest.value);
  }
}
