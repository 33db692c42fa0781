/**
 * The contract every routing policy implements, and the registry that maps config names
 * to policies. A policy is pure: `choose` reads the request and a snapshot of the fleet
 * and returns a decision; the caller records it, counts it and logs it.
 */
import type { CacheAwareOptions, PolicyName } from "./options.ts";
import type { PrefixChain, PrefixMatch } from "./prefix.ts";
import type { RequestShape } from "./shape.ts";

/** Why a replica was chosen; sent to the client as `x-llmroute-route`. */
export type RouteReason = "pin" | "spread" | "spill" | "hash" | "load" | "random" | "sticky";

/** What a policy sees of one replica. */
export interface ReplicaView {
  name: string;
  healthy: boolean;
  /** Requests the router has in flight to this replica. */
  inflight: number;
  /** inflight plus engine-reported queue where scraped: the load policies compare. */
  load: number;
  /** Estimated characters of distinct prefixes recently served here (its cached working set). */
  cachedChars: number;
}

export interface RouteInput {
  shape: RequestShape;
  chain: PrefixChain;
}

export interface Decision {
  replica: string;
  reason: RouteReason;
  /** The round-robin counter was consumed: the caller advances it. */
  usedCounter?: boolean;
}

export interface PolicyContext {
  /** The shared spread counter (policies read it; the caller advances it). */
  counter: number;
  /** A number in [0, 1). */
  random(): number;
  /** Stable 64-bit hash as hex, for rendezvous placement. */
  hash(text: string): string;
  /** The longest prefix of the request each replica holds (computed on first use). */
  matches(): readonly PrefixMatch[];
  cacheAware: CacheAwareOptions;
}

export interface Policy {
  name: PolicyName;
  choose(input: RouteInput, replicas: readonly ReplicaView[], ctx: PolicyContext): Decision | undefined;
}

export function live(replicas: readonly ReplicaView[]): ReplicaView[] {
  return replicas.filter((r) => r.healthy);
}

/**
 * The deepest match among live replicas; among equal depths the most recently used one
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
    if (!replica || match.depth === 0) continue;
    if (!best || match.depth > best.match.depth) {
      best = { match, replica };
      continue;
    }
    if (match.depth < best.match.depth) continue;
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
  const min = Math.min(...up.map((r) => r.load));
  const tied = up.filter((r) => r.load === min);
  return { replica: tied[ctx.counter % tied.length]!.name, reason: "load", usedCounter: true };
}
