/**
 * The capacity wall ("routing cannot rescue arithmetic"). A running sequence and its
 * cached prefixes draw on one per-card KV pool; when the prefixes of recently active
 * conversations on a replica exceed its `kv_tokens`, the engine evicts and re-prefills.
 * Say so once per episode, in one short line (the finding) with the numbers, and apart from
 * it the advice that applies under the running policy: when the fleet's distinct working set
 * exceeds the fleet's KV, no placement helps; when it fits, the cards are unevenly loaded or
 * hold the same prefixes twice, and placement can help — how, depends on the policy.
 */
import type { Log } from "../log.ts";
import { DEFAULT_CHARS_PER_TOKEN } from "./calibration.ts";
import type { Replica } from "./replica.ts";

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
  /** One line: how far over, and whether placement can help (set while over). */
  finding?: string;
  /** Why, and what would help under the running policy (set while over): the details. */
  advice?: string;
}

/** The whole fleet: distinct prefixes counted once across replicas, against the summed budget. */
export interface FleetCapacity {
  workingSetTokens: number;
  kvTokens: number;
}

/** An episode ends when the working set falls back below this share of the budget. */
const CLEAR_RATIO = 0.9;

export const CAPACITY_LEVERS = "add a card, compact context client-side, or run fewer large contexts at once";

/**
 * What the running policy does about a card over its KV while the fleet has room, and what
 * would do better (each policy's own header in src/route/policies says what it selects).
 */
function placementAdvice(policy: string): string {
  const instead = 'hybrid (routing.policy = "hybrid", the default) would keep each conversation on one card and place new ones on a card with KV room.';
  switch (policy) {
    case "hybrid":
      return "The running policy, hybrid, already puts a new conversation on a card with KV room, moves a conversation its card no longer keeps between turns to a card that does, and copies a shared prefix only when its holder is far behind: an overflow that lasts comes from conversations that grew where no card has room for them.";
    case "cache-aware":
      return `The running policy, cache-aware, follows a long cached match wherever it is and sends the rest to the card with the smallest working set, blind to how much room a new conversation needs; ${instead}`;
    case "hybrid-plain":
      return `The running policy, hybrid-plain, pins conversations and spreads new ones by a counter, blind to KV room; ${instead}`;
    case "affinity":
      return `The running policy, affinity, keeps every conversation and every shared first segment where it was first placed, whatever that card holds; ${instead}`;
    default:
      return `The running policy, ${policy}, ignores where prefixes are cached, so the cards end up holding the same conversations; ${instead}`;
  }
}

export class CapacityWatch {
  private readonly episodes = new Map<string, number>();
  /** Warnings issued per replica (the metric counts them). */
  readonly warnings = new Map<string, number>();
  readings: CapacityReading[] = [];
  fleet: FleetCapacity = { workingSetTokens: 0, kvTokens: 0 };

  /** `policy`: the running routing policy's name (read at each update: a reload may change it). */
  constructor(
    private readonly log: Log,
    private readonly policy: () => string = () => "hybrid",
  ) {}

