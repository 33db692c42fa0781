/** Synthetic requests and a fleet snapshot for the pure routing tests. */
import { prefixChains } from "../../src/route/chain.ts";
import { createHasher } from "../../src/route/hash.ts";
import { DEFAULT_CACHE_AWARE, type PolicyName } from "../../src/route/options.ts";
import { createPolicy } from "../../src/route/policies/index.ts";
import type { RouteInput } from "../../src/route/policy.ts";
import { PrefixIndex } from "../../src/route/prefix.ts";
import { Router, type FleetView, type Routed } from "../../src/route/router.ts";
import { endpointOf, shapeOf } from "../../src/route/shape.ts";

export const hasher = createHasher();
export const CHUNK = 1024;

export function input(path: string, body: unknown, headers: { tenant?: string; session?: string } = {}): RouteInput {
  const shape = shapeOf(endpointOf(path), body, headers);
  return { shape, chains: prefixChains(shape, hasher, CHUNK) };
}

export type Msg = { role: string; content: unknown; [k: string]: unknown };
export const chat = (messages: Msg[], extra: Record<string, unknown> = {}, headers: { tenant?: string; session?: string } = {}) =>
  input("/v1/chat/completions", { model: "m", messages, ...extra }, headers);

export function fleet(n: number, overrides: Partial<FleetView>[] = []): FleetView[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `gpu${i}`,
    healthy: true,
    inflight: 0,
    load: 0,
    queuedTokens: 0,
    prefillRate: 4_000,
    charsPerToken: 4,
    budgetChars: Infinity,
    ...overrides[i],
  }));
}

export function router(policy: PolicyName, options: { maxInflight?: number; random?: () => number; maxEntries?: number } = {}) {
  return new Router({
    policy: createPolicy(policy),
    index: new PrefixIndex({ maxEntries: options.maxEntries ?? 100_000, ttlMs: 3_600_000, windowMs: 300_000 }),
    hasher,
    maxInflight: options.maxInflight ?? 0,
    cacheAware: DEFAULT_CACHE_AWARE,
    random: options.random ?? (() => 0.5),
  });
}

/** Route and commit like the proxy does. */
export function send(r: Router, req: RouteInput, replicas: FleetView[], now = 0): Routed | undefined {
  const decision = r.route(req, replicas, now);
  if (decision) r.commit(req, decision, now);
  return decision;
}

/**
 * Route, commit and leave the request in flight, as a burst does: nothing has reached its
 * first byte, so the chosen replica's queue grows by the prefill the decision expects.
 */
export function sendInFlight(r: Router, req: RouteInput, replicas: FleetView[], now = 0): Routed | undefined {
  const decision = send(r, req, replicas, now);
  if (decision) {
    const rep = replicas.find((x) => x.name === decision.replica)!;
    rep.inflight++;
    rep.load++;
    rep.queuedTokens += decision.estimate.uncachedTokens;
  }
  return decision;
}

/** The decision without the estimate, for tables of expected choices. */
export const choice = (d: Routed | undefined) => (d ? { replica: d.replica, reason: d.reason } : undefined);

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

/** The chain of a request's one sequence. */
export const only = (i: RouteInput) => i.chains[0]!;

/** A bare index, as the index tests make it. */
export const index = (maxEntries = 1000, ttlMs = 60_000, windowMs = 300_000) => new PrefixIndex({ maxEntries, ttlMs, windowMs });

/** A tiny conversation's first turn and its second (which extends it). */
export const TURN1 = only(chat([{ role: "system", content: "tiny" }, { role: "user", content: "hi" }]));
export const TURN2 = only(
  chat([
    { role: "system", content: "tiny" },
    { role: "user", content: "hi" },
    { role: "assistant", content: "hello" },
    { role: "user", content: "more" },
  ]),
);

/** A conversation of `n` earlier exchanges after a one-character system prompt. */
export const convo = (n: number, user = "go") => {
  const messages = [{ role: "system", content: "S" }, { role: "user", content: user }];
  for (let i = 0; i < n; i++) messages.push({ role: "assistant", content: `a${i}` }, { role: "user", content: `u${i}` });
  return only(chat(messages));
};
