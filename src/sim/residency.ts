/**
 * Ollama's model residency: its runner (the llama-server process holding the KV and the RAM
 * prompt cache) is started by the first request for the model and stopped when it has been
 * idle for keep_alive. ollama/ollama:
 * - server/sched.go `Scheduler.GetRunner` / `load`: a request for a model that is not loaded
 *   starts its runner; nothing is loaded at start;
 * - server/sched.go `processCompleted`: when a runner's refCount reaches 0 its expireTimer is
 *   armed for sessionDuration (keep_alive) and `expiresAt = time.Now().Add(sessionDuration)`;
 *   the expired runner is unloaded (`expiredCh` → unload → llm/server.go `Close` stops the
 *   process). A request that arrives first stops the timer;
 * - envconfig/config.go `KeepAlive`: 5 minutes by default, a negative value for ever;
 * - server/routes.go `PsHandler` lists `s.sched.loaded`, each with `expires_at` (now +
 *   sessionDuration while the first request after a load runs: "the scheduler waits to set
 *   expiresAt").
 * Not imitated: the load's own time (reading the weights), and unloads to make room for
 * another model (the sim serves one).
 */
import type { Clock } from "./clock.ts";
import type { SimEngineApi } from "./engine-api.ts";

/** time.Now().Add(math.MaxInt64 ns): what Ollama shows for a keep_alive of for ever (~292 years on). */
const FOREVER_MS = 292 * 365.25 * 24 * 3600 * 1000;

export class Residency {
  private loaded = false;
  /** Real ms the model was loaded, and the last request on it ended (undefined: none yet). */
  private loadedAt = 0;
  private lastEnd: number | undefined;
  loads = 0;
  unloads = 0;

  /** `keepAliveMs`: real ms (model seconds × time scale), negative = for ever. */
  constructor(
    private readonly keepAliveMs: number,
    private readonly clock: Clock,
    private readonly engine: SimEngineApi,
  ) {}

  /** Unload the model when it has been idle for keep_alive (its timer would have fired by now). */
  settle(): void {
    if (!this.loaded || this.keepAliveMs < 0) return;
    this.engine.sync();
    if (this.engine.runningCount + this.engine.waitingCount > 0) return;
    if (this.clock.now() < (this.lastEnd ?? this.loadedAt) + this.keepAliveMs) return;
    this.engine.dropCache();
    this.loaded = false;
    this.unloads++;
  }

  /** As at start: not loaded, nothing counted (the engine's own reset empties its cache). */
  reset(): void {
    this.loaded = false;
    this.lastEnd = undefined;
    this.loads = 0;
    this.unloads = 0;
  }

  /** A request for the model arrives: loaded if it was not. */
  use(): void {
    this.settle();
    if (this.loaded) return;
    this.loaded = true;
    this.loads++;
    this.loadedAt = this.clock.now();
    this.lastEnd = undefined;
  }

  /** A request on the model ended. */
  ended(): void {
    this.lastEnd = this.clock.now();
  }

  /** The model's `expires_at` as /api/ps shows it (Unix ms), or undefined when it is not loaded. */
  expiresAt(): number | undefined {
    this.settle();
    if (!this.loaded) return undefined;
    if (this.keepAliveMs < 0) return Date.now() + FOREVER_MS;
    const wallOffset = Date.now() - this.clock.now();
    return (this.lastEnd ?? this.clock.now()) + this.keepAliveMs + wallOffset;
  }
}
