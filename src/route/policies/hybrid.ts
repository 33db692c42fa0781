/**
 * hybrid (default) — route by request shape; decide the cases in between by estimated time
 * to first token. A continuation goes to the replica holding its conversation (pin) unless
 * that card no longer keeps it (room) or its turns wait at the card's KV wall for longer than
 * moving costs (wall); a one-shot whose long prefix is held somewhere goes there (cache); a
 * session key is a soft hint (session); anything else is spread by the counter, or to an idle
 * card while the counter's is busy (spread). A prefix every live card holds decides nothing.
 * Then every live replica is priced in time to first token, and the rule's pick stands unless
 * another is faster by `margin`, `min_gain_tokens` and the prefix it would copy (cost). The
 * rules, their measurements and prior art: docs/routing.md#how-hybrid-decides-the-cost-model.
 */
import { DEFAULT_HYBRID, type HybridOptions } from "../options.ts";
import { bestMatch, live, prefillAhead, type Decision, type Policy, type PolicyContext, type ReplicaView } from "../policy.ts";
import type { PrefixMatch } from "../prefix.ts";

export function createHybrid(options: Partial<HybridOptions> = {}): Policy {
  const o: HybridOptions = { ...DEFAULT_HYBRID, ...options };
  return {
    name: "hybrid",
    waitsForSlot: true,
    choose(_input, replicas, ctx) {
      const up = live(replicas);
      if (up.length === 0) return undefined;
      const held = new Map(ctx.matches().map((m) => [m.replica, m.chars]));
      const missing = (r: ReplicaView) => Math.max(0, ctx.totalChars - (held.get(r.name) ?? 0));
      // Slot waits (an engine whose slots are all taken) price only a one-shot that a held
      // prefix pulls to a card (cache): it does not come back. A conversation's next turns
      // follow it wherever it goes, so a move for one turn's wait is paid on every turn after;
      // a cold spread placed by its own wait piles onto the cards whose conversations' next
      // turns queue behind it, where the counter keeps the cards' backlogs even.
      const estimate = (r: ReplicaView, slotWait = false) => {
        const newChars = missing(r);
        // What this request would push out of a full card that one cache of the fleet's KV
        // would keep is prefilled again later: priced now, so a prefix is not copied onto a
        // card that has no room for it while another card holds older, colder KV.
        const evicted = ctx.displaces(r.name, newChars);
        const work = (newChars + evicted) / r.charsPerToken;
        // On an engine whose slots are all taken (llama.cpp's, Ollama's one) it first waits for
        // a slot — what is left of the generations ahead, which no prefill queue shows.
        const prefill = (prefillAhead(r, work) + work) / r.prefillRate;
        return slotWait && r.slotWait ? Math.max(prefill, r.slotWait() + work / r.prefillRate) : prefill;
      };

      const pick = rulePick(up, ctx, o, held, estimate, missing);
      // Priced over the turns to come, not this one: the one re-prefill is the point.
      if (pick.reason === "room" || pick.reason === "wall") return pick;
      const price = (r: ReplicaView) => estimate(r, pick.reason === "cache");
      const picked = up.find((r) => r.name === pick.replica)!;
      const pickCost = price(picked);

      // Only to a card running no more requests than the pick: the price counts the prefills
      // queued there, not the decodes running there, which share every engine step (vLLM
      // schedules its running requests first in each step's token budget:
      // vllm/v1/core/sched/scheduler.py `Scheduler.schedule`) and slow its prefills.
      let best = picked;
      let bestCost = pickCost;
      for (const r of up) {
        const cost = price(r);
        if (cost < bestCost && r.inflight <= picked.inflight) {
          best = r;
          bestCost = cost;
        }
      }
      // Leaving a replica that holds this request's prefix copies what the new card lacks of
      // it: the fleet prefills that again and holds it twice. Worth it only when the holder's
      // queue costs more than that prefill on top of the usual margin. What both hold (a
      // system prompt every card has served) copies nothing.
      const lacks = Math.max(0, (held.get(picked.name) ?? 0) - (held.get(best.name) ?? 0));
      const copied = pick.reason === "session" ? 0 : lacks / picked.charsPerToken / picked.prefillRate;
      const gain = pickCost - bestCost;
      if (best !== picked && gain > Math.max(o.margin * pickCost, copied) && gain * picked.prefillRate >= o.min_gain_tokens) {
        return { replica: best.name, reason: "cost", ...(pick.usedCounter ? { usedCounter: true } : {}) };
      }
      return pick;
    },
  };
}

