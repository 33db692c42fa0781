/**
 * The cluster's wire formats: event batches (the stream), load messages (pub/sub) and the
 * shared snapshot. Round trips, the checks that reject damaged input, and the property that
 * matters to users: an instance that applies another's events routes like it.
 */
import { describe, expect, it } from "bun:test";
import fc from "fast-check";
import { BatchWriter, decodeBatch, decodeLoad, type ClusterEvent, type LoadMessage } from "../../src/cluster/codec.ts";
import { compareIds, isStreamId, streamEntries } from "../../src/cluster/cluster.ts";
import { decodeSnapshot, encodeSnapshot } from "../../src/cluster/snapshot.ts";
import type { PrefixChain } from "../../src/route/chain.ts";
import type { RouterSink } from "../../src/route/router.ts";
import { chat, fleet, router, send } from "../route/_fixtures.ts";

const chainArb = fc.integer({ min: 0, max: 40 }).chain((n) =>
  fc.record({
    lo: fc.array(fc.nat({ max: 0xffffffff }), { minLength: n, maxLength: n }),
    hi: fc.array(fc.nat({ max: 0xffffffff }), { minLength: n, maxLength: n }),
    steps: fc.array(fc.integer({ min: 1, max: 5000 }), { minLength: n, maxLength: n }),
  }).map(({ lo, hi, steps }): PrefixChain => {
    let end = 0;
    return { lo: Uint32Array.from(lo), hi: Uint32Array.from(hi), ends: Uint32Array.from(steps, (s) => (end += s)), length: n };
  }),
);
const name = fc.string({ minLength: 1, maxLength: 40, unit: "grapheme" });
const at = fc.double({ min: 0, max: 4e12, noNaN: true });
const tag = fc.nat({ max: 0xffffffff });
const eventArb: fc.Arbitrary<ClusterEvent> = fc.oneof(
  fc.record({ kind: fc.constant("commit" as const), at, replica: name, commit: tag, continued: fc.boolean(), chains: fc.array(chainArb, { maxLength: 3 }) }),
  fc.record({ kind: fc.constant("commit" as const), at, replica: name, commit: tag, continued: fc.boolean(), session: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), chains: fc.array(chainArb, { maxLength: 2 }) }),
  fc.record({ kind: fc.constant("forget" as const), at, replica: name }),
  fc.record({ kind: fc.constant("forget-used-by" as const), at, replica: name, usedBy: at }),
  fc.record({ kind: fc.constant("response" as const), at, replica: name, id: name }),
  // On the wire a retraction carries only the created links: what decodes is those links, all created.
  fc
    .record({ kind: fc.constant("retract" as const), at, replica: name, commit: tag, chains: fc.array(chainArb, { maxLength: 2 }) })
    .map((e) => ({ ...e, chains: e.chains.map((c) => ({ ...c, ends: new Uint32Array(c.length) })), created: e.chains.map((c) => c.length) })),
);

/** Typed arrays compared as plain arrays. */
const plain = (events: readonly ClusterEvent[]) =>
  events.map((e) => (e.kind === "commit" || e.kind === "retract" ? { ...e, chains: e.chains.map((c) => ({ lo: [...c.lo], hi: [...c.hi], ends: [...c.ends], length: c.length })) } : e));