  /**
   * Update from the working set in characters (prefix index, within the window): per
   * replica, and for the fleet with each prefix once. Characters become tokens with each
   * replica's calibrated characters per token; for the fleet, with the ratio of what the
   * replicas hold (their characters over their tokens), so a replica that holds nothing
   * does not sway it, and distinct prefixes count exactly the sum of the per-replica figures.
   */
  update(
    replicas: readonly Replica[],
    workingSet: { perReplica: ReadonlyMap<string, number>; fleet: number },
    now: number,
    /** Conversations (prompt tips) each replica served within the window: a slotted engine's form of the wall. */
    conversations: (replica: string) => number = () => 0,
  ): CapacityReading[] {
    const kvOf = (r: Replica) => r.kvBelief ?? r.startingKvTokens() ?? 0;
    const budgeted = replicas.filter((r) => kvOf(r) > 0);
    const tokensOf = (r: Replica) => (workingSet.perReplica.get(r.name) ?? 0) / r.charsPerToken;
    let heldChars = 0;
    let heldTokens = 0;
    for (const r of replicas) {
      heldChars += workingSet.perReplica.get(r.name) ?? 0;
      heldTokens += tokensOf(r);
    }
    const fleetCpt = heldTokens > 0 ? heldChars / heldTokens : DEFAULT_CHARS_PER_TOKEN;
    this.fleet = {
      // A prefix held twice counts once in workingSet.fleet, so the fleet never exceeds the sum.
      workingSetTokens: Math.round(Math.min(workingSet.fleet / fleetCpt, heldTokens > 0 ? heldTokens : Infinity)),
      kvTokens: budgeted.reduce((s, r) => s + kvOf(r), 0),
    };
    const fleetFits = this.fleet.workingSetTokens <= this.fleet.kvTokens;
    const fmt = (n: number) => n.toLocaleString("en-US");
    const levers = `${CAPACITY_LEVERS[0]!.toUpperCase()}${CAPACITY_LEVERS.slice(1)}.`;
    const advice = fleetFits
      ? `The fleet's distinct working set (~${fmt(this.fleet.workingSetTokens)} of ${fmt(this.fleet.kvTokens)} KV tokens) fits, so the cards are unevenly loaded or hold the same prefixes twice. ${placementAdvice(this.policy())} If it lasts: ${CAPACITY_LEVERS}.`
      : `The fleet's distinct working set (~${fmt(this.fleet.workingSetTokens)} tokens) exceeds all its KV (${fmt(this.fleet.kvTokens)}): no placement fits it. ${levers}`;
    const verdict = fleetFits ? "the fleet has room, so placement can help" : "the fleet is full too, so routing cannot fix this";

    this.readings = replicas.map((r) => {
      const tokens = Math.round(tokensOf(r));
      const kv = kvOf(r);
      const ratio = kv > 0 ? tokens / kv : 0;
      let since = this.episodes.get(r.name);
      // llama.cpp keeps one prompt per slot (and what its host-RAM cache restores): its KV is
      // known only from the evictions the router saw, and its wall is conversations, not tokens.
      const slots = r.slots;
      const source = r.config.kv_tokens > 0 && kv === r.config.kv_tokens ? "kv_tokens" : slots ? "the KV its evictions show" : r.facts?.capacity && kv === r.facts.capacity.kvTokens ? "the engine's KV" : "the KV its evictions show";
      const finding = slots
        ? `${conversations(r.name)} conversations active on ${slots} slots (~${fmt(tokens)} tokens, ${Math.round(ratio * 100)}% of ${source}, ~${fmt(kv)}): llama.cpp keeps one prompt per slot and its RAM prompt cache did not restore them; ${verdict}`
        : `working set ~${fmt(tokens)} tokens, ${Math.round(ratio * 100)}% of ${source} ${fmt(kv)}: the engine evicts and re-prefills; ${verdict}`;
      const slotAdvice = slots
        ? ` On llama.cpp: start it with --cache-ram large enough for the conversations (it restores an evicted prompt instead of prefilling it again; 0 turns it off), or more --parallel slots (they split --ctx-size between them).`
        : "";
      if (kv > 0 && since === undefined && ratio > 1) {
        since = now;
        this.episodes.set(r.name, now);
        this.warnings.set(r.name, (this.warnings.get(r.name) ?? 0) + 1);
        this.log.warn(`capacity: ${r.name} ${finding}`, {
          replica: r.name,
          working_set_tokens: tokens,
          kv_tokens: kv,
          fleet_working_set_tokens: this.fleet.workingSetTokens,
          fleet_kv_tokens: this.fleet.kvTokens,
          advice: advice + slotAdvice,
        });
      } else if (since !== undefined && ratio < CLEAR_RATIO) {
        this.episodes.delete(r.name);
        since = undefined;
        this.log.info(`capacity: ${r.name} back under its KV budget`, { replica: r.name, working_set_tokens: tokens, kv_tokens: kv });
      }
      return {
        replica: r.name,
        workingSetTokens: tokens,
        kvTokens: kv,
        ratio,
        over: since !== undefined,
        ...(since === undefined ? {} : { since, finding, advice: advice + slotAdvice }),
      };
    });
    return this.readings;
  }

  /** Forget a replica that left the fleet. */
  drop(name: string): void {
    this.episodes.delete(name);
  }
}