function rulePick(
  up: ReplicaView[],
  ctx: PolicyContext,
  o: HybridOptions,
  held: ReadonlyMap<string, number>,
  estimate: (r: ReplicaView) => number,
  missing: (r: ReplicaView) => number,
): Decision {
  // A prefix every live card holds (a preamble every request starts with) decides nothing:
  // it is cached wherever the request goes. Only what some cards hold and others do not does.
  const common = commonHeld(up, held);
  const found = bestMatch(up, ctx);
  const owner = found && found.match.chars > common ? found : undefined;
  if (owner && ctx.continuation) return room(owner.replica, owner.match, up, ctx, o) ?? wall(owner.replica, up, ctx, estimate) ?? { replica: owner.replica.name, reason: "pin" };
  const own = owner ? owner.match.chars - common : 0;
  const long = owner && own / owner.replica.charsPerToken >= o.min_gain_tokens && own / ctx.totalChars >= o.min_match_ratio;
  if (owner && long) {
    // Held on several cards (a document served twice): the one that answers first.
    let choice = owner.replica;
    for (const m of ctx.matches()) {
      const r = up.find((x) => x.name === m.replica);
      if (r && r !== choice && m.chars >= owner.match.chars && estimate(r) < estimate(choice)) choice = r;
    }
    return { replica: choice.name, reason: "cache" };
  }
  const session = ctx.sessionReplica && up.find((r) => r.name === ctx.sessionReplica);
  if (session) return { replica: session.name, reason: "session" };
  return coldSpread(up, ctx, missing);
}

/** Characters of this request's prompt that every live card holds (0 when one holds none). */
function commonHeld(up: readonly ReplicaView[], held: ReadonlyMap<string, number>): number {
  let least = Infinity;
  for (const r of up) least = Math.min(least, held.get(r.name) ?? 0);
  return up.length > 1 && Number.isFinite(least) ? least : 0;
}

/**
 * A conversation whose card no longer keeps it between turns — what the card was sent since
 * the conversation's last turn there, plus the conversation, exceeds its KV — is re-prefilled
 * in part on every turn, and pushes the conversations it shares the card with out in turn:
 * an LRU cache over a cycle longer than itself. Moved to a card that was sent little enough
 * over the same time to keep it (the one sent least), it is prefilled once and hits after.
 * Checked only while what the owner was sent within the capacity window is over its KV, and
 * only for a loss of at least `min_gain_tokens` (what it was sent of the conversation before,
 * not this turn's new part, decides it: the index believes held only what fits); a card whose
 * KV is not known is no target.
 */
function room(owner: ReplicaView, held: PrefixMatch, up: ReplicaView[], ctx: PolicyContext, o: HybridOptions): Decision | undefined {
  if (!(owner.recentChars > owner.budgetChars)) return undefined;
  const lost = ctx.sentSince(owner.name, held.lastUsed, owner.budgetChars) + ctx.remembered(owner.name) - owner.budgetChars;
  if (lost / owner.charsPerToken < o.min_gain_tokens) return undefined;
  let best: ReplicaView | undefined;
  let bestSent = Infinity;
  for (const r of up) {
    if (r === owner || !Number.isFinite(r.budgetChars)) continue;
    const sent = ctx.sentSince(r.name, held.lastUsed, r.budgetChars);
    if (sent + ctx.totalChars <= r.budgetChars && sent < bestSent) {
      best = r;
      bestSent = sent;
    }
  }
  return best && { replica: best.name, reason: "room" };
}