describe("event batches", () => {
  it("any sequence of events comes back as it went, with when the batch was taken (property)", () => {
    fc.assert(
      fc.property(fc.array(eventArb, { minLength: 1, maxLength: 20 }), at, (events, sentAt) => {
        const w = new BatchWriter();
        for (const e of events) w.add(e);
        expect(w.events).toBe(events.length);
        const batch = decodeBatch(w.take(sentAt));
        expect(batch.sentAt).toBe(sentAt);
        expect(plain(batch.events)).toEqual(plain(events));
        expect(w.empty).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("a writer is reusable: each take is one batch", () => {
    const w = new BatchWriter();
    w.add({ kind: "forget", at: 1, replica: "gpu0" });
    const first = w.take(10);
    w.add({ kind: "response", at: 2, replica: "gpu1", id: "resp_1" });
    expect(decodeBatch(first)).toEqual({ sentAt: 10, events: [{ kind: "forget", at: 1, replica: "gpu0" }] });
    expect(decodeBatch(w.take(20))).toEqual({ sentAt: 20, events: [{ kind: "response", at: 2, replica: "gpu1", id: "resp_1" }] });
  });

  it("a 100k-token conversation's chain (a few hundred links) fits in one batch", () => {
    const n = 500;
    const chain: PrefixChain = { lo: new Uint32Array(n).fill(7), hi: new Uint32Array(n).fill(9), ends: Uint32Array.from({ length: n }, (_, i) => (i + 1) * 1024), length: n };
    const w = new BatchWriter();
    w.add({ kind: "commit", at: 5, replica: "gpu0", commit: 1, continued: true, chains: [chain] });
    const bytes = w.take(6);
    // format, when taken; kind, at, replica; flags, tag, chain count; chain length, 3 words per link
    expect(bytes.byteLength).toBe(1 + 8 + (1 + 8 + 4 + 4) + (1 + 4 + 4) + 4 + 12 * n);
    expect(plain(decodeBatch(bytes).events)[0]).toMatchObject({ chains: [{ length: n }] });
  });

  it("a commit of 65,536 chains (a completions batch of 65,536 prompts) comes back whole", () => {
    const n = 65_536;
    const chains = Array.from({ length: n }, (_, i): PrefixChain => ({ lo: Uint32Array.of(i), hi: Uint32Array.of(i ^ 0xffff), ends: Uint32Array.of(100), length: 1 }));
    const w = new BatchWriter();
    w.add({ kind: "commit", at: 5, replica: "gpu0", commit: 1, continued: false, chains });
    w.add({ kind: "retract", at: 6, replica: "gpu0", commit: 1, chains, created: chains.map(() => 1) });
    const [commit, retract] = decodeBatch(w.take(7)).events;
    expect(commit).toMatchObject({ kind: "commit" });
    expect(retract).toMatchObject({ kind: "retract" });
    if (commit?.kind !== "commit" || retract?.kind !== "retract") return;
    expect(commit.chains).toHaveLength(n);
    expect(retract.chains).toHaveLength(n);
    expect([commit.chains[n - 1]!.lo[0], commit.chains[n - 1]!.hi[0]]).toEqual([n - 1, (n - 1) ^ 0xffff]);
  });

  it("an event that fails part-way is taken back whole: the events around it stay readable", () => {
    const w = new BatchWriter();
    const chain = chainOf(3);
    const broken = {
      ...chain,
      get hi(): Uint32Array {
        throw new Error("no hashes");
      },
    };
    w.add({ kind: "forget", at: 1, replica: "gpu0" });
    expect(() => w.add({ kind: "commit", at: 2, replica: "gpu0", commit: 1, continued: false, chains: [chain, broken] })).toThrow("no hashes");
    w.add({ kind: "response", at: 3, replica: "gpu1", id: "resp_1" });
    expect(w.events).toBe(2);
    expect(decodeBatch(w.take(4)).events).toEqual([
      { kind: "forget", at: 1, replica: "gpu0" },
      { kind: "response", at: 3, replica: "gpu1", id: "resp_1" },
    ]);
    // the first event of a batch too (the batch's format byte goes with it)
    expect(() => w.add({ kind: "commit", at: 2, replica: "gpu0", commit: 1, continued: false, chains: [broken] })).toThrow("no hashes");
    expect(w.empty).toBe(true);
    expect(w.take(5).byteLength).toBe(0);
  });

  it.each([
    ["another format", () => Uint8Array.of(9, 2), /events in batch format 9, and this router reads format 2: a newer llmroute wrote them/],
    ["the previous format", () => Uint8Array.of(1, 2), /format 1, and this router reads format 2: an older llmroute/],
    ["an unknown kind", () => Uint8Array.of(2, ...new Uint8Array(8), 77, ...new Uint8Array(8), 0, 0, 0, 0), /unknown event kind 77/],
    ["a truncated commit", () => batchOf({ kind: "commit", at: 1, replica: "g", commit: 1, continued: false, chains: [chainOf(3)] }).slice(0, -5), /truncated/],
    ["a non-finite time", () => { const b = batchOf({ kind: "forget", at: 1, replica: "g" }); new DataView(b.buffer).setFloat64(10, NaN, true); return b; }, /non-finite/],
    ["a non-finite time taken", () => { const b = batchOf({ kind: "forget", at: 1, replica: "g" }); new DataView(b.buffer).setFloat64(1, Infinity, true); return b; }, /non-finite/],
    ["invalid UTF-8 in a name", () => { const b = batchOf({ kind: "forget", at: 1, replica: "gg" }); b[22] = 0xff; return b; }, /UTF-8/],
    ["chain ends going backwards", () => batchOf({ kind: "commit", at: 1, replica: "g", commit: 1, continued: false, chains: [{ ...chainOf(2), ends: Uint32Array.of(10, 5) }] }), /ascending/],
  ])("rejects %s with a RangeError that says what is wrong", (_label, make, message) => {
    expect(() => decodeBatch(make())).toThrow(message);
    expect(() => decodeBatch(make())).toThrow(RangeError);
  });
});

function chainOf(n: number): PrefixChain {
  return { lo: new Uint32Array(n).fill(1), hi: new Uint32Array(n).fill(2), ends: Uint32Array.from({ length: n }, (_, i) => i + 1), length: n };
}
function batchOf(e: ClusterEvent): Uint8Array {
  const w = new BatchWriter();
  w.add(e);
  return w.take(1);
}

/** A sink that encodes what the router shares, as the cluster does. */
function recorder() {
  const w = new BatchWriter();
  const sink: RouterSink = {
    commit: (chains, replica, now, tag, continued, session) => w.add({ kind: "commit", at: now, replica, commit: tag, continued, chains, ...(session ? { session } : {}) }),
    forget: (replica) => w.add({ kind: "forget", at: 0, replica }),
    forgetUsedBy: (replica, usedBy) => w.add({ kind: "forget-used-by", at: 0, replica, usedBy }),
    response: (id, replica) => w.add({ kind: "response", at: 0, replica, id }),
    retract: (chains, replica, tag, created) => w.add({ kind: "retract", at: 0, replica, commit: tag, chains, created }),
  };
  return { sink, take: () => decodeBatch(w.take(0)).events };
}
function apply(to: ReturnType<typeof router>, events: ClusterEvent[]) {
  for (const e of events) {
    if (e.kind === "commit") to.applyCommit(e.chains, e.replica, e.at, e.commit, e.continued, e.session);
    else if (e.kind === "forget") to.forget(e.replica, false);
    else if (e.kind === "forget-used-by") to.index.forgetUsedBy(e.replica, e.usedBy);
    else if (e.kind === "retract") to.applyRetract(e.chains, e.replica, e.commit, e.created);
    else to.rememberResponse(e.id, e.replica, false);
  }
}

describe("an instance that applies another's events routes like it", () => {
  it("a conversation started on one instance is pinned by the other; a session key and a response id too", () => {
    const a = router("hybrid");
    const b = router("hybrid");
    const wire = recorder();
    a.sink = wire.sink;
    const replicas = fleet(3);
    const turn1 = chat([{ role: "system", content: "s".repeat(3000) }, { role: "user", content: "first" }], {}, { session: "sess-1" });
    const first = send(a, turn1, replicas, 1)!;
    a.rememberResponse("resp_1", first.replica);
    apply(b, wire.take());
    const turn2 = chat([
      { role: "system", content: "s".repeat(3000) },
      { role: "user", content: "first" },
      { role: "assistant", content: "ok" },
      { role: "user", content: "second" },
    ]);
    expect(b.route(turn2, replicas, 2)).toMatchObject({ replica: first.replica, reason: "pin" });
    expect(b.responseOwner("resp_1")).toBe(first.replica);
    // the session key travels with the commit: a rewritten history still finds its replica
    const compacted = chat([{ role: "user", content: "summary of everything" }], {}, { session: "sess-1" });
    expect(b.route(compacted, replicas, 3)).toMatchObject({ replica: first.replica, reason: "session" });
  });

  it("a correction reaches the mirror: forget, forgetUsedBy; and applying does not share again", () => {
    const a = router("hybrid");
    const b = router("hybrid");
    const wire = recorder();
    a.sink = wire.sink;
    const echo = recorder();
    b.sink = echo.sink;
    const replicas = fleet(2);
    const req = chat([{ role: "user", content: "x".repeat(5000) }]);
    send(a, req, replicas, 1);
    a.forget("gpu0");
    apply(b, wire.take());
    expect(b.index.match(req.chains[0]!, "gpu0").depth).toBe(0);
    expect(echo.take()).toEqual([]);
  });

  it("a commit taken back (the replica computed nothing) is taken back on the mirror too", () => {
    const a = router("hybrid");
    const b = router("hybrid");
    const wire = recorder();
    a.sink = wire.sink;
    const replicas = fleet(2);
    const shared = [{ role: "system", content: "s".repeat(3000) }];
    const known = chat([...shared, { role: "user", content: "known" }]);
    send(a, known, replicas, 1);
    const failed = chat([...shared, { role: "user", content: "y".repeat(5000) }]);
    const decision = a.route(failed, replicas, 2)!;
    const before = a.index.match(failed.chains[0]!, decision.replica).depth;
    const retract = a.commit(failed, decision, 2);
    apply(b, wire.take());
    const held = (r: typeof a) => r.index.match(failed.chains[0]!, decision.replica).depth;
    expect(held(b)).toBe(failed.chains[0]!.length);
    expect(retract()).toBeGreaterThan(0);
    apply(b, wire.take());
    // both are back to what the replica held before (the system prompt, if the first request put it there)
    expect([held(a), held(b)]).toEqual([before, before]);
    expect(before).toBeLessThan(failed.chains[0]!.length);
  });
});

describe("a commit taken back on a mirror that moved on", () => {
  it("the mirror had committed something newer to that replica before it applied the commit: it still takes it back", () => {
    const a = router("hybrid");
    const b = router("hybrid");
    const wire = recorder();
    a.sink = wire.sink;
    const replicas = fleet(1);
    const failed = chat([{ role: "user", content: "f".repeat(5000) }]);
    const retract = a.commit(failed, a.route(failed, replicas, 100)!, 100);
    // b's own traffic to that replica, later than a's commit, before a's events arrive
    send(b, chat([{ role: "user", content: "b".repeat(5000) }]), replicas, 105);
    apply(b, wire.take());
    expect(b.index.match(failed.chains[0]!, "gpu0").depth).toBe(failed.chains[0]!.length);
    retract();
    apply(b, wire.take());
    expect(b.index.match(failed.chains[0]!, "gpu0").depth).toBe(0);
  });
});

describe("load messages", () => {
  const message: LoadMessage = { v: 1, i: "abcd1234", n: "host:8080", f: 2, at: 1700, applied: "17-0", lag: 0.4, r: { gpu0: [2, 8000, 1, 1699, 41000] } };

  it("round-trip through JSON", () => {
    expect(decodeLoad(JSON.stringify(message))).toEqual(message);
    expect(decodeLoad(JSON.stringify({ ...message, bye: true }))).toEqual({ ...message, bye: true });
  });

  it.each([
    ["not JSON", "{"],
    ["another version", JSON.stringify({ ...message, v: 2 })],
    ["a missing incarnation", JSON.stringify({ ...message, i: undefined })],
    ["a negative count", JSON.stringify({ ...message, r: { gpu0: [-1, 0, 0, 0, 0] } })],
    ["a short tuple", JSON.stringify({ ...message, r: { gpu0: [1, 2] } })],
    ["replicas as an array", JSON.stringify({ ...message, r: [] })],
  ])("ignores %s", (_label, text) => {
    expect(decodeLoad(text)).toBeUndefined();
  });
});

describe("snapshot blob and stream replies", () => {
  it("round-trips header and index bytes; rejects damage", () => {
    const blob = encodeSnapshot({ id: "12-3", at: 5, by: "a", responses: [["resp_1", "gpu0"]] }, Uint8Array.of(1, 2, 3));
    const { header, index } = decodeSnapshot(blob);
    expect(header).toEqual({ id: "12-3", at: 5, by: "a", responses: [["resp_1", "gpu0"]] });
    expect([...index]).toEqual([1, 2, 3]);
    expect(() => decodeSnapshot(blob.slice(0, 14))).toThrow(/truncated/);
    expect(() => decodeSnapshot(Uint8Array.of(1, 2, 3))).toThrow(/not an llmroute cluster snapshot/);
    expect(() => decodeSnapshot(encodeSnapshot({ id: "x", at: 5, by: "a", responses: [] }, new Uint8Array()))).toThrow(/lacks id/);
  });

  it("stream ids compare numerically; XREAD replies parse in RESP3 and RESP2 shapes", () => {
    expect(compareIds("9-0", "10-0")).toBeLessThan(0);
    expect(compareIds("10-2", "10-10")).toBeLessThan(0);
    expect(compareIds("10-0", "10-0")).toBe(0);
    // exactly, past 2^53
    expect(compareIds("9007199254740993-0", "9007199254740992-0")).toBeGreaterThan(0);
    expect(["1-2", "18446744073709551615-0", "0-0"].map(isStreamId)).toEqual([true, true, true]);
    expect(["99999999999999999999-0", "18446744073709551616-0", "not-an-id", "12-x", "12", "-1-0", "1-2 "].map(isStreamId)).toEqual(new Array(7).fill(false));
    const entries = [["1-0", ["i", "a", "p", "AQ=="]]];
    expect(streamEntries({ log: entries }, "log")).toEqual(entries as [string, string[]][]);
    expect(streamEntries([["log", entries]], "log")).toEqual(entries as [string, string[]][]);
    expect(streamEntries(null, "log")).toEqual([]);
    expect(streamEntries({ other: entries }, "log")).toEqual([]);
  });
});
