import { describe, expect, it } from "bun:test";
import fc from "fast-check";
import { chainChars, type PrefixChain } from "../../src/route/chain.ts";
import { PrefixIndex } from "../../src/route/prefix.ts";
import { chat, convo, index, input, only, TURN1 as turn1, TURN2 as turn2 } from "./_fixtures.ts";

describe("PrefixIndex", () => {

  it("finds the longest prefix a replica holds, even a tiny one", () => {
    const idx = index();
    idx.record(turn1, "gpu1", 1);
    expect(idx.match(turn2, "gpu1")).toMatchObject({ depth: 2, chars: turn1.ends[1], lastUsed: 1 });
    expect(idx.match(turn2, "gpu0")).toMatchObject({ depth: 0, chars: 0 });
  });

  it("retract takes back only the links a record created, and not once another commit used them", () => {
    const idx = index();
    idx.record(turn1, "gpu0", 1, false, 1);
    const created = idx.record(turn2, "gpu0", 2, false, 2);
    expect(created).toBe(turn2.length - turn1.length);
    expect(idx.retract(turn2, "gpu0", created, 2)).toBe(created);
    expect(idx.match(turn2, "gpu0").depth).toBe(turn1.length);
    expect(idx.replicaStats("gpu0")).toMatchObject({ entries: turn1.length, tips: 1 });
    // committed again by a later request before the first one failed: it stays
    const again = idx.record(turn2, "gpu0", 3, false, 3);
    idx.record(turn2, "gpu0", 4, false, 4);
    expect(idx.retract(turn2, "gpu0", again, 3)).toBe(0);
    expect(idx.match(turn2, "gpu0").depth).toBe(turn2.length);
  });

  it("a commit is named by its tag, not its time: the same millisecond, or a time moved up to keep the list ordered", () => {
    const idx = index();
    // two commits of one prompt in one millisecond; the first one fails
    const created = idx.record(turn2, "gpu0", 5, false, 1);
    idx.record(turn2, "gpu0", 5, false, 2);
    expect(idx.retract(turn2, "gpu0", created, 1)).toBe(0);
    expect(idx.match(turn2, "gpu0").depth).toBe(turn2.length);
    // a commit made at 8 recorded after one at 9 (a peer's, applied late): moved up to 9, still its own
    idx.record(turn1, "gpu1", 9, false, 3);
    const late = idx.record(turn2, "gpu1", 8, false, 4);
    expect(idx.retract(turn2, "gpu1", late, 4)).toBe(turn2.length - turn1.length);
    expect(idx.match(turn2, "gpu1").depth).toBe(turn1.length);
    // an untagged record is never taken back
    expect(idx.retract(turn1, "gpu1", 2, 0)).toBe(0);
  });

  it("counts a shared prefix once in a replica's working set", () => {
    const idx = index();
    const a = only(chat([{ role: "system", content: "S".repeat(5000) }, { role: "user", content: "a" }]));
    const b = only(chat([{ role: "system", content: "S".repeat(5000) }, { role: "user", content: "b" }]));
    idx.record(a, "gpu0", 1);
    idx.record(b, "gpu0", 2);
    expect(idx.workingSetChars("gpu0")).toBe(chainChars(a) + "user\u001ea".length);
  });

  it("evicts idle entries after the TTL and keeps recently used ones", () => {
    const idx = index(1000, 100);
    idx.record(turn1, "gpu0", 0);
    idx.record(turn2, "gpu1", 50);
    expect(idx.evict(120)).toBe(turn1.length);
    expect(idx.match(turn1, "gpu0").depth).toBe(0);
    expect(idx.match(turn2, "gpu1").depth).toBe(4);
    expect(idx.workingSetChars("gpu0")).toBe(0);
  });

  it("is bounded: the least recently used links go first, deepest before their parents", () => {
    const idx = index(4);
    idx.record(turn2, "gpu0", 1); // 4 links
    idx.record(turn1, "gpu1", 2); // 2 more → the 2 oldest of gpu0 (its deepest) go
    expect(idx.size).toBe(4);
    expect(idx.match(turn2, "gpu0").depth).toBe(2);
    expect(idx.match(turn1, "gpu1").depth).toBe(2);
  });

  it("a card's budget bounds what it is believed to hold: its own least recently used go first", () => {
    const idx = index();
    const doc = (d: string) => only(chat([{ role: "user", content: d.repeat(3000) }]));
    idx.setBudget("gpu0", 7000);
    idx.record(doc("A"), "gpu0", 1);
    idx.record(doc("B"), "gpu0", 2);
    idx.record(doc("C"), "gpu1", 3); // another card's entries are not touched
    expect(idx.match(doc("A"), "gpu0").depth).toBe(doc("A").length);
    idx.record(doc("D"), "gpu0", 4); // A was used least recently on gpu0
    expect(idx.match(doc("A"), "gpu0").depth).toBe(0);
    expect(idx.match(doc("B"), "gpu0").depth).toBe(doc("B").length);
    expect(idx.match(doc("C"), "gpu1").depth).toBe(doc("C").length);
    expect(idx.workingSetChars("gpu0")).toBeLessThanOrEqual(7000);
    // A is still remembered (demand for the capacity figures), and held again once used again
    expect(idx.replicaStats("gpu0")).toMatchObject({ entries: 3 * doc("A").length, heldChars: idx.workingSetChars("gpu0") });
    idx.record(doc("A"), "gpu0", 5);
    expect(idx.match(doc("A"), "gpu0").depth).toBe(doc("A").length);
    expect(idx.match(doc("B"), "gpu0").depth).toBe(0);
    // a larger budget (a recalibrated characters-per-token) takes older entries back in
    idx.setBudget("gpu0", 20_000);
    expect(idx.match(doc("B"), "gpu0").depth).toBe(doc("B").length);
  });

  it("forgetUsedBy drops a replica's entries used at or before a time (the engine evicted them)", () => {
    const idx = index();
    idx.record(turn1, "gpu0", 10);
    const other = only(chat([{ role: "user", content: "other" }]));
    idx.record(other, "gpu0", 20);
    idx.record(turn1, "gpu1", 5);
    expect(idx.forgetUsedBy("gpu0", 10)).toBe(turn1.length);
    expect(idx.match(turn1, "gpu0").depth).toBe(0);
    expect(idx.match(other, "gpu0").depth).toBe(1);
    expect(idx.match(turn1, "gpu1").depth).toBe(2);
  });

  it("forget drops a replica's entries and working set", () => {
    const idx = index();
    idx.record(turn2, "gpu0", 1);
    idx.forget("gpu0");
    expect(idx.size).toBe(0);
    expect(idx.workingSetChars("gpu0")).toBe(0);
  });

  it("remembers the length of the tail chunk after a link (completions continuation)", () => {
    const idx = index();
    const prompt = "p".repeat(2500);
    const chain = only(input("/v1/completions", { model: "m", prompt }));
    idx.record(chain, "gpu0", 1);
    expect(idx.tailAfter(chain, 2, "gpu0")).toBe(2500 - 2048);
  });
});

