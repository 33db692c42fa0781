/**
 * The capacity wall (seed: "routing cannot rescue arithmetic"). A running sequence and its
 * cached prefixes draw on one per-card KV pool; when the prefixes of recently active
 * conversations on a replica exceed its `kv_tokens`, the engine evicts and re-prefills
 * whatever the placement. Say so once per episode, with the numbers and the real levers.
 */
import type { Log } from "../log.ts";
import type { Replica } from "./fleet.ts";

export interface CapacityReading {
  replica: string;
  /** Estimated tokens of distinct conversation or reused prefixes used within the window. */
  workingSetTokens: number;
  kvTokens: number;
  /** workingSetTokens / kvTokens (0 when the budget is unknown). */
  ratio: number;
  over: boolean;
  /** When the current over-budget episode began (ms), if over. */
  since?: number;
}

/** An episode ends when the working set falls back below this share of the budget. */
const CLEAR_RATIO = 0.9;

export const CAPACITY_LEVERS = "routing cannot fix this: add a card, compact context client-side, or run fewer large contexts at once";

export class CapacityWatch {
  private readonly episodes = new Map<string, number>();
  /** Warnings issued per replica (the metric counts them). */
  readonly warnings = new Map<string, number>();
  readings: CapacityReading[] = [];

  constructor(private readonly log: Log) {}

  /**
   * Update from the per-replica working set in characters (prefix index, within the
   * window) converted with each replica's calibrated characters per token.
   */
  update(replicas: readonly Replica[], workingSetChars: ReadonlyMap<string, number>, now: number): CapacityReading[] {
    this.readings = replicas.map((r) => {
      const tokens = Math.round((workingSetChars.get(r.name) ?? 0) / r.charsPerToken);
      const kv = r.config.kv_tokens;
      const ratio = kv > 0 ? tokens / kv : 0;
      let since = this.episodes.get(r.name);
      if (kv > 0 && since === undefined && ratio > 1) {
        since = now;
        this.episodes.set(r.name, now);
        this.warnings.set(r.name, (this.warnings.get(r.name) ?? 0) + 1);
        this.log.warn(
          `capacity: ${r.name} holds ~${tokens.toLocaleString("en-US")} tokens of recently active prefixes, over its KV budget of ${kv.toLocaleString("en-US")} (${Math.round(ratio * 100)}%); the engine will evict and re-prefill — ${CAPACITY_LEVERS}`,
          { replica: r.name, working_set_tokens: tokens, kv_tokens: kv },
        );
      } else if (since !== undefined && ratio < CLEAR_RATIO) {
        this.episodes.delete(r.name);
        since = undefined;
        this.log.info(`capacity: ${r.name} back under its KV budget`, { replica: r.name, working_set_tokens: tokens, kv_tokens: kv });
      }
      return { replica: r.name, workingSetTokens: tokens, kvTokens: kv, ratio, over: since !== undefined, ...(since === undefined ? {} : { since }) };
    });
    return this.readings;
  }

  /** Forget a replica that left the fleet. */
  drop(name: string): void {
    this.episodes.delete(name);
  }
}
