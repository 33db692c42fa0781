/**
 * The index's snapshot (routing.state_file, a cluster's catch-up): what goes in comes back
 * for the replicas kept, malformed records are skipped with their descendants, version 1
 * still loads, and a peer's clock is translated.
 */
import { describe, expect, it } from "bun:test";
import { convo, index, TURN1 as turn1, TURN2 as turn2 } from "./_fixtures.ts";

describe("PrefixIndex snapshot and restore", () => {
  it("snapshot/restore round-trips, skipping replicas that left", () => {
    const idx = index();
    idx.record(turn2, "gpu0", 1);
    idx.record(turn1, "gpu1", 2);
    const copy = index();
    expect(copy.restore(idx.snapshot(), (r) => r === "gpu0")).toEqual({ restored: 4, skipped: 2 });
    expect(copy.match(turn2, "gpu0")).toEqual(idx.match(turn2, "gpu0"));
    expect(copy.match(turn1, "gpu1").depth).toBe(0);
    expect(copy.replicaStats("gpu0")).toEqual(idx.replicaStats("gpu0"));
  });

  it("restore skips malformed records with their descendants, and rejects what is not a snapshot", () => {
    const idx = index();
    idx.record(turn2, "gpu0", 1);
    const bytes = idx.snapshot();
    // The records follow the header (16 bytes + "gpu0" with its length): corrupt the second
    // oldest (link 3 of 4, whose child is link 4) — a NaN last-use time.
    const first = 16 + 2 + 4;
    new DataView(bytes.buffer).setFloat64(first + 36 + 20, Number.NaN, true);
    const copy = index();
    expect(copy.restore(bytes, () => true)).toEqual({ restored: 2, skipped: 2 });
    expect(copy.match(turn2, "gpu0").depth).toBe(2);
    expect(() => index().restore(new TextEncoder().encode("{}"), () => true)).toThrow(/not an llmroute index snapshot/);
  });

  it("restores a version 1 snapshot (no commit tags): the same entries, none of them taken back by a retract", () => {
    const idx = index();
    idx.record(turn2, "gpu0", 1, false, 7);
    const v2 = idx.snapshot();
    const head = 16 + 2 + 4;
    const records = (v2.byteLength - head) / 36;
    const v1 = new Uint8Array(head + records * 32);
    v1.set(v2.subarray(0, head));
    new DataView(v1.buffer).setUint32(4, 1, true);
    for (let i = 0; i < records; i++) v1.set(v2.subarray(head + i * 36, head + i * 36 + 32), head + i * 32);
    const copy = index();
    expect(copy.restore(v1, () => true)).toEqual({ restored: turn2.length, skipped: 0 });
    expect(copy.match(turn2, "gpu0")).toMatchObject({ depth: turn2.length, lastUsed: 1 });
    expect(copy.retract(turn2, "gpu0", turn2.length, 7)).toBe(0);
    // from version 2 on, the tag comes back with the entry
    const again = index();
    again.restore(v2, () => true);
    expect(again.retract(turn2, "gpu0", turn2.length, 7)).toBe(turn2.length);
    new DataView(v1.buffer).setUint32(4, 3, true);
    expect(() => index().restore(v1, () => true)).toThrow(/index snapshot version 3 is not 2/);
  });

  it("restored with a clock: each entry as old as it was where the snapshot was taken, and never in the future", () => {
    const peer = index();
    peer.record(turn1, "gpu0", 3_600_000 + 900); // a clock an hour ahead: used 100 ms before it took the snapshot
    peer.record(turn2, "gpu1", 3_600_000 + 1_000 + 5_000); // after it (a damaged record): now at the latest
    const idx = index();
    idx.restore(peer.snapshot(), () => true, { now: 1_000, takenAt: 3_600_000 + 1_000 });
    expect(idx.match(turn1, "gpu0").lastUsed).toBe(900);
    expect(idx.match(turn2, "gpu1").lastUsed).toBe(1_000);
    // the TTL reaches them
    expect(idx.evict(1_000 + 60_001)).toBe(turn1.length + turn2.length);
  });

  it("restore rebuilds tips and the active working set", () => {
    const idx = index();
    for (let t = 0; t < 3; t++) idx.record(convo(t), "gpu0", t, t > 0);
    idx.record(convo(0, "b"), "gpu0", 5);
    const copy = index();
    copy.restore(idx.snapshot(), () => true);
    expect(copy.replicaStats("gpu0")).toEqual(idx.replicaStats("gpu0"));
    expect(copy.activeWorkingSet(5)).toEqual(idx.activeWorkingSet(5));
  });
});
