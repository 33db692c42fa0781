/**
 * The retry rule, alone (Caddy's `tryAgain`): what a failed attempt — always one before the
 * first byte reached the client (design decision 4: never after) — lets the request do next.
 */
import type { Failure } from "../fleet/failure.ts";
import type { RouteReason } from "../route/policy.ts";

/** Upstream statuses that mean "this replica could not take the request": fail over. */
export const RETRYABLE_STATUS = new Set([502, 503, 504]);

/**
 * After `failure` on a replica chosen for `reason`: "never" — a sticky decision (a Responses
 * API follow-up) can only be served where its state is stored; "same-too" — its KV was full,
 * which is not for good: the card can take it once what runs there ends (its wall now makes
 * the request wait for that), so it stays a candidate; "elsewhere" — any other replica.
 */
export function retryable(failure: Failure, reason: RouteReason): "never" | "same-too" | "elsewhere" {
  if (reason === "sticky") return "never";
  return failure.kind === "full" ? "same-too" : "elsewhere";
}

/**
 * Did the replica compute none of the prompt, so the index takes its commit back? Refused,
 * answered 502/503/504 (busy included), never connected, or never sent (it waited at the
 * wall). Full: the engine cleared what it had computed of it (server-context.cpp prompt_clear).
 */
export function computedNothing(failure: Failure): boolean {
  return failure.kind === "refused" || failure.kind === "status" || failure.kind === "busy" || failure.kind === "full" || failure.kind === "wall" || failure.timer === "connect";
}