/**
 * Conversations whose turns do not fit a card's KV together (its KV wall: llama.cpp's unified
 * KV turned requests away as full) take turns there: each turn waits for the others' whole
 * turns, on every turn to come, while another card may sit idle — on llama.cpp's `capacity`
 * workload two families took turns on one card while the third's card idled
 * (docs/routing.md, `wall`). Moving one costs its whole prefill once; staying
 * costs a wait on each turn, and how many turns are to come is not known. So, as a ski rental
 * buys once the rent paid equals the price: a continuation that would wait at its owner's wall
 * moves once what requests have waited at that wall (within the capacity window, since it was
 * set or last paid by such a move) reaches what the move costs — its estimated time to first
 * token on a card where it fits beside what runs there: below that card's own wall (a request
 * alone goes, but the card's conversations would then take turns with it), or below the
 * owner's where nothing there says (cards of one pool serve one model), within its KV where
 * that is known, and whose own wall has cost less waiting than the owner's. Of those, the one
 * with the fewest tokens in flight. A wall that has cost no waits moves nothing.
 */
function wall(owner: ReplicaView, up: ReplicaView[], ctx: PolicyContext, estimate: (r: ReplicaView) => number): Decision | undefined {
  const w = owner.wall;
  const busy = (r: ReplicaView) => r.inflightTokens ?? 0;
  if (!w || !(busy(owner) > 0 && busy(owner) + ctx.totalChars / owner.charsPerToken >= w.admitsBelow)) return undefined;
  let best: ReplicaView | undefined;
  for (const r of up) {
    if (r === owner || ctx.totalChars > r.budgetChars || (r.wall && r.wall.waitedSeconds >= w.waitedSeconds)) continue;
    const below = r.wall?.admitsBelow ?? (busy(r) === 0 && r.inflight === 0 ? Infinity : w.admitsBelow);
    const fits = busy(r) + ctx.totalChars / r.charsPerToken < below;
    if (fits && w.waitedSeconds >= estimate(r) && (!best || busy(r) < busy(best))) best = r;
  }
  return best && { replica: best.name, reason: "wall", from: owner.name };
}

/**
 * The counter over the cards with KV room for this prompt — where it pushes out nothing one
 * cache of the fleet's KV would keep; when none has room, the card where it pushes out least, and of those the one sent
 * least for its KV within the window (whose cache turns over slowest).
 *
 * When the card so chosen runs requests and another runs none, the idle one takes it (of
 * several, the one that pushes out least, then the counter's order): a prefill waits for those
 * queued ahead and shares each engine step with the decodes running there (vLLM schedules
 * running requests first in every step's budget: vllm/v1/core/sched/scheduler.py
 * `Scheduler.schedule`; llama-server adds every generating slot's token to the batch before
 * any prompt's: tools/server/server-context.cpp `update_slots`), a certain wait for this
 * request, where what it pushes out costs only if asked for again. Only an idle card takes
 * it, so the counter still keeps the backlogs even whenever every card is busy.
 */
function coldSpread(up: ReplicaView[], ctx: PolicyContext, missing: (r: ReplicaView) => number): Decision {
  const lost = new Map(up.map((r) => [r, ctx.displaces(r.name, missing(r))]));
  const roomy = up.filter((r) => lost.get(r) === 0);
  const picked = roomy.length > 0 ? { replica: roomy[ctx.counter % roomy.length]!, usedCounter: true } : { replica: leastLost(up, lost) };
  const idle = (r: ReplicaView) => r.inflight === 0 && r.queuedTokens === 0;
  let choice = picked.replica;
  if (!idle(choice)) {
    for (let i = 0; i < up.length; i++) {
      const r = up[(ctx.counter + i) % up.length]!;
      if (idle(r) && (choice === picked.replica || lost.get(r)! < lost.get(choice)!)) choice = r;
    }
  }
  return { replica: choice.name, reason: "spread", ...(picked.usedCounter ? { usedCounter: true } : {}) };
}

/** The card where a cold prompt pushes out least, and of those the one sent least for its KV within the window. */
function leastLost(up: ReplicaView[], lost: ReadonlyMap<ReplicaView, number>): ReplicaView {
  const demand = (r: ReplicaView) => r.recentChars / r.budgetChars;
  let least = up[0]!;
  for (const r of up) {
    const d = lost.get(r)! - lost.get(least)!;
    if (d < 0 || (d === 0 && demand(r) < demand(least))) least = r;
  }
  return least;
}