describe("PrefixIndex bookkeeping", () => {
  it("a conversation is one tip however many turns it has; a shared system prompt is counted once", () => {
    const idx = index();
    for (let t = 0; t < 4; t++) idx.record(convo(t), "gpu0", t);
    expect(idx.replicaStats("gpu0").tips).toBe(1);
    idx.record(convo(0, "another"), "gpu0", 9);
    expect(idx.replicaStats("gpu0")).toMatchObject({ tips: 2, entries: convo(3).length + 1 });
  });

  it("eviction keeps tips and working set exact", () => {
    const idx = index(1000, 10);
    idx.record(convo(2), "gpu0", 0);
    idx.record(convo(0, "late"), "gpu0", 100);
    idx.evict(105);
    const late = convo(0, "late");
    expect(idx.replicaStats("gpu0")).toEqual({ tips: 1, entries: 2, chars: chainChars(late), heldChars: chainChars(late) });
  });

  it("the active working set counts recent conversations and reused prefixes, not one-shots' own text", () => {
    const idx = index(1000, 60_000, 10);
    const system = "S".repeat(3000);
    const oneShot = (i: number) => only(chat([{ role: "system", content: system }, { role: "user", content: `distinct task ${i}` }]));
    for (let i = 0; i < 5; i++) idx.record(oneShot(i), "gpu0", 10, false);
    // the shared system prompt was reused (counted once); the five tasks were not
    const systemChars = "system\u001e".length + system.length;
    expect(idx.activeWorkingSet(10).perReplica.get("gpu0")).toBe(systemChars);

    // a conversation: turn 1 is a one-shot, turn 2 continues it — both turns count
    const t1 = convo(0, "talk");
    const t2 = convo(1, "talk");
    idx.record(t1, "gpu1", 20, false);
    expect(idx.activeWorkingSet(20).perReplica.get("gpu1")).toBeUndefined();
    idx.record(t2, "gpu1", 30, true);
    expect(idx.activeWorkingSet(30).perReplica.get("gpu1")).toBe(chainChars(t2));
    // and only recently used links (the window is 10 ms: at 35, gpu0's use at 10 has left it)
    expect(idx.activeWorkingSet(35).perReplica.get("gpu0")).toBeUndefined();
    expect(idx.activeWorkingSet(35).perReplica.get("gpu1")).toBe(chainChars(t2));
    expect(idx.recentChars("gpu1")).toBe(chainChars(t2));
  });

  it("the fleet's active working set counts a prefix held on several replicas once", () => {
    const idx = index();
    const doc = (q: string) => only(chat([{ role: "user", content: "D".repeat(4000) }, { role: "assistant", content: "ok" }, { role: "user", content: q }]));
    idx.record(doc("a"), "gpu0", 1, true);
    idx.record(doc("b"), "gpu1", 2, true);
    const { perReplica, fleet } = idx.activeWorkingSet(2);
    const shared = doc("a").ends.at(-2)!;
    const tail = chainChars(doc("a")) - shared;
    expect(perReplica.get("gpu0")).toBe(shared + tail);
    expect(perReplica.get("gpu1")).toBe(shared + tail);
    expect(fleet).toBe(shared + 2 * tail);
  });
});

