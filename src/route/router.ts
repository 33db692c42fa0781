/**
 * The routing decision, end to end and still pure: previous_response_id stickiness, the
 * configured policy, the `max_inflight` spill every policy honours, and what the decision
 * expected of the cache. The caller passes the fleet snapshot and the clock, commits the
 * decision it acted on, and reports what the engine delivered (`feedback`), which
 * ./evidence.ts judges: it corrects the index when the engine has evicted what the index
 * still believed held.
 */
import { chainChars, continuationLink, linkHash, type PrefixChain } from "./chain.ts";
import { hex64, type Hasher } from "./hash.ts";
import type { CacheAwareOptions } from "./options.ts";
import { live, type Decision, type Policy, type PolicyContext, type ReplicaView, type RouteInput } from "./policy.ts";
import type { PrefixIndex, PrefixMatch } from "./prefix.ts";
import { EngineEvidence, type CacheVerdict } from "./evidence.ts";
import { breakPoints, type BreakPoints } from "./template-breaks.ts";

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

/** Undo a commit's new links (see Router.commit); returns how many were removed. */
export type Retract = () => number;

/** An acted-on decision (Router.commit): called, it is taken back; `tag` is its identity. */
export type Commit = Retract & { readonly tag: number };

export class Router {
  policy: Policy;
  maxInflight: number;
  cacheAware: CacheAwareOptions;
  readonly index: PrefixIndex;
  /** Set when this router shares its state with other instances (src/cluster). */
  sink?: RouterSink;
  /** What the engines' reports prove per replica (./evidence.ts). */
  readonly evidence: EngineEvidence;
  /** Spread counter: advanced only by decisions that consumed it. */
  counter = 0;
  private readonly responses = new Map<string, string>();
  /** Session identity (a 64-bit hash of the client's key) → the replica it last ran on. */
  private readonly sessions = new Map<bigint, string>();
  private readonly maxResponses: number;
  private readonly maxSessions: number;
  private readonly hasher: Hasher;
  private readonly random: () => number;
  /** The last commit tag given out. */
  private tag: number;

  constructor(options: RouterOptions) {
    this.policy = options.policy;
    this.index = options.index;
    this.evidence = new EngineEvidence(options.index, (replica, usedBy) => this.sink?.forgetUsedBy(replica, usedBy));
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
      const captured = this.evidence.expectedChars(replica, m.chars, breaks);
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
        // One cache of every card's KV would push out the fleet's oldest first, as far back
        // as this request needs beyond its longest held prefix; what a card would push out
        // that such a cache keeps is lost before its time.
        keepSince ??= this.index.pooledReach(
          replicas.filter((r) => r.healthy).map((r) => r.name),
          Math.max(0, totalChars - Math.max(0, ...matches.map((m) => m.chars))),
          input.chains,
        );
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
  commit(input: RouteInput, decision: Decision | Routed, now: number): Commit {
    if (decision.usedCounter) this.counter++;
    const tag = this.nextTag();
    // A conversation's turn, whether its earlier turns came as messages or in one prompt (`route`'s estimate says).
    const continued = input.shape.continuation || ("estimate" in decision && decision.estimate.continuation === true);
    const created = input.chains.map((chain) => this.index.record(chain, decision.replica, now, continued, tag));
    const session = input.shape.session ? this.sessionKey(input) : undefined;
    if (session !== undefined) remember(this.sessions, session, decision.replica, this.maxSessions);
    this.sink?.commit(input.chains, decision.replica, now, tag, continued, session);
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

  /** Judge what the engine delivered against the decision's estimate: EngineEvidence.feedback. */
  feedback(replica: string, estimate: RouteEstimate, cachedTokens: number | undefined, committedAt: number = Date.now()): CacheVerdict | undefined {
    return this.evidence.feedback(replica, estimate, cachedTokens, committedAt);
  }

  /** Judge a window of the engine's own cache counters: EngineEvidence.windowFeedback. */
  windowFeedback(replica: string, hits: number, heldTokens: number, budgetTokens: number, now: number): "hit" | "miss" | undefined {
    return this.evidence.windowFeedback(replica, hits, heldTokens, budgetTokens, now);
  }

  /** The KV this replica is believed to hold: EngineEvidence.believedKvTokens. */
  believedKvTokens(replica: string, starting: number | undefined, now: number, windowMs: number): number | undefined {
    return this.evidence.believedKvTokens(replica, starting, now, windowMs);
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
    this.evidence.forget(replica);
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
   * A prompt that carries no earlier turns as messages — a raw completions prompt, or a chat
   * whose client sends the whole conversation as one message ("flat") — shows that it
   * continues an earlier one only in the index: a replica holds all its full chunks up to
   * where an earlier prompt ended, inside this prompt's last message, and the earlier prompt's
   * last, partial chunk is a prefix of this one's text there. The same completions prompt sent
   * again counts too (a completions client's retry, a loop); a chat's does not: an identical
   * one-shot (a repeated question on a document) is not a conversation.
   */
  private extendsServedPrompt(input: RouteInput, matches: readonly PrefixMatch[]): boolean {
    if (input.chains.length !== 1 || input.shape.sequences.length !== 1) return false;
    const chain = input.chains[0]!;
    const prompt = input.shape.sequences[0]!.at(-1)?.[1];
    if (prompt === undefined) return false;
    const promptStart = chainChars(chain) - prompt.length;
    for (const m of matches) {
      if (m.depth === 0) continue;
      if (m.depth === chain.length) {
        if (input.shape.endpoint === "completions") return true;
        continue;
      }
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
