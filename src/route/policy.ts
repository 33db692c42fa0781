/**
 * The contract every routing policy implements. A policy is pure: `choose` reads the
 * request and a snapshot of the fleet and returns a decision; the caller records it,
 * counts it and logs it.
 */
import type { PrefixChain } from "./chain.ts";
import type { CacheAwareOptions, PolicyName } from "./options.ts";
import type { PrefixMatch } from "./prefix.ts";
import type { RequestShape } from "./shape.ts";

/**
 * Why a replica was chosen; sent to the client as `x-llmroute-route`.
 * pin: a continuation to the replica holding its conversation · room: a continuation moved
 * off a card whose KV no longer keeps it between turns, to one that does · wall: a continuation
 * moved off a card whose KV wall makes its turns wait for the others' there, to one where it
 * fits beside what runs · cache: a one-shot to the
 * replica holding its long prefix (a shared document) · session: to the replica of its
 * session key · spread: the counter · cost: away from the rule's pick, whose queue made it
 * slower than prefilling elsewhere · spill: over max_inflight · sticky: a Responses API
 * follow-up to the replica holding its state · hash / load / random: the other policies.
 */
export type RouteReason = "pin" | "room" | "wall" | "cache" | "session" | "spread" | "cost" | "spill" | "hash" | "load" | "random" | "sticky";

/** What a policy sees of one replica. */
export interface ReplicaView {
  name: string;
  healthy: boolean;
  /** Requests the router has in flight to this replica. */
  inflight: number;
  /** inflight plus engine-reported queue where scraped: the load policies compare. */
  load: number;
  /** Estimated characters of distinct prefixes held here (the index's view of its cache). */
  cachedChars: number;
  /** Prompt tokens sent here whose prefill has not finished (no first byte yet), plus the engine's own queue where scraped. */
  queuedTokens: number;
  /**
   * The prefill tokens of each request this router has prefilling here, oldest first (part
   * of queuedTokens; the rest — the engine's own queue, other routers' requests — is not
   * itemised). With `concurrency`, what a new request's prefill waits for is priced as the
   * engine schedules it (see `prefillAhead`); without it, as a first-come queue.
   */
  queue?: readonly number[];
  /** How many prefills the engine runs at once, sharing its compute: the slot count for llama.cpp; 1 for vLLM's and SGLang's chunked prefill, which serves them oldest first. */
  concurrency?: number;
  /**
   * Seconds a new request would wait for a slot on an engine that runs a fixed number of
   * requests at once (llama.cpp's slots, Ollama's one) when all are taken: what is left of
   * the generations ahead of it, which the prefill queue does not count. Absent otherwise.
   * Worked out when asked: only a request a held document pulls there is priced with it.
   */
  slotWait?: () => number;
  /** Prompt tokens of this router's requests in flight here (as it counts them); absent: not known (0). */
  inflightTokens?: number;
  /**
   * A KV wall standing here: the engine turned requests away as KV-full (llama.cpp's unified
   * KV), so a request that would bring the prompt tokens in flight to `admitsBelow` waits for
   * one of them to end; `waitedSeconds`, what requests have waited at it so far (see
   * Replica.kvWall). Absent while none stands.
   */
  wall?: { admitsBelow: number; waitedSeconds: number };
  /** Measured prefill throughput, tokens per second. */
  prefillRate: number;
  /** Characters of canonical prompt per engine token (learned from usage). */
  charsPerToken: number;
  /** What the card's KV holds, in characters (kv_tokens × charsPerToken); Infinity when unknown. */
  budgetChars: number;
  /** Characters of distinct prefixes used here within the capacity window (what it is actively holding). */
  recentChars: number;
}

export interface RouteInput {
  shape: RequestShape;
  /** One chain per prompt sequence (usually one). */
  chains: PrefixChain[];
}

export interface Decision {
  replica: string;
  reason: RouteReason;
  /** The round-robin counter was consumed: the caller advances it. */
  usedCounter?: boolean;
  /** `wall`: the card the conversation left (what waiting there had cost is paid). */
  from?: string;
}

