/**
 * The models an engine holds in memory (Ollama /api/ps) as this router last looked, and what
 * it sent there since: enough to tell an unload (its KV went with it) from a model that stayed.
 */
import type { ResidentModel } from "../engines/profile.ts";

/**
 * One look at the models an engine holds in memory: per name, its context and when it would
 * unload if left idle — as the engine wrote it (`expiresRaw`) and on this router's clock
 * (`expiresAt`, moved by the engine's `Date` header) — with when the look was asked, whether
 * nothing of this router's ran there then, and how many requests it had sent there.
 */
export interface ResidentLook {
  at: number;
  idle: boolean;
  dispatches: number;
  models: Map<string, { contextLength?: number; expiresRaw?: number; expiresAt?: number }>;
}

/** What a look compares with, taken before it is asked. */
export interface LookAsked {
  seq: number;
  at: number;
  idle: boolean;
  dispatches: number;
}

/**
 * Slack when an engine's unload time is compared with this router's clock: its `Date` header
 * counts whole seconds, and the request to read it takes some time.
 */
const UNLOAD_MARGIN_MS = 2000;
/** Model names kept per replica as ones this router sent requests for. */
const MODELS_KEPT = 256;
/** Send times kept per replica to tell whether one went between two looks. */
const DISPATCH_TIMES = 64;

export class Residency {
  /** The models the engine held in memory at the last look. */
  look?: ResidentLook;
  /** Looks asked and read: an answer older than the last one read is dropped. */
  private asked = 0;
  private read = 0;
  /** The model names this router sent generation requests for here: an unload of another one loses none of its cache. */
  readonly requestedModels = new Set<string>();
  /** How many requests this router sent here, and when the latest ones went (newest last, at most DISPATCH_TIMES). */
  dispatches = 0;
  readonly dispatchTimes: number[] = [];

  /** A request for `model` was sent here at `now`. */
  sent(model: string | undefined, now: number): void {
    this.dispatches++;
    this.dispatchTimes.push(now);
    if (this.dispatchTimes.length > DISPATCH_TIMES) this.dispatchTimes.shift();
    if (model !== undefined && this.requestedModels.size < MODELS_KEPT) this.requestedModels.add(model);
  }

  /** The context of the loaded model a request naming `model` reaches, if listed. */
  contextOf(model: string, reaches: (requested: string, listed: string) => boolean): number | undefined {
    return [...(this.look?.models ?? [])].find(([name]) => reaches(model, name))?.[1].contextLength;
  }

  /** A look is asked at `at`, with nothing of this router's running there (`idle`) or not. */
  ask(at: number, idle: boolean): LookAsked {
    return { seq: ++this.asked, at, idle, dispatches: this.dispatches };
  }

  /** Checks of one replica may overlap (the interval's, a down replica's re-check, a reload's): false for an answer older than one read. */
  accept(look: LookAsked): boolean {
    if (look.seq < this.read) return false;
    this.read = look.seq;
    return true;
  }

  /**
   * One look at the models the engine holds in memory. A model this router sent requests for
   * that is no longer listed was unloaded (Ollama: idle past keep_alive, or its memory went to
   * another model), and its KV with it. One listed again with a new expiry, whose old one
   * passed while nothing of this router's ran there, was unloaded and loaded again between two
   * looks — unless that expiry had already passed at the earlier look (a runner busy with
   * another client's request keeps its old expiry until that request ends). Another client's
   * request that began just before the expiry kept the model loaded, and reads as an unload
   * here: the router then forgets prefixes the card still held, which costs hits, never a
   * wrong answer. Returns what was unloaded, if anything.
   */
  absorb(
    models: ResidentModel[],
    look: LookAsked & { offset: number },
    reaches: (requested: string, listed: string) => boolean,
  ): { gone: string[] } | { reloaded: string; expiredAt: number } | undefined {
    const before = this.look;
    const listed: ResidentLook["models"] = new Map(
      models.map((m) => [m.name, { contextLength: m.contextLength, expiresRaw: m.expiresAt, expiresAt: m.expiresAt === undefined ? undefined : m.expiresAt + look.offset }]),
    );
    this.look = { at: look.at, idle: look.idle, dispatches: look.dispatches, models: listed };
    if (!before) return undefined;
    const ours = (name: string) => [...this.requestedModels].some((requested) => reaches(requested, name));
    const gone = [...before.models.keys()].filter((name) => !listed.has(name) && ours(name));
    if (gone.length > 0) return { gone };
    if (!before.idle) return undefined;
    // When this router's first request after the earlier look went (more than it keeps: unknown).
    const since = this.dispatches - before.dispatches;
    if (since > this.dispatchTimes.length) return undefined;
    const lapsedBy = since > 0 ? this.dispatchTimes[this.dispatchTimes.length - since]! : look.at;
    const reloaded = [...before.models].find(
      ([name, m]) =>
        ours(name) &&
        m.expiresAt !== undefined &&
        m.expiresAt > before.at + UNLOAD_MARGIN_MS &&
        listed.has(name) &&
        listed.get(name)!.expiresRaw !== m.expiresRaw &&
        m.expiresAt + UNLOAD_MARGIN_MS < lapsedBy,
    );
    return reloaded ? { reloaded: reloaded[0], expiredAt: reloaded[1].expiresRaw! } : undefined;
  }
}
