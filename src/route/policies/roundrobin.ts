/**
 * roundrobin — a counter over the live replicas, whatever the request.
 * The baseline: perfect spread of bursts, and it loses every other cache hit of an agent
 * loop (docs/bench-design.md#the-reference-measurements). Kept so that loss can be measured.
 */
import { spread, type Policy } from "../policy.ts";

export function createRoundRobin(): Policy {
  return { name: "roundrobin", choose: (_input, replicas, ctx) => spread(replicas, ctx) };
}
