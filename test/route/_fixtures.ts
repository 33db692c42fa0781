/** Synthetic requests and a fleet snapshot for the pure routing tests. */
import { DEFAULT_CACHE_AWARE } from "../../src/route/options.ts";
import { createHasher } from "../../src/route/hash.ts";
import type { ReplicaView, RouteInput } from "../../src/route/policy.ts";
import { createPolicy } from "../../src/route/policies/index.ts";
import { PrefixIndex, prefixChain } from "../../src/route/prefix.ts";
import { Router } from "../../src/route/router.ts";
import { endpointOf, shapeOf } from "../../src/route/shape.ts";
import type { PolicyName } from "../../src/route/options.ts";

export const hasher = await createHasher();
export const CHUNK = 1024;

export function input(path: string, body: unknown, tenantHeader?: string): RouteInput {
  const shape = shapeOf(endpointOf(path), body, tenantHeader);
  return { shape, chain: prefixChain(shape, hasher, CHUNK) };
}

export type Msg = { role: string; content: unknown; [k: string]: unknown };
export const chat = (messages: Msg[], extra: Record<string, unknown> = {}) =>
  input("/v1/chat/completions", { model: "m", messages, ...extra });

export function fleet(n: number, overrides: Partial<ReplicaView>[] = []): ReplicaView[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `gpu${i}`,
    healthy: true,
    inflight: 0,
    load: 0,
    cachedChars: 0,
    ...overrides[i],
  }));
}

export function router(policy: PolicyName, options: { maxInflight?: number; random?: () => number } = {}) {
  return new Router({
    policy: createPolicy(policy),
    index: new PrefixIndex({ maxEntries: 100_000, ttlMs: 3_600_000 }),
    hasher,
    maxInflight: options.maxInflight ?? 0,
    cacheAware: DEFAULT_CACHE_AWARE,
    random: options.random ?? (() => 0.5),
  });
}

/**
 * Route and commit like the proxy does, keeping the fleet snapshot honest: the chosen
 * replica's cached working set grows as the index says.
 */
export function send(r: Router, req: RouteInput, replicas: ReplicaView[], now = 0) {
  const decision = r.route(req, replicas);
  if (decision) {
    r.commit(req, decision, now);
    for (const rep of replicas) rep.cachedChars = r.index.workingSetChars(rep.name);
  }
  return decision;
}

/** A growing agent conversation: system + user, then assistant/tool turns appended. */
export function conversation(system: string, firstUser: string) {
  const messages: Msg[] = [
    { role: "system", content: system },
    { role: "user", content: firstUser },
  ];
  return {
    messages,
    next(turn: number) {
      messages.push({ role: "assistant", content: `answer ${turn}` }, { role: "user", content: `follow-up ${turn}` });
    },
  };
}
