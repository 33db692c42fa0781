/**
 * The simulated engine's public API (the bench, the demo and tests run sims in-process
 * through this; the router's tests spawn `llmroute sim` instead).
 *
 *   const fleet = await startSimFleet({ replicas: 2, profile: "3090", timeScale: 0.1 });
 *   fleet[0].url  // http://127.0.0.1:PORT
 *   await Promise.all(fleet.map((s) => s.stop()));
 */
export { startEach, startSim, startSimFleet, routerTomlSnippet, type SimServer, type StartSimOptions, type StartFleetOptions } from "./server.ts";
export { createSimApp, type SimApp, type SimAppDeps, type SimState } from "./app.ts";
export { SimEngine, type Sequence } from "./engine.ts";
export type { SimEngineApi, SimSequence, SequenceResult, SequenceListener, EngineStats, PrefixStop, SlotInfo, KvSnapshot } from "./engine-api.ts";
export { PROFILES, DEFAULT_PROFILE, resolveSimOptions, type SimOptions, type EngineOptions, type FaultOptions, type ProfileName } from "./options.ts";
export { ManualClock, realClock, type Clock } from "./clock.ts";
export { renderChat, type ChatMessage } from "./prompt-text.ts";
export { renderTemplate, TEMPLATES, type TemplateName } from "./chat-templates.ts";
export { DEFAULT_ENGINE, ENGINE_PROFILES, engineProfile, type EngineProfileName, type EngineFamily } from "./profiles/index.ts";
export { type PromptCacheView } from "./prompt-cache.ts";
export { SlotEngine, type SlotView, type SlotSequence } from "./slots.ts";