// ---------------------------------------------------------------------------------------
// Property: under any sequence of operations the index keeps its invariants. The reference
// is the index's own snapshot (every entry it holds), checked by brute force.

interface Entry {
  key: string;
  replica: string;
  delta: number;
  last: number;
  parent: number;
  flags: number;
}

function entries(idx: PrefixIndex): Entry[] {
  const bytes = idx.snapshot();
  const view = new DataView(bytes.buffer);
  const count = view.getUint32(8, true);
  const names: string[] = [];
  let at = 16;
  for (let i = 0; i < view.getUint32(12, true); i++) {
    const len = view.getUint16(at, true);
    names.push(new TextDecoder().decode(bytes.subarray(at + 2, at + 2 + len)));
    at += 2 + len;
  }
  return Array.from({ length: count }, (_, i) => {
    const o = at + i * 36;
    return {
      key: `${view.getUint32(o, true)}:${view.getUint32(o + 4, true)}`,
      replica: names[view.getUint16(o + 8, true)]!,
      flags: view.getUint8(o + 10),
      delta: view.getUint32(o + 12, true),
      last: view.getFloat64(o + 20, true),
      parent: view.getInt32(o + 28, true),
    };
  });
}

function checkInvariants(idx: PrefixIndex, chains: PrefixChain[], replicas: string[], now: number, windowMs: number, maxEntries: number, budgets: Map<string, number>) {
  const all = entries(idx);
  expect(idx.size).toBe(all.length);
  expect(all.length).toBeLessThanOrEqual(maxEntries);
  const { perReplica, fleet } = idx.activeWorkingSet(now);
  const fleetSeen = new Map<string, number>();
  for (const r of replicas) {
    const mine = all.map((e, i) => ({ e, i })).filter(({ e }) => e.replica === r);
    const childCount = new Map<number, number>();
    for (const { e } of mine) if (e.parent >= 0) childCount.set(e.parent, (childCount.get(e.parent) ?? 0) + 1);
    const chars = mine.reduce((s, { e }) => s + e.delta, 0);
    const tips = mine.filter(({ i }) => !childCount.has(i)).length;
    // held: the newest run of the list that fits the card's budget
    const held = new Set<number>();
    let heldChars = 0;
    for (let k = mine.length - 1; k >= 0 && heldChars + mine[k]!.e.delta <= (budgets.get(r) ?? Infinity); k--) {
      held.add(mine[k]!.i);
      heldChars += mine[k]!.e.delta;
    }
    expect(idx.replicaStats(r)).toEqual({ chars, entries: mine.length, tips, heldChars });
    // LRU order: oldest first, parents newer than (after) their children
    for (let k = 1; k < mine.length; k++) expect(mine[k]!.e.last).toBeGreaterThanOrEqual(mine[k - 1]!.e.last);
    for (const { e, i } of mine) if (e.parent >= 0) expect(e.parent).toBeGreaterThan(i);
    // the active working set, recomputed
    const active = mine.filter(({ e }) => e.last >= now - windowMs && e.flags !== 0);
    expect(perReplica.get(r) ?? 0).toBe(active.reduce((s, { e }) => s + e.delta, 0));
    expect(idx.recentChars(r)).toBe(mine.filter(({ e }) => e.last >= now - windowMs).reduce((s, { e }) => s + e.delta, 0));
    for (const { e } of active) fleetSeen.set(e.key, e.delta);
    // match equals a linear scan over the held entries, and what is held is prefix-closed
    const heldKeys = new Set([...held].map((i) => all[i]!.key));
    for (const chain of chains) {
      const isHeld = (k: number) => heldKeys.has(`${chain.lo[k]}:${chain.hi[k]}`);
      let depth = 0;
      while (depth < chain.length && isHeld(depth)) depth++;
      expect(idx.match(chain, r).depth).toBe(depth);
      for (let k = 0; k < chain.length; k++) expect(idx.holds(chain.lo[k]!, chain.hi[k]!, r)).toBe(isHeld(k));
      for (let k = depth; k < chain.length; k++) expect(isHeld(k)).toBe(false);
    }
  }
  expect(fleet).toBe([...fleetSeen.values()].reduce((s, d) => s + d, 0));
}

