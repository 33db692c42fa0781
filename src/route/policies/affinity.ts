/**
 * affinity — every request to the owner of its longest known prefix; an unknown prefix is
 * placed by rendezvous hashing of its first link, so adding or removing a replica moves
 * only that replica's share (docs/routing.md#policies).
 * Maximises cache hits, and pays for it on bursts that share a first segment (a system
 * prompt): they all land on one card (docs/bench-design.md#the-reference-measurements).
 */
import { linkHash } from "../chain.ts";
import { hex64 } from "../hash.ts";
import { bestMatch, live, type Policy } from "../policy.ts";

export function createAffinity(): Policy {
  return {
    name: "affinity",
    choose(input, replicas, ctx) {
      const owner = bestMatch(replicas, ctx);
      if (owner) return { replica: owner.replica.name, reason: "pin" };
      const up = live(replicas);
      if (up.length === 0) return undefined;
      const first = input.chains[0];
      const key = first && first.length > 0 ? hex64(linkHash(first, 0)) : `${input.shape.tenant}\u001f${input.shape.model ?? ""}`;
      let winner = up[0]!;
      let top = "";
      for (const r of up) {
        const score = ctx.hash(`${key}\u001f${r.name}`);
        if (score > top) {
          top = score;
          winner = r;
        }
      }
      return { replica: winner.name, reason: "hash" };
    },
  };
}
