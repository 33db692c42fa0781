/**
 * A response's cached tokens as its engine means them. The tap reads the number wherever an
 * engine puts it (src/proxy/tap.ts); this says what its presence or absence is worth for the
 * replica's family: a zero some engines leave out, a constant others write.
 */
import type { EngineProfile } from "./profile.ts";

export interface ReportedUsage {
  promptTokens?: number;
  cachedTokens?: number;
}

/**
 * The cached tokens to judge the index by, or undefined when the response says nothing.
 * `seen`: this replica has carried the field before (its flag is on), so where the family
 * omits a zero (vLLM's older versions, SGLang always), a response with usage but no field
 * reports 0. Ollama's Responses API writes 0 whatever it reused: not a report.
 */
export function reportedCachedTokens(profile: EngineProfile | undefined, endpoint: string, usage: ReportedUsage, seen: boolean): number | undefined {
  if (profile?.usage.responsesConstant && endpoint === "responses") return undefined;
  if (usage.cachedTokens !== undefined) return usage.cachedTokens;
  if (profile?.usage.zeroOmitted && seen && usage.promptTokens !== undefined) return 0;
  return undefined;
}

/** Does this response show the replica reports per-request cached tokens? */
export function showsCachedTokens(profile: EngineProfile | undefined, endpoint: string, usage: ReportedUsage): boolean {
  return usage.cachedTokens !== undefined && !(profile?.usage.responsesConstant && endpoint === "responses");
}