describe("property: the index keeps its invariants", () => {
  const replicas = ["gpu0", "gpu1", "gpu2"];
  // A small universe of chains that share prefixes: conversations growing over shared systems.
  const chains = Array.from({ length: 12 }, (_, i) => {
    const messages = [{ role: "system", content: `system ${i % 3} `.repeat(40 * (1 + (i % 2))) }, { role: "user", content: `task ${i % 5}` }];
    for (let t = 0; t < i % 4; t++) messages.push({ role: "assistant", content: `a${t}` }, { role: "user", content: `u${t}`.repeat(100) });
    return only(chat(messages));
  });

  const op = fc.oneof(
    fc.record({ kind: fc.constant("record" as const), chain: fc.nat(chains.length - 1), replica: fc.nat(2), dt: fc.nat(30), continued: fc.boolean() }),
    fc.record({ kind: fc.constant("evict" as const), dt: fc.nat(200) }),
    fc.record({ kind: fc.constant("forget" as const), replica: fc.nat(2) }),
    fc.record({ kind: fc.constant("forgetUsedBy" as const), replica: fc.nat(2), back: fc.nat(100) }),
    fc.record({ kind: fc.constant("budget" as const), replica: fc.nat(2), chars: fc.option(fc.integer({ min: 200, max: 5000 }), { nil: undefined }) }),
    fc.record({ kind: fc.constant("shrink" as const), maxEntries: fc.integer({ min: 5, max: 60 }) }),
    fc.record({ kind: fc.constant("restore" as const) }),
    // Another router's index (a cluster peer) learns on its own; "merge" restores its
    // snapshot onto the live index, as the cluster's catch-up does.
    fc.record({ kind: fc.constant("peerRecord" as const), chain: fc.nat(chains.length - 1), replica: fc.nat(2), dt: fc.nat(30) }),
    fc.record({ kind: fc.constant("merge" as const) }),
    // A commit the replica never computed (refused, an error answer) is taken back.
    fc.record({ kind: fc.constant("recordRetract" as const), chain: fc.nat(chains.length - 1), replica: fc.nat(2), dt: fc.nat(30) }),
  );

  it("per-replica chars, entries, tips, order, budgets, the active working set, and match = a linear scan", () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => {
        const windowMs = 50;
        let maxEntries = 60;
        let idx = new PrefixIndex({ maxEntries, ttlMs: 150, windowMs });
        const peer = new PrefixIndex({ maxEntries: 60, ttlMs: 150, windowMs });
        const budgets = new Map<string, number>();
        let now = 1000;
        let tags = 0;
        for (const o of ops) {
          switch (o.kind) {
            case "record":
              now += o.dt;
              idx.record(chains[o.chain]!, replicas[o.replica]!, now, o.continued, ++tags);
              break;
            case "evict":
              now += o.dt;
              idx.evict(now);
              break;
            case "forget":
              idx.forget(replicas[o.replica]!);
              break;
            case "forgetUsedBy":
              idx.forgetUsedBy(replicas[o.replica]!, now - o.back);
              break;
            case "budget":
              idx.setBudget(replicas[o.replica]!, o.chars);
              if (o.chars === undefined) budgets.delete(replicas[o.replica]!);
              else budgets.set(replicas[o.replica]!, o.chars);
              break;
            case "shrink":
              maxEntries = o.maxEntries;
              idx.configure({ maxEntries, ttlMs: 150, windowMs });
              break;
            case "restore": {
              const copy = new PrefixIndex({ maxEntries, ttlMs: 150, windowMs });
              for (const [r, chars] of budgets) copy.setBudget(r, chars);
              expect(copy.restore(idx.snapshot(), () => true)).toEqual({ restored: idx.size, skipped: 0 });
              idx = copy;
              break;
            }
            case "peerRecord":
              now += o.dt;
              peer.record(chains[o.chain]!, replicas[o.replica]!, now, true, ++tags);
              break;
            case "merge":
              peer.evict(now);
              idx.restore(peer.snapshot(), () => true);
              break;
            case "recordRetract": {
              now += o.dt;
              const chain = chains[o.chain]!;
              const replica = replicas[o.replica]!;
              const had = idx.match(chain, replica).depth;
              const tag = ++tags;
              const created = idx.record(chain, replica, now, false, tag);
              const removed = idx.retract(chain, replica, created, tag);
              // what it created is gone again (unless the bounds already dropped some of it)
              expect(removed).toBeLessThanOrEqual(created);
              if (removed === created) expect(idx.match(chain, replica).depth).toBeLessThanOrEqual(Math.max(had, chain.length - created));
              break;
            }
          }
          checkInvariants(idx, chains, replicas, now, windowMs, maxEntries, budgets);
        }
      }),
      { numRuns: 150 },
    );
  });
});

