/**
 * random — a uniformly random live replica (docs/routing.md#policies).
 * A baseline for measurements; like roundrobin it ignores the prefix cache.
 */
import { live, type Policy } from "../policy.ts";

export function createRandom(): Policy {
  return {
    name: "random",
    choose(_input, replicas, ctx) {
      const up = live(replicas);
      if (up.length === 0) return undefined;
      const i = Math.min(up.length - 1, Math.floor(ctx.random() * up.length));
      return { replica: up[i]!.name, reason: "random" };
    },
  };
}
