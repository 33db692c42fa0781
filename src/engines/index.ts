/**
 * The engine families the router knows, and how a replica is recognised as one of them.
 */
import { LLAMACPP } from "./llamacpp.ts";
import type { Sample } from "./metrics.ts";
import { OLLAMA } from "./ollama.ts";
import { ENGINE_FAMILIES, type EngineFamily, type EngineProfile } from "./profile.ts";
import { SGLANG } from "./sglang.ts";
import { VLLM } from "./vllm.ts";

export const PROFILES: Record<EngineFamily, EngineProfile> = { vllm: VLLM, sglang: SGLANG, llamacpp: LLAMACPP, ollama: OLLAMA };

export function profileOf(family: EngineFamily): EngineProfile {
  return PROFILES[family];
}

/** What a replica showed of itself, from which its family is told. */
export interface FamilyEvidence {
  /** `owned_by` of its /v1/models cards. */
  ownedBy?: readonly string[];
  /** Its /metrics, when it answered with Prometheus text. */
  metrics?: Map<string, Sample[]>;
  /** The `Server` response header (llama.cpp's HTTP server sends "llama.cpp"). */
  server?: string | null;
  /** /api/version answered with a version (Ollama). */
  ollamaVersion?: boolean;
}

/** The family and the evidence that named it, or undefined when nothing did. */
export function detectFamily(e: FamilyEvidence): { family: EngineFamily; from: string } | undefined {
  if (e.metrics) {
    const names = [...e.metrics.keys()];
    for (const family of ENGINE_FAMILIES) {
      const prefix = PROFILES[family].metricPrefix;
      if (prefix && names.some((n) => n.startsWith(prefix))) return { family, from: `/metrics (${prefix}*)` };
    }
  }
  for (const family of ENGINE_FAMILIES) {
    const owner = e.ownedBy?.find((o) => PROFILES[family].ownedBy(o));
    if (owner !== undefined) return { family, from: `/v1/models owned_by "${owner}"` };
  }
  if (e.server && /llama\.cpp/i.test(e.server)) return { family: "llamacpp", from: `Server: ${e.server}` };
  if (e.ollamaVersion) return { family: "ollama", from: "/api/version" };
  return undefined;
}

export { ENGINE_FAMILIES, type EngineFamily, type EngineProfile };
