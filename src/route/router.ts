/**
 * The routing decision, end to end and still pure: previous_response_id stickiness, the
 * configured policy, and the `max_inflight` spill every policy honours. The caller passes
 * the fleet snapshot and the clock, then commits the decision it acted on.
 */
import type { CacheAwareOptions } from "./options.ts";
import type { Hasher } from "./hash.ts";
import { live, type Decision, type Policy, type PolicyContext, type ReplicaView, type RouteInput } from "./policy.ts";
import { PrefixIndex, type PrefixMatch } from "./prefix.ts";

export interface RouterOptions {
  policy: Policy;
  index: PrefixIndex;
  hasher: Hasher;
  maxInflight: number;
  cacheAware: CacheAwareOptions;
  /** Responses API ids remembered (LRU). */
  maxResponses?: number;
  random?: () => number;
}

export class Router {
  policy: Policy;
  maxInflight: number;
  cacheAware: CacheAwareOptions;
  readonly index: PrefixIndex;
  /** Spread counter: advanced only by decisions that consumed it. */
  counter = 0;
  private readonly responses = new Map<string, string>();
  private readonly maxResponses: number;
  private readonly hasher: Hasher;
  private readonly random: () => number;

  constructor(options: RouterOptions) {
    this.policy = options.policy;
    this.index = options.index;
    this.hasher = options.hasher;
    this.maxInflight = options.maxInflight;
    this.cacheAware = options.cacheAware;
    this.maxResponses = options.maxResponses ?? 100_000;
    this.random = options.random ?? Math.random;
  }

  /** Choose a replica among `replicas` (already narrowed to the request's model), or none. */
  route(input: RouteInput, replicas: readonly ReplicaView[]): Decision | undefined {
    const sticky = input.shape.previousResponseId && this.responses.get(input.shape.previousResponseId);
    if (sticky) {
      const owner = replicas.find((r) => r.name === sticky && r.healthy);
      // The response state lives only there: never spill it.
      if (owner) return { replica: owner.name, reason: "sticky" };
    }

    let matches: readonly PrefixMatch[] | undefined;
    const ctx: PolicyContext = {
      counter: this.counter,
      random: this.random,
      hash: (text) => this.hasher.hash(text),
      matches: () => (matches ??= replicas.map((r) => this.index.match(input.chain, r.name))),
      cacheAware: this.cacheAware,
    };
    const decision = this.policy.choose(input, replicas, ctx);
    if (!decision) return undefined;
    return this.spill(decision, replicas);
  }

  /** Record an acted-on decision: the replica now holds this prefix. */
  commit(input: RouteInput, decision: Decision, now: number): void {
    if (decision.usedCounter) this.counter++;
    this.index.record(input.chain, decision.replica, now, input.shape.continuation);
  }

  /** A Responses API response `id` was produced by `replica`. */
  rememberResponse(id: string, replica: string): void {
    this.responses.delete(id);
    this.responses.set(id, replica);
    if (this.responses.size > this.maxResponses) {
      const oldest = this.responses.keys().next();
      if (!oldest.done) this.responses.delete(oldest.value);
    }
  }

  /** The replica that produced Responses API response `id`, if remembered. */
  responseOwner(id: string): string | undefined {
    return this.responses.get(id);
  }

  /** Oldest first, for the state file. */
  savedResponses(): [string, string][] {
    return [...this.responses];
  }

  /** Forget what a replica held: it restarted (its cache is gone) or left the fleet. */
  forget(replica: string): void {
    this.index.forget(replica);
    for (const [id, owner] of this.responses) if (owner === replica) this.responses.delete(id);
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