export interface PolicyContext {
  /** The shared spread counter (policies read it; the caller advances it). */
  counter: number;
  /** A number in [0, 1). */
  random(): number;
  /** Stable hash of a text as hex, for rendezvous placement. */
  hash(text: string): string;
  /** What each replica holds of this request (summed over its sequences), in the order of `replicas`. */
  matches(): readonly PrefixMatch[];
  /** Prompt characters of the request (all sequences). */
  totalChars: number;
  /** The request carries an earlier turn (or extends a completions prompt served before). */
  continuation: boolean;
  /**
   * Characters of other prefixes a replica was sent after `after` (ms), not counting this
   * request's own: what competed with them in its LRU cache since then (their reuse distance).
   * Counting may stop once past `limitChars`.
   */
  sentSince(replica: string, after: number, limitChars?: number): number;
  /**
   * Characters of this request's prompt a replica was sent before, held within its KV
   * budget or not (`matches` counts only what the index still believes held).
   */
  remembered(replica: string): number;
  /**
   * Characters that `chars` new characters would push out of a replica's full card, oldest
   * first as its LRU cache would, that one cache of every live card's KV would still keep:
   * those used after the fleet's eviction frontier — how far back this request's own
   * characters reach on the card where they reach least far (0 when some card has room).
   * 0 with room to spare or a KV that is not known. This request's own held prefix is not
   * among them.
   */
  displaces(replica: string, chars: number): number;
  /** The replica that last served this request's session key, if any. */
  sessionReplica?: string;
  cacheAware: CacheAwareOptions;
}

export interface Policy {
  name: PolicyName;
  /**
   * A request whose prefix the chosen replica keeps in a slot busy with another request
   * (llama.cpp) waits at the router for that slot, when that is sooner than prefilling the
   * prefix again (src/proxy/slot-hold.ts `holdForSlot`).
   */
  waitsForSlot?: boolean;
  choose(input: RouteInput, replicas: readonly ReplicaView[], ctx: PolicyContext): Decision | undefined;
}

export function live(replicas: readonly ReplicaView[]): ReplicaView[] {
  return replicas.filter((r) => r.healthy);
}

/**
 * The deepest holding among live replicas; among equal depths the most recently used one
 * (it most likely still has those blocks), or with `preferIdle` the least loaded one.
 */
export function bestMatch(
  replicas: readonly ReplicaView[],
  ctx: PolicyContext,
  preferIdle = false,
): { match: PrefixMatch; replica: ReplicaView } | undefined {
  const byName = new Map(replicas.filter((r) => r.healthy).map((r) => [r.name, r]));
  let best: { match: PrefixMatch; replica: ReplicaView } | undefined;
  for (const match of ctx.matches()) {
    const replica = byName.get(match.replica);
    if (!replica || match.chars === 0) continue;
    if (!best || match.chars > best.match.chars) {
      best = { match, replica };
      continue;
    }
    if (match.chars < best.match.chars) continue;
    const better = preferIdle
      ? replica.load < best.replica.load || (replica.load === best.replica.load && match.lastUsed > best.match.lastUsed)
      : match.lastUsed > best.match.lastUsed;
    if (better) best = { match, replica };
  }
  return best;
}

/** Counter spread over live replicas: consecutive spreads alternate. */
export function spread(replicas: readonly ReplicaView[], ctx: PolicyContext): Decision | undefined {
  const up = live(replicas);
  if (up.length === 0) return undefined;
  return { replica: up[ctx.counter % up.length]!.name, reason: "spread", usedCounter: true };
}

/** Fewest `load`; ties rotate with the counter so an idle fleet is not served by one card. */
export function leastLoaded(replicas: readonly ReplicaView[], ctx: PolicyContext): Decision | undefined {
  const up = live(replicas);
  if (up.length === 0) return undefined;
  // A load that is not a number (a bad engine reading) ranks last, and never leaves no choice.
  const load = (r: ReplicaView) => (Number.isFinite(r.load) ? r.load : Infinity);
  const min = Math.min(...up.map(load));
  const tied = up.filter((r) => load(r) === min);
  return { replica: tied[ctx.counter % tied.length]!.name, reason: "load", usedCounter: true };
}

/**
 * Prefill tokens the replica computes before a new request of `work` tokens has its first
 * token. Engines that prefill several requests at once share their compute between them
 * (llama.cpp's slots): the new request then waits only for as much of each other prefill
 * as its own size, Σ min(Wᵢ, work) — a short cached turn is not stuck behind long cold
 * prompts, as it would be in a first-come queue (vLLM's and SGLang's chunked prefill, which
 * serve prefills oldest first). Beyond the engine's concurrency, and for the queue that is not
 * itemised (the engine's own waiting requests, other routers'), it waits for all of it.
 */
export function prefillAhead(r: Pick<ReplicaView, "queuedTokens" | "queue" | "concurrency">, work: number): number {
  if (!r.queue || r.concurrency === undefined) return r.queuedTokens;
  if (r.queue.length >= r.concurrency) return r.queuedTokens;
  let listed = 0;
  let shared = 0;
  for (const w of r.queue) {
    listed += w;
    shared += Math.min(w, work);
  }
  return Math.max(0, r.queuedTokens - listed) + shared;
}
