/**
 * The routing core's own vocabulary: the policy names and each policy's options with their
 * defaults. The config validator reads these; nothing in src/route imports the config.
 */

export const POLICY_NAMES = ["roundrobin", "random", "least-loaded", "affinity", "hybrid", "hybrid-plain", "cache-aware"] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

/** cache-aware's thresholds (SGLang's model gateway rule). */
export interface CacheAwareOptions {
  /** Fraction of the request's prefix that must already be cached on a replica to follow it. */
  min_match_ratio: number;
  /** Imbalance guard: in-flight difference (max − min) at or above which the least loaded wins. */
  balance_abs: number;
  /** … and the ratio max / min that must also be exceeded. */
  balance_rel: number;
}

/** cache-aware's thresholds when the config does not set them. */
export const DEFAULT_CACHE_AWARE: CacheAwareOptions = { min_match_ratio: 0.5, balance_abs: 2, balance_rel: 1.5 };

/** hybrid's cost rule (see policies/hybrid.ts). */
export interface HybridOptions {
  /** Leave the rule's pick only for a replica at least this much faster (a fraction of the pick's estimate)… */
  margin: number;
  /** …and faster by at least this many tokens of prefill at the pick's rate. */
  min_gain_tokens: number;
  /** A one-shot follows a held prefix that covers at least this fraction of its prompt. */
  min_match_ratio: number;
}

export const DEFAULT_HYBRID: HybridOptions = { margin: 0.2, min_gain_tokens: 512, min_match_ratio: 0.5 };
