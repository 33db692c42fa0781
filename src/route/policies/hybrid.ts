/**
 * hybrid (default) — route by request shape; decide the cases in between by estimated time
 * to first token.
 *
 * The rule at heart is the one the project started from (measured on two RTX 3090s): a continuation goes to the replica holding its
 * conversation (pin), unless that card no longer keeps it between turns and another would
 * (room: see `room`), or its turns wait at that card's KV wall for longer than moving would
 * cost (wall: see `wall`); a cold one-shot is spread by the counter (spread), so a burst uses
 * every card. In between: a one-shot whose long prefix — a shared document, a long system
 * prompt: at least `min_gain_tokens` and `min_match_ratio` of its prompt — is held somewhere
 * goes there (cache); a request whose session key was served
 * somewhere and that nothing else claims goes to its session's replica (session). A cold
 * one-shot is spread over the cards with room for it in their KV when some have none — room
 * that it takes without pushing out prefix KV worth keeping (the card where it pushes out
 * least, when none has).
 *
 * Then every live replica is priced: estimated TTFT = (the prefill it waits for there + this
 * request's tokens not cached there + the prefix KV worth keeping — reused, or a
 * conversation's — they would push out of a full card, oldest first, which is prefilled again
 * later) ÷ that replica's measured prefill rate — where
 * what it waits for is priced as the engine schedules prefills (an engine that prefills
 * several requests at once shares its compute, so a short cached turn waits for only as
 * much of each other prefill as its own size: `prefillAhead`; on an engine with a fixed number
 * of slots, all taken, a document's holder is priced with the wait for a slot: what is left of
 * the generations ahead). The
 * rule's pick stands unless another replica is faster by more than `margin` of its estimate,
 * by `min_gain_tokens` of prefill, and — when the pick holds the request's prefix — by more
 * than prefilling that prefix again, since leaving copies it (cost): a hot card is relieved,
 * a conversation leaves its owner only when the owner's queue costs more than re-prefilling
 * it elsewhere, a hot document is copied only when its holder is far behind, and a burst
 * spreads even when it shares a prefix.
 *
 * What it learns from: Dynamo prices prefill load against overlap credit but has no notion
 * of a conversation or of a card's KV room; SGLang's gateway follows a match above a ratio,
 * else the smallest tree, with a load-count imbalance guard that ignores what the load
 * costs; llm-d spreads cold requests by a no-hit LRU. Here the guard is in seconds of
 * prefill, the cold spread is that rule's counter, and KV room decides cold placements only
 * when a card is actually full.
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
      // follow it wherever it goes, so a move for one turn's wait is paid on every turn after
      // — on Ollama two of three agents left a card busy with the third's first prefill and
      // all three then queued on the other (warm turns 3.2 → 6.9 s, 2 runs); and a cold spread
      // placed by its own wait piles onto the cards whose conversations' next turns queue
      // behind it, where the counter keeps the cards' backlogs even. (The rule's choice among a
      // document's several holders, made before, is by prefill alone; the pricing after it
      // then moves the request off a holder whose slots are taken for too long.)
      const estimate = (r: ReplicaView, slotWait = false) => {
        const newChars = missing(r);
        // Prefix KV worth keeping that this request would push out of a full card is
        // prefilled again later: priced now, so a prefix is not copied onto a card that has no
        // room for it. A one-shot's own text idle longer than conversations wait between turns
        // is not worth keeping: a card full of it has room.
        const evicted = ctx.displaces(r.name, newChars);
        const work = (newChars + evicted) / r.charsPerToken;
        // On an engine whose slots are all taken (llama.cpp's, Ollama's one) it first waits for
        // a slot — what is left of the generations ahead, which no prefill queue shows.
        const prefill = (prefillAhead(r, work) + work) / r.prefillRate;
        return slotWait && r.slotWait ? Math.max(prefill, r.slotWait() + work / r.prefillRate) : prefill;
      };

      const pick = rulePick(up, ctx, o, estimate, missing);
      // Priced over the turns to come, not this one: the one re-prefill is the point.
      if (pick.reason === "room" || pick.reason === "wall") return pick;
      const price = (r: ReplicaView) => estimate(r, pick.reason === "cache");
      const picked = up.find((r) => r.name === pick.replica)!;
      const pickCost = price(picked);

      let best = picked;
      let bestCost = pickCost;
      for (const r of up) {
        const cost = price(r);
        if (cost < bestCost) {
          best = r;
          bestCost = cost;
        }
      }
      // Leaving a replica that holds this request's prefix copies the prefix: the fleet
      // prefills it again and holds it twice. Worth it only when the holder's queue costs
      // more than that prefill on top of the usual margin.
      const copied = pick.reason === "session" ? 0 : (held.get(picked.name) ?? 0) / picked.charsPerToken / picked.prefillRate;
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
  estimate: (r: ReplicaView) => number,
  missing: (r: ReplicaView) => number,
): Decision {
  const owner = bestMatch(up, ctx);
  if (owner && ctx.continuation) return room(owner.replica, owner.match, up, ctx, o) ?? wall(owner.replica, up, ctx, estimate) ?? { replica: owner.replica.name, reason: "pin" };
  const long = owner && owner.match.chars / owner.replica.charsPerToken >= o.min_gain_tokens && owner.match.chars / ctx.totalChars >= o.min_match_ratio;
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
 * workload two families took turns on one card (5.5–5.9 s a turn) for the last 56 s of a 95 s
 * run while the third's card, its family done, idled (perf/results/
 * bench-llamacpp-20261203T0911-detail.txt). Moving one costs its whole prefill once; staying
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
 * The counter over the cards with KV room for this prompt — where it pushes out nothing worth
 * keeping; when none has room, the card where it pushes out least, and of those the one sent
 * least for its KV within the window (whose cache turns over slowest).
 */
function coldSpread(up: ReplicaView[], ctx: PolicyContext, missing: (r: ReplicaView) => number): Decision {
  const lost = new Map(up.map((r) => [r, ctx.displaces(r.name, missing(r))]));
  const roomy = up.filter((r) => lost.get(r) === 0);
  if (roomy.length > 0) return { replica: roomy[ctx.counter % roomy.length]!.name, reason: "spread", usedCounter: true };
  const demand = (r: ReplicaView) => r.recentChars / r.budgetChars;
  let least = up[0]!;
  for (const r of up) {
    const d = lost.get(r)! - lost.get(least)!;
    if (d < 0 || (d === 0 && demand(r) < demand(least))) least = r;
  }
  return { replica: least.name, reason: "spread" };
}
