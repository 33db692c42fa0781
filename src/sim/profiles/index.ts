/**
 * The engine profiles `llmroute sim --engine` chooses from (one file per family; each quirk
 * names its engine source beside it, docs/sim-engines.md tabulates them).
 */
import { llamacppProfile } from "./llamacpp.ts";
import { ollamaProfile } from "./ollama.ts";
import { sglangProfile } from "./sglang.ts";
import type { EngineProfile, EngineProfileName } from "./types.ts";
import { vllmProfile } from "./vllm.ts";

export { ENGINE_PROFILES, isEngineProfileName, zeroCounters, type EngineFamily, type EngineProfile, type EngineProfileName, type ReplicaCounters, type ReplicaView } from "./types.ts";

export const DEFAULT_ENGINE: EngineProfileName = "vllm-details";

const PROFILES: Record<EngineProfileName, EngineProfile> = {
  vllm: vllmProfile(false),
  "vllm-details": vllmProfile(true),
  sglang: sglangProfile,
  llamacpp: llamacppProfile,
  ollama: ollamaProfile,
};

export function engineProfile(name: EngineProfileName): EngineProfile {
  return PROFILES[name];
}