describe("PrefixIndex.sentSince: what competed with a prompt since its last use", () => {
  it("counts other prompts sent after then, not the prompt's own links (a shared system prompt included), and stops past the limit", () => {
    const idx = index();
    const system = { role: "system" as const, content: "s".repeat(2_000) };
    const mine = only(chat([system, { role: "user", content: "m".repeat(3_000) }]));
    const theirs = only(chat([system, { role: "user", content: "t".repeat(5_000) }]));
    const older = only(chat([{ role: "user", content: "o".repeat(1_000) }]));
    idx.record(older, "gpu0", 1);
    idx.record(mine, "gpu0", 2);
    idx.record(theirs, "gpu0", 3);
    const theirsOwn = chainChars(theirs) - chainChars(only(chat([system])));
    // After 2: theirs (its own user message; the system prompt it touched is mine too).
    expect(idx.sentSince("gpu0", 2, [mine])).toBe(theirsOwn);
    // After 0: the older prompt as well.
    expect(idx.sentSince("gpu0", 0, [mine])).toBe(theirsOwn + chainChars(older));
    // Another replica was sent nothing.
    expect(idx.sentSince("gpu1", 0, [mine])).toBe(0);
    // Past the limit the walk stops: at least the limit, at most everything.
    const capped = idx.sentSince("gpu0", 0, [mine], 100);
    expect(capped).toBeGreaterThan(100);
    expect(capped).toBeLessThanOrEqual(theirsOwn + chainChars(older));
  });
});

