import type { PolicyName } from "../options.ts";
import type { Policy } from "../policy.ts";
import { createAffinity } from "./affinity.ts";
import { createCacheAware } from "./cache-aware.ts";
import { createHybrid } from "./hybrid.ts";
import { createHybridPlain } from "./hybrid-plain.ts";
import { createLeastLoaded } from "./least-loaded.ts";
import { createRandom } from "./random.ts";
import { createRoundRobin } from "./roundrobin.ts";

/** Config name → policy factory. */
export const POLICIES: Record<PolicyName, () => Policy> = {
  roundrobin: createRoundRobin,
  random: createRandom,
  "least-loaded": createLeastLoaded,
  affinity: createAffinity,
  hybrid: createHybrid,
  "hybrid-plain": createHybridPlain,
  "cache-aware": createCacheAware,
};

export function createPolicy(name: PolicyName): Policy {
  return POLICIES[name]();
}
