import type { CacheAwareConfig } from "../config.ts";

/** cache-aware's thresholds when the config does not set them. */
export const DEFAULT_CACHE_AWARE: CacheAwareConfig = { min_match_ratio: 0.5, balance_abs: 2, balance_rel: 1.5 };
