/**
 * The other instances' load merged into what the policies see: summed over live peers,
 * without counting the engine's own queue twice, and gone when a peer stops reporting.
 */
import { describe, expect, it } from "bun:test";
import type { LoadMessage } from "../../src/cluster/codec.ts";
import { mergeLoad, PeerTable, type LocalLoad } from "../../src/cluster/load.ts";
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
const local = (over: Partial<LocalLoad> = {}): LocalLoad => ({ queuedTokens: 1000, pending: 1, engineWaiting: 0, rateMeasured: true, ...over });
const msg = (i: string, r: LoadMessage["r"], extra: Partial<LoadMessage> = {}): LoadMessage => ({ v: 1, i, n: `router-${i}`, at: 0, applied: "0-0", lag: 0, r, ...extra });

describe("PeerTable", () => {
  it("sums live peers per replica; ignores its own reports; the oldest pending commit wins", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("me", { gpu0: [9, 9, 9, 9, 0] }), 0);
    t.update(msg("b", { gpu0: [2, 3000, 1, 500, 0], gpu1: [1, 10, 1, 700, 0] }), 0);
    t.update(msg("c", { gpu0: [1, 500, 1, 400, 0] }), 100);
    expect(t.remote("gpu0", 200)).toEqual({ inflight: 3, queuedTokens: 3500, pending: 2, oldestCommit: 400, rates: [] });
    expect(t.remote("gpu1", 200)).toEqual({ inflight: 1, queuedTokens: 10, pending: 1, oldestCommit: 700, rates: [] });
    expect(t.remote("gpu2", 200)).toBeUndefined();
    expect(t.list(200).map((p) => p.name)).toEqual(["router-b", "router-c"]);
  });

  it("a newer report replaces the older one (absolute figures, no deltas)", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("b", { gpu0: [5, 5000, 5, 1, 0] }), 0);
    t.update(msg("b", { gpu0: [0, 0, 0, 0, 0] }), 10);
    expect(t.remote("gpu0", 20)).toEqual({ inflight: 0, queuedTokens: 0, pending: 0, rates: [] });
  });

  it("a commit applied before its sender's next report counts as still prefilling until that report", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("b", { gpu0: [0, 0, 0, 0, 0] }, { at: 100 }), 100);
    t.noteCommit("b", "gpu0", 150, 151);
    t.noteCommit("b", "gpu0", 160, 161);
    t.noteCommit("me", "gpu0", 10, 161);
    expect(t.remote("gpu0", 170)).toMatchObject({ pending: 1, oldestCommit: 150 });
    // a report sent before the commit does not cover it; one sent after does
    t.update(msg("b", { gpu0: [1, 500, 1, 150, 0] }, { at: 140 }), 171);
    expect(t.remote("gpu0", 172)).toMatchObject({ pending: 2, oldestCommit: 150 });
    t.update(msg("b", { gpu0: [0, 0, 0, 0, 0] }, { at: 200 }), 201);
    expect(t.remote("gpu0", 202)).toEqual({ inflight: 0, queuedTokens: 0, pending: 0, rates: [] });
    // an instance not heard from yet, and a commit whose report never comes: expires with the TTL
    t.noteCommit("new", "gpu1", 300, 300);
    expect(t.remote("gpu1", 301)).toMatchObject({ pending: 1, oldestCommit: 300 });
    t.expire(3301);
    expect(t.remote("gpu1", 3302)).toBeUndefined();
  });

  it("a peer silent past the TTL stops counting, and expire names it; a goodbye drops it at once", () => {
    const t = new PeerTable("me", 3000);
    t.update(msg("dead", { gpu0: [4, 4000, 4, 1, 0] }), 0);
    t.update(msg("alive", { gpu0: [1, 100, 1, 1, 0] }), 2500);
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
    expect(mergeLoad(v, local(), undefined)).toBe(v);
  });

  it("adds the others' in-flight requests and queued prefill; keeps the oldest pending commit", () => {
    const merged = mergeLoad(view({ pendingSince: 50 }), local(), { inflight: 3, queuedTokens: 6000, pending: 2, oldestCommit: 20, rates: [] });
    expect(merged).toMatchObject({ inflight: 4, load: 4, queuedTokens: 7000, pendingSince: 20 });
    expect(mergeLoad(view(), local(), { inflight: 1, queuedTokens: 1, pending: 1, rates: [] }).pendingSince).toBeUndefined();
    expect(mergeLoad(view(), local(), { inflight: 1, queuedTokens: 1, pending: 1, oldestCommit: 9, rates: [] }).pendingSince).toBe(9);
  });

  it("the engine's waiting requests that another instance sent are not priced twice", () => {
    // The engine reports 5 waiting; this instance sent 1 (1000 tokens) and priced the other 4
    // at 2000 each (queuedTokens 9000). Another instance reports 3 of them, 6000 tokens:
    // only 1 stays unexplained, so 1000 + 6000 + 1 × 2000.
    const merged = mergeLoad(view({ queuedTokens: 9000 }), local({ engineWaiting: 5 }), { inflight: 3, queuedTokens: 6000, pending: 3, rates: [] });
    expect(merged.queuedTokens).toBe(9000);
    // The others explain more than the engine reports: nothing is priced for the engine's queue.
    const more = mergeLoad(view({ queuedTokens: 9000 }), local({ engineWaiting: 5 }), { inflight: 6, queuedTokens: 12000, pending: 6, rates: [] });
    expect(more.queuedTokens).toBe(13000);
  });

  it("the prefill rate is the mean of every instance's measurement; an unmeasured one takes the others'", () => {
    const remote = { inflight: 0, queuedTokens: 0, pending: 0, rates: [30_000, 50_000] };
    expect(mergeLoad(view({ prefillRate: 40_000 }), local(), remote).prefillRate).toBe(40_000);
    expect(mergeLoad(view({ prefillRate: 4_000 }), local({ rateMeasured: false }), remote).prefillRate).toBe(40_000);
    expect(mergeLoad(view({ prefillRate: 4_000 }), local({ rateMeasured: false }), { ...remote, rates: [] }).prefillRate).toBe(4_000);
  });
});
