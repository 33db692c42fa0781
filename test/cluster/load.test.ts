/**
 * The other instances' load merged into what the policies see: summed over live peers,
 * without counting the engine's own queue twice, and gone when a peer stops reporting.
 */
import { describe, expect, it } from "bun:test";
import type { LoadMessage } from "../../src/cluster/codec.ts";
import { mergeLoad, PeerTable } from "../../src/cluster/load.ts";
import type { FleetView } from "../../src/route/router.ts";

const view = (over: Partial<FleetView> = {}): FleetView => ({
  name: "gpu0",
  healthy: true,
  inflight: 1,
  load: 1,
  queuedTokens: 1000,
  prefillRate: 4000,
  charsPerToken: 4,
  budgetChars: Infinity,
  ...over,
});
const msg = (i: string, r: LoadMessage["r"], extra: Partial<LoadMessage> = {}): LoadMessage => ({ v: 1, i, n: `router-${i}`, at: 0, applied: "0-0", lag: 0, r, ...extra });

describe("PeerTable", () => {
  it("sums live peers per replica; ignores its own reports; the oldest pending commit wins", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("me", { gpu0: [9, 9, 9, 9] }), 0);
    t.update(msg("b", { gpu0: [2, 3000, 1, 500], gpu1: [1, 10, 1, 700] }), 0);
    t.update(msg("c", { gpu0: [1, 500, 1, 400] }), 100);
    expect(t.remote("gpu0", 200)).toEqual({ inflight: 3, queuedTokens: 3500, pending: 2, oldestCommit: 400 });
    expect(t.remote("gpu1", 200)).toEqual({ inflight: 1, queuedTokens: 10, pending: 1, oldestCommit: 700 });
    expect(t.remote("gpu2", 200)).toBeUndefined();
    expect(t.list(200).map((p) => p.name)).toEqual(["router-b", "router-c"]);
  });

  it("a newer report replaces the older one (absolute figures, no deltas)", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("b", { gpu0: [5, 5000, 5, 1] }), 0);
    t.update(msg("b", { gpu0: [0, 0, 0, 0] }), 10);
    expect(t.remote("gpu0", 20)).toEqual({ inflight: 0, queuedTokens: 0, pending: 0 });
  });

  it("a peer silent past the TTL stops counting, and expire names it; a goodbye drops it at once", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("dead", { gpu0: [4, 4000, 4, 1] }), 0);
    t.update(msg("alive", { gpu0: [1, 100, 1, 1] }), 2500);
    expect(t.remote("gpu0", 3001)).toMatchObject({ inflight: 1 });
    expect(t.expire(3001)).toEqual(["router-dead"]);
    t.update(msg("alive", {}, { bye: true }), 3002);
    expect(t.remote("gpu0", 3003)).toBeUndefined();
    expect(t.list(3003)).toEqual([]);
  });
});

describe("mergeLoad", () => {
  it("nothing from others: the view as it is", () => {
    const v = view({ pendingSince: 5 });
    expect(mergeLoad(v, { queuedTokens: 1000, pending: 1, engineWaiting: 0 }, undefined)).toBe(v);
  });

  it("adds the others' in-flight requests and queued prefill; keeps the oldest pending commit", () => {
    const merged = mergeLoad(view({ pendingSince: 50 }), { queuedTokens: 1000, pending: 1, engineWaiting: 0 }, { inflight: 3, queuedTokens: 6000, pending: 2, oldestCommit: 20 });
    expect(merged).toMatchObject({ inflight: 4, load: 4, queuedTokens: 7000, pendingSince: 20 });
    expect(mergeLoad(view(), { queuedTokens: 1000, pending: 1, engineWaiting: 0 }, { inflight: 1, queuedTokens: 1, pending: 1 }).pendingSince).toBeUndefined();
    expect(mergeLoad(view(), { queuedTokens: 1000, pending: 1, engineWaiting: 0 }, { inflight: 1, queuedTokens: 1, pending: 1, oldestCommit: 9 }).pendingSince).toBe(9);
  });

  it("the engine's waiting requests that another instance sent are not priced twice", () => {
    // The engine reports 5 waiting; this instance sent 1 (1000 tokens) and priced the other 4
    // at 2000 each (queuedTokens 9000). Another instance reports 3 of them, 6000 tokens:
    // only 1 stays unexplained, so 1000 + 6000 + 1 × 2000.
    const merged = mergeLoad(view({ queuedTokens: 9000 }), { queuedTokens: 1000, pending: 1, engineWaiting: 5 }, { inflight: 3, queuedTokens: 6000, pending: 3 });
    expect(merged.queuedTokens).toBe(9000);
    // The others explain more than the engine reports: nothing is priced for the engine's queue.
    const more = mergeLoad(view({ queuedTokens: 9000 }), { queuedTokens: 1000, pending: 1, engineWaiting: 5 }, { inflight: 6, queuedTokens: 12000, pending: 6 });
    expect(more.queuedTokens).toBe(13000);
  });
});
