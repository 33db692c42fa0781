/**
 * The fluid time model both simulated engines run on (engine.ts: one vLLM-like block pool;
 * slots.ts: llama.cpp's slots). Only the KV model differs between them; how time passes
 * does not:
 * - prefill work is served as `prefillOrder` says: in admission order, one sequence at a
 *   time at the full `prefillTps` (vLLM's and SGLang's chunked prefill, the oldest request's
 *   chunk first in every step's token budget), or shared, every sequence prefilling at once
 *   getting an equal share. In admission order, while any prefill runs, a decoding sequence
 *   either shares each step with a `prefillChunkTokens` chunk, making one token per step of
 *   (chunk ÷ prefillTps + its own decode time) (`decodeWhilePrefilling` chunk: vLLM), or
 *   waits (none: SGLang);
 * - a decoding sequence makes one token per `1 / (decodeTps / (1 + decodeBatchSlowdown ·
 *   (running − 1)))` model seconds;
 * - the engine processes events in model-time order up to "now" whenever it is woken, and
 *   keeps one timer armed for the next event.
 * Model seconds = real ms / 1000 / timeScale.
 */
import type { Clock, TimerHandle } from "./clock.ts";
import type { SequenceState } from "./engine-api.ts";
import type { EngineOptions } from "./options.ts";

/** Relative tolerance under which a prefill counts as complete, a decode step as due. */
export const EPS = 1e-9;
/** Model seconds within which an event counts as due. */
const DUE_SLACK_S = 1e-7;

/** What the fluid model reads and advances on a running sequence. */
export interface FluidSequence {
  state: SequenceState;
  /** Prefill work: uncached tokens plus cachedTokenCost × cached tokens. */
  prefillWork: number;
  prefillDone: number;
  /** Progress towards the next decode token (1 = due). */
  decodeFrac: number;
}

export type FluidOptions = Pick<
  EngineOptions,
  "prefillTps" | "prefillOrder" | "prefillChunkTokens" | "decodeWhilePrefilling" | "decodeTps" | "decodeBatchSlowdown" | "timeScale" | "minTickMs"
>;

export interface FluidEvent<S extends FluidSequence = FluidSequence> {
  /** Model seconds (Infinity if nothing runs). */
  at: number;
  prefill: boolean;
  seq?: S;
}

/** Each prefilling sequence's prefill rate, and the decode rate, with these sequences running. */
export function fluidRates(running: readonly FluidSequence[], o: FluidOptions): { prefill: (seq: FluidSequence) => number; decode: number } {
  let prefilling = 0;
  let head: FluidSequence | undefined;
  for (const seq of running) {
    if (seq.state !== "prefill") continue;
    prefilling++;
    head ??= seq;
  }
  const decode = o.decodeTps / (1 + o.decodeBatchSlowdown * Math.max(0, running.length - 1));
  if (o.prefillOrder !== "arrival") {
    const shared = prefilling === 0 ? 0 : o.prefillTps / prefilling;
    return { prefill: () => shared, decode };
  }
  return {
    // `running` is in admission order: the oldest prefill has the card.
    prefill: (seq) => (seq === head ? o.prefillTps : 0),
    decode: !head ? decode : o.decodeWhilePrefilling === "none" ? 0 : 1 / (1 / decode + o.prefillChunkTokens / o.prefillTps),
  };
}

/** The earliest prefill completion or decode token, in model seconds (Infinity if idle). */
export function nextFluidEvent<S extends FluidSequence>(running: readonly S[], modelTime: number, o: FluidOptions): FluidEvent<S> {
  const { prefill, decode } = fluidRates(running, o);
  let best = Infinity;
  let bestIsPrefill = false;
  let bestSeq: S | undefined;
  for (const seq of running) {
    // A rate of 0 (a prefill waiting its turn, a decode waiting for prefills) has no event.
    const rate = seq.state === "prefill" ? prefill(seq) : decode;
    if (rate === 0) continue;
    const dt = (seq.state === "prefill" ? Math.max(0, seq.prefillWork - seq.prefillDone) : Math.max(0, 1 - seq.decodeFrac)) / rate;
    if (dt < best) {
      best = dt;
      bestIsPrefill = seq.state === "prefill";
      bestSeq = seq;
    }
  }
  return { at: modelTime + best, prefill: bestIsPrefill, ...(bestSeq ? { seq: bestSeq } : {}) };
}

