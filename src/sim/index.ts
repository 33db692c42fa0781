/**
 * The simulated engine's public API (the bench, the demo and tests run sims in-process
 * through this; the router's tests spawn `llmroute sim` instead).
 *
 *   const fleet = await startSimFleet({ replicas: 2, profile: "3090", timeScale: 0.1 });
 *   fleet[0].url  // http://127.0.0.1:PORT
 *   await Promise.all(fleet.map((s) => s.stop()));
 */
export { startSim, startSimFleet, routerTomlSnippet, type SimServer, type StartSimOptions, type StartFleetOptions } from "./server.ts";
export { createSimApp, type SimApp, type SimAppDeps, type SimState } from "./app.ts";
export { SimEngine, type Sequence, type SequenceResult, type SequenceListener, type EngineStats } from "./engine.ts";
export { PROFILES, DEFAULT_PROFILE, resolveSimOptions, type SimOptions, type EngineOptions, type FaultOptions, type ProfileName } from "./options.ts";
export { ManualClock, realClock, type Clock } from "./clock.ts";
export { renderChat, type ChatMessage } from "./template.ts";
export { SlotEngine, type SlotView, type PromptCacheView, type SlotPrefixStop, type SlotSequence } from "./slots.ts";
