/**
 * least-loaded — the live replica with the fewest requests in flight (plus the engine's
 * own queue where it is scraped). Good when request cost varies and caching does not
 * matter; it ignores where prefixes are cached.
 */
import { leastLoaded, type Policy } from "../policy.ts";

export function createLeastLoaded(): Policy {
  return { name: "least-loaded", choose: (_input, replicas, ctx) => leastLoaded(replicas, ctx) };
}