describe("PrefixIndex.displaces: what a new prompt would push out of a full card that one pooled cache would keep", () => {
  const system = { role: "system" as const, content: "s".repeat(2_000) };
  const oneShot = (i: number) => only(chat([{ role: "user", content: `${i}`.padEnd(4_000, "o") }]));

  it("counts the oldest held entries a prompt overflows the budget by, those used after the pooled cache's reach", () => {
    const idx = index();
    const first = only(chat([system, { role: "user", content: "first".padEnd(1_000, "q") }]));
    const second = only(chat([system, { role: "user", content: "second".padEnd(1_000, "q") }]));
    idx.record(first, "gpu0", 1);
    idx.record(second, "gpu0", 2); // the system prompt is reused now
    for (let i = 0; i < 3; i++) idx.record(oneShot(i), "gpu0", 10 + i);
    const used = idx.replicaStats("gpu0").chars;
    idx.setBudget("gpu0", used); // full: every new character pushes one out
    const systemChars = chainChars(only(chat([system])));
    const firstOwn = chainChars(first) - systemChars;
    const questions = firstOwn + chainChars(second) - systemChars;
    const newcomer = only(chat([{ role: "user", content: "n".repeat(500) }]));
    // Oldest first (a prefix is never older than what extends it): the two questions, sent
    // at 1 and 2, then the system prompt they share (last used at 2).
    expect(idx.displaces("gpu0", questions, [newcomer])).toBe(questions);
    expect(idx.displaces("gpu0", questions, [newcomer], 2)).toBe(0);
    expect(idx.displaces("gpu0", questions + systemChars, [newcomer], 1)).toBe(questions - firstOwn + systemChars);
    // A budget that cuts through the first question: the card still holds the rest of it
    // (it was sent more than its budget), and that goes first.
    idx.setBudget("gpu0", used - 100);
    expect(idx.replicaStats("gpu0").heldChars).toBeLessThan(used - 100);
    expect(idx.displaces("gpu0", 50, [newcomer])).toBe(50);
    expect(idx.displaces("gpu0", 50, [newcomer], 1)).toBe(0);
    // With room to spare, or a KV that is not known, nothing.
    idx.setBudget("gpu0", used + questions);
    expect(idx.displaces("gpu0", questions, [newcomer])).toBe(0);
    idx.setBudget("gpu0", undefined);
    expect(idx.displaces("gpu0", questions, [newcomer])).toBe(0);
    expect(idx.displaces("gpu1", questions, [newcomer])).toBe(0);
  });

  it("skips the request's own held prefix: it touches it, so it is not what goes", () => {
    const idx = index();
    const convo = only(chat([system, { role: "user", content: "turn one".padEnd(3_000, "t") }]));
    idx.record(convo, "gpu0", 1, true);
    idx.record(oneShot(0), "gpu0", 2);
    idx.setBudget("gpu0", idx.replicaStats("gpu0").chars);
    const next = only(chat([system, { role: "user", content: "turn one".padEnd(3_000, "t") }, { role: "assistant", content: "a" }, { role: "user", content: "turn two" }]));
    // Its own conversation is the oldest; what goes instead is the one-shot, sent at 2.
    expect(idx.displaces("gpu0", 1_000, [next], 2)).toBe(0);
    expect(idx.displaces("gpu0", 1_000, [next], 1)).toBe(1_000);
    // Another prompt would push the conversation out, used at 1.
    expect(idx.displaces("gpu0", 1_000, [oneShot(9)], 1)).toBe(0);
    expect(idx.displaces("gpu0", 1_000, [oneShot(9)], 0)).toBe(1_000);
  });

  it("pooledReach: one cache of every card's KV pushes out the fleet's oldest first, across cards", () => {
    const idx = index();
    const prompt = (label: string) => only(chat([{ role: "user", content: label.padEnd(4_000, "x") }]));
    const each = chainChars(prompt("a0"));
    ["a0", "a1"].forEach((p, i) => idx.record(prompt(p), "gpu0", 10 + i)); // gpu0: 10, 11
    ["b0", "b1"].forEach((p, i) => idx.record(prompt(p), "gpu1", 20 + i)); // gpu1: 20, 21
    const newcomer = only(chat([{ role: "user", content: "n".repeat(500) }]));
    // Room somewhere in the pool: it reaches nothing, whatever one card would push out.
    idx.setBudget("gpu0", 2 * each);
    idx.setBudget("gpu1", 3 * each);
    expect(idx.pooledReach(["gpu0", "gpu1"], each, [newcomer])).toBe(-Infinity);
    expect(idx.displaces("gpu0", each, [newcomer], -Infinity)).toBe(each);
    // Both full: the pool's oldest are gpu0's, then gpu1's.
    idx.setBudget("gpu1", 2 * each);
    expect(idx.pooledReach(["gpu0", "gpu1"], each, [newcomer])).toBe(10);
    expect(idx.pooledReach(["gpu0", "gpu1"], 2 * each, [newcomer])).toBe(11);
    expect(idx.pooledReach(["gpu0", "gpu1"], 3 * each, [newcomer])).toBe(20);
    // So gpu0 loses nothing the pool keeps, gpu1 loses what it would push out.
    const reach = idx.pooledReach(["gpu0", "gpu1"], each, [newcomer]);
    expect(idx.displaces("gpu0", each, [newcomer], reach)).toBe(0);
    expect(idx.displaces("gpu1", each, [newcomer], reach)).toBe(each);
    // A card whose KV is not known: the pool's room is not known either.
    idx.setBudget("gpu1", undefined);
    expect(idx.pooledReach(["gpu0", "gpu1"], each, [newcomer])).toBe(-Infinity);
  });
});

describe("forgetCommits: what an engine cleared, by the commits that recorded it", () => {
  it("drops the links those commits last recorded, keeps a link another commit extended and what others recorded", () => {
    const idx = new PrefixIndex({ maxEntries: 1_000, ttlMs: 3_600_000, windowMs: 300_000 });
    const chainOf = (...segments: string[]) => chat(segments.map((content) => ({ role: "user", content }))).chains[0]!;
    const shared = chainOf("system", "a");
    const longer = chainOf("system", "a", "b");
    const other = chainOf("other");
    idx.record(longer, "gpu0", 1, false, 10); // an older conversation, kept elsewhere (say, a RAM copy)
    idx.record(shared, "gpu0", 2, false, 11); // retouched "system", "a" by commit 11
    idx.record(other, "gpu0", 3, false, 12);
    expect(idx.forgetCommits("gpu0", new Set([11, 12]))).toBe(1); // "other"; "a" has a child of commit 10
    expect(idx.match(longer, "gpu0").depth).toBe(3);
    expect(idx.match(other, "gpu0").depth).toBe(0);
    expect(idx.forgetCommits("gpu0", new Set([10, 11]))).toBe(3);
    expect(idx.size).toBe(0);
  });
});
