/**
 * hybrid-plain — the rule the project started from, kept as a named policy so the bench can
 * show what the default's cost model adds. A continuation (it carries an earlier turn) goes
 * to the owner of its longest known prefix: that replica holds the conversation's KV.
 * Anything else — a one-shot, a batch member, a parallel subagent — is spread with the
 * counter, so a cold burst uses every card: the best of both pinned and round-robin
 * (docs/bench-design.md#the-reference-measurements). Its blind spot: one-shots over a
 * shared document are spread too, so their hit rate equals round-robin's.
 */
import { bestMatch, spread, type Policy } from "../policy.ts";

export function createHybridPlain(): Policy {
  return {
    name: "hybrid-plain",
    choose(_input, replicas, ctx) {
      if (ctx.continuation) {
        const owner = bestMatch(replicas, ctx);
        if (owner) return { replica: owner.replica.name, reason: "pin" };
      }
      return spread(replicas, ctx);
    },
  };
}
