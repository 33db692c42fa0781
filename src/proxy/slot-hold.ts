/**
 * Holding a request for a busy slot that keeps its prefix (hybrid's decision carries
 * `busyWith`). llama.cpp keeps one prompt per slot and gives a request an idle slot, never a
 * busy one (server-context.cpp `get_available_slot` skips slots that are processing; the best
 * match among idle ones wins by similarity, else the least recently used, which restores the
 * best match from the RAM prompt cache), so a request whose prefix the chosen card keeps only
 * in a slot another request is using prefills all of it again in another slot. What that
 * cost on the bench, and what the hold won back: docs/routing.md#how-hybrid-decides-the-cost-model
 * ("Waiting for a busy slot").
 */
import type { Replica } from "../fleet/replica.ts";
import type { RouteEstimate } from "../route/router.ts";
import type { InFlight } from "./attempt.ts";

/**
 * Wait for the request in the slot to end when that is expected sooner than the prefill it
 * saves, and at most as long as that prefill — at worst the first token comes twice as late
 * as cold, when that request runs longer than the generations timed here. Another request
 * held for the same slot may take it first: this one then waits for that one, within the same
 * time (`until`, set by the first wait). Returns when the wait ended and until when it may
 * wait in all, or undefined when it did not wait. (llama.cpp itself defers a request that
 * names a busy slot in `id_slot`, in `process_single_task`; but that would change the
 * client's body, and the router does not see which slot holds what. Nor does it see the RAM
 * prompt cache: a copy saved there, since llama.cpp saves every idle slot when a task starts
 * (`--cache-idle-slots`, on by default), makes the wait needless, which the bound keeps below
 * the prefill.)
 */
export async function holdForSlot(
  replica: Replica,
  estimate: RouteEstimate,
  until: number | undefined,
  client: AbortSignal,
  flight: InFlight,
  wallClock: () => number,
): Promise<{ until: number } | undefined> {
  const busy = estimate.busyWith!;
  const started = wallClock();
  const deadline = until ?? started + (estimate.capturedChars / estimate.charsPerToken / replica.prefill.rate) * 1000;
  const left = replica.slotQueue.leftMs(busy, started);
  // Not before a generation was timed here: a burst sharing a prefix would wait for its first
  // request's whole prefill and answer, then go cold anyway. Nor while every slot is taken:
  // the engine queues it itself, and gives it a slot only when one frees — the best match
  // among the idle ones then (process_single_task defers it; a released slot brings the
  // deferred tasks back) — where a request held here would queue behind those sent meanwhile.
  const serving = replica.servingSlots;
  if (flight.cut || left === undefined || !(started + left < deadline) || (serving !== undefined && replica.slotQueue.size >= serving)) return undefined;
  // Its client leaving, or the drain cutting it, ends the wait.
  const stop = new AbortController();
  const onStop = () => stop.abort();
  client.addEventListener("abort", onStop, { once: true });
  flight.onCut(onStop);
  await replica.running.untilEnded(busy, deadline - started, stop.signal);
  client.removeEventListener("abort", onStop);
  flight.onCut(undefined);
  if (until === undefined) replica.stats.holds++;
  replica.stats.heldMs += wallClock() - started;
  return { until: deadline };
}
