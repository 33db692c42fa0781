/**
 * cache-aware — SGLang's approximate-tree rule. With a long enough match (at least
 * `min_match_ratio` of the prompt) the request follows the replica holding that prefix,
 * the least loaded one when several hold it. Without one it goes to the replica with the
 * smallest estimated cached working set, so distinct long documents spread evenly instead
 * of piling up; ties by load. An imbalance guard overrides both: when the busiest replica
 * has `balance_abs` more in flight than the idlest and more than `balance_rel` times as
 * many, the idlest wins. A burst sharing a long system prompt therefore still spreads (the
 * guard trips, the second holder then wins on load), and each long shared document stays
 * where it is cached while load is even.
 */
import { bestMatch, leastLoaded, live, type Policy } from "../policy.ts";

export function createCacheAware(): Policy {
  return {
    name: "cache-aware",
    choose(_input, replicas, ctx) {
      const up = live(replicas);
      if (up.length === 0) return undefined;
      const { min_match_ratio, balance_abs, balance_rel } = ctx.cacheAware;

      const loads = up.map((r) => r.load);
      const max = Math.max(...loads);
      const min = Math.min(...loads);
      if (max - min >= balance_abs && max > balance_rel * min) return leastLoaded(up, ctx);

      const total = ctx.totalChars;
      const owner = bestMatch(up, ctx, true);
      if (owner && total > 0 && owner.match.chars / total >= min_match_ratio) {
        return { replica: owner.replica.name, reason: "pin" };
      }

      let smallest = up[0]!;
      for (const r of up) {
        if (r.cachedChars < smallest.cachedChars || (r.cachedChars === smallest.cachedChars && r.load < smallest.load)) {
          smallest = r;
        }
      }
      const tied = up.filter((r) => r.cachedChars === smallest.cachedChars && r.load === smallest.load);
      if (tied.length > 1) return leastLoaded(tied, ctx);
      return { replica: smallest.name, reason: "load" };
    },
  };
}