/** Move every running sequence `dt` model seconds forward. */
export function advanceFluid(running: readonly FluidSequence[], dt: number, o: FluidOptions): void {
  if (dt <= 0) return;
  const { prefill, decode } = fluidRates(running, o);
  for (const seq of running) {
    if (seq.state === "prefill") seq.prefillDone += dt * prefill(seq);
    else seq.decodeFrac += dt * decode;
  }
}

/** The engine, as the event loop sees it. */
export interface FluidHost<S extends FluidSequence> {
  running(): readonly S[];
  time(): number;
  setTime(modelTime: number): void;
  /** Handle the events now due (the loop has snapped the earliest one), then end and admit. */
  onDue(): void;
  /**
   * A model time at which the host wants `onDue` though no sequence event is due then (a
   * waiting request admitted once the prefills ahead of it have shrunk enough); Infinity or
   * absent: none.
   */
  wakeAt?(): number;
}

/** Process events in model-time order up to `target` (model seconds). */
export function runFluidUntil<S extends FluidSequence>(target: number, host: FluidHost<S>, o: FluidOptions): void {
  for (let guard = 0; ; guard++) {
    if (guard > 10_000_000) throw new Error("sim: scheduler made no progress");
    const running = host.running();
    const next = nextFluidEvent(running, host.time(), o);
    const wake = host.wakeAt?.() ?? Infinity;
    if (wake < next.at && wake <= target + DUE_SLACK_S) {
      advanceFluid(running, wake - host.time(), o);
      host.setTime(Math.max(host.time(), wake));
      host.onDue();
      continue;
    }
    // Events a hair past `target` are due: timers are whole milliseconds and floats are noisy.
    if (next.at > target + DUE_SLACK_S) {
      if (target > host.time()) advanceFluid(running, target - host.time(), o);
      host.setTime(Math.max(host.time(), target));
      return;
    }
    advanceFluid(running, next.at - host.time(), o);
    host.setTime(next.at);
    // The earliest event is due by definition: snap it, so float rounding (model time is
    // large at tiny time scales, its ulp can exceed a whole event) cannot stall the loop.
    if (next.seq?.state === "prefill") next.seq.prefillDone = next.seq.prefillWork;
    else if (next.seq?.state === "decode") next.seq.decodeFrac = Math.max(next.seq.decodeFrac, 1);
    host.onDue();
  }
}

/** The engine's one timer: armed for the next event, re-armed only when that moves. */
export class FluidTimer {
  private timer: TimerHandle | undefined;
  private timerAt = Infinity;

  constructor(
    private readonly clock: Clock,
    private readonly options: FluidOptions,
    private readonly fire: () => void,
  ) {}

  /** Arm for `next` (model seconds), given the model time now. */
  arm(next: FluidEvent, modelNow: number): void {
    if (next.at === Infinity) return this.clear();
    let delayMs = Math.max(0, (next.at - modelNow) * 1000 * this.options.timeScale);
    // Decode tokens are coalesced (a few ms of real time); first tokens are timed exactly.
    if (!next.prefill) delayMs = Math.max(delayMs, this.options.minTickMs);
    // Round up (a timer firing early would find nothing due), minus float noise.
    delayMs = Math.ceil(delayMs - 1e-6);
    const at = this.clock.now() + delayMs;
    if (this.timer !== undefined && this.timerAt === at) return;
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timerAt = at;
    this.timer = this.clock.setTimer(delayMs, () => {
      this.timer = undefined;
      this.timerAt = Infinity;
      this.fire();
    });
  }

  clear(): void {
    if (this.timer !== undefined) this.clock.clearTimer(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }
}
