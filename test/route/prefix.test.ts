import { describe, expect, it } from "bun:test";
import { PrefixIndex, prefixChain } from "../../src/route/prefix.ts";
import { chat, hasher, input } from "./_fixtures.ts";

const index = (maxEntries = 1000, ttlMs = 60_000) => new PrefixIndex({ maxEntries, ttlMs });

describe("prefixChain", () => {
  it("one link per message, and long segments cut every chunk", () => {
    const req = chat([
      { role: "system", content: "s" },
      { role: "user", content: "x".repeat(2500) },
    ]);
    // system: 1 link; user: "user␞" + 2500 chars = 2505 chars → 3 chunks of 1024
    expect(req.chain.hashes).toHaveLength(4);
    expect(req.chain.ends.at(-1)).toBe("system\u001es".length + "user\u001e".length + 2500);
  });

  it("two requests share exactly the links of their shared messages", () => {
    const a = chat([{ role: "system", content: "s" }, { role: "user", content: "a" }]);
    const b = chat([{ role: "system", content: "s" }, { role: "user", content: "b" }]);
    expect(a.chain.hashes[0]).toBe(b.chain.hashes[0]!);
    expect(a.chain.hashes[1]).not.toBe(b.chain.hashes[1]!);
  });

  it("a message split across two messages is not the same prompt as one message", () => {
    const shape = { tenant: "", model: "m" };
    const one = prefixChain({ ...shape, segments: ["ab"] }, hasher, 1);
    const two = prefixChain({ ...shape, segments: ["a", "b"] }, hasher, 1);
    expect(one.hashes.at(-1)).not.toBe(two.hashes.at(-1)!);
  });

  it("tenant and model separate identical text", () => {
    const body = { model: "m", messages: [{ role: "user", content: "q" }] };
    const plain = input("/v1/chat/completions", body);
    expect(input("/v1/chat/completions", body, "team-b").chain.hashes[0]).not.toBe(plain.chain.hashes[0]!);
    expect(input("/v1/chat/completions", { ...body, prompt_cache_key: "k" }).chain.hashes[0]).not.toBe(plain.chain.hashes[0]!);
    expect(input("/v1/chat/completions", { ...body, model: "other" }).chain.hashes[0]).not.toBe(plain.chain.hashes[0]!);
  });
});

describe("PrefixIndex", () => {
  const turn1 = chat([{ role: "system", content: "tiny" }, { role: "user", content: "hi" }]);
  const turn2 = chat([
    { role: "system", content: "tiny" },
    { role: "user", content: "hi" },
    { role: "assistant", content: "hello" },
    { role: "user", content: "more" },
  ]);

  it("finds the longest prefix a replica holds, even a tiny one", () => {
    const idx = index();
    idx.record(turn1.chain, "gpu1", 1);
    expect(idx.match(turn2.chain, "gpu1")).toMatchObject({ depth: 2, chars: turn1.chain.ends[1] });
    expect(idx.match(turn2.chain, "gpu0")).toMatchObject({ depth: 0, chars: 0 });
  });

  it("counts a shared prefix once in a replica's working set", () => {
    const idx = index();
    const a = chat([{ role: "system", content: "S".repeat(5000) }, { role: "user", content: "a" }]);
    const b = chat([{ role: "system", content: "S".repeat(5000) }, { role: "user", content: "b" }]);
    idx.record(a.chain, "gpu0", 1);
    idx.record(b.chain, "gpu0", 2);
    const tail = "user\u001ea".length;
    expect(idx.workingSetChars("gpu0")).toBe(a.chain.ends.at(-1)! + tail);
  });

  it("evicts idle entries after the TTL and keeps recently used ones", () => {
    const idx = index(1000, 100);
    idx.record(turn1.chain, "gpu0", 0);
    idx.record(turn2.chain, "gpu1", 50);
    expect(idx.evict(120)).toBe(turn1.chain.hashes.length);
    expect(idx.match(turn1.chain, "gpu0").depth).toBe(0);
    expect(idx.match(turn2.chain, "gpu1").depth).toBe(4);
    expect(idx.workingSetChars("gpu0")).toBe(0);
  });

  it("is bounded: the least recently used links go first, deepest before their parents", () => {
    const idx = index(4);
    idx.record(turn2.chain, "gpu0", 1); // 4 links
    idx.record(turn1.chain, "gpu1", 2); // 2 more → the 2 oldest of gpu0 (its deepest) go
    expect(idx.size).toBe(4);
    expect(idx.match(turn2.chain, "gpu0").depth).toBe(2);
    expect(idx.match(turn1.chain, "gpu1").depth).toBe(2);
  });

  it("forget drops a replica's entries and working set", () => {
    const idx = index();
    idx.record(turn2.chain, "gpu0", 1);
    idx.forget("gpu0");
    expect(idx.size).toBe(0);
    expect(idx.workingSetChars("gpu0")).toBe(0);
  });

  it("save/restore round-trips, skipping replicas that left", () => {
    const idx = index();
    idx.record(turn2.chain, "gpu0", 1);
    idx.record(turn1.chain, "gpu1", 2);
    const copy = index();
    expect(copy.restore(idx.save(), (r) => r === "gpu0")).toBe(4);
    expect(copy.match(turn2.chain, "gpu0").depth).toBe(4);
    expect(copy.match(turn1.chain, "gpu1").depth).toBe(0);
    expect(copy.workingSetChars("gpu0")).toBe(idx.workingSetChars("gpu0"));
  });
});

describe("PrefixIndex bookkeeping", () => {
  const convo = (n: number, user = "go") => {
    const messages = [{ role: "system", content: "S" }, { role: "user", content: user }];
    for (let i = 0; i < n; i++) messages.push({ role: "assistant", content: `a${i}` }, { role: "user", content: `u${i}` });
    return chat(messages);
  };

  it("a conversation is one tip however many turns it has; a shared system prompt is counted once", () => {
    const idx = index();
    for (let t = 0; t < 4; t++) idx.record(convo(t).chain, "gpu0", t);
    expect(idx.replicaStats("gpu0").tips).toBe(1);
    idx.record(convo(0, "another").chain, "gpu0", 9);
    expect(idx.replicaStats("gpu0")).toMatchObject({ tips: 2, entries: convo(3).chain.hashes.length + 1 });
  });

  it("eviction keeps tips and working set exact", () => {
    const idx = index(1000, 10);
    idx.record(convo(2).chain, "gpu0", 0);
    idx.record(convo(0, "late").chain, "gpu0", 100);
    idx.evict(105);
    const late = convo(0, "late").chain;
    expect(idx.replicaStats("gpu0")).toEqual({ tips: 1, entries: 2, chars: late.ends.at(-1)! });
  });

  it("the active working set counts recent conversations and reused prefixes, not one-shots' own text", () => {
    const idx = index();
    const system = "S".repeat(3000);
    const oneShot = (i: number) => chat([{ role: "system", content: system }, { role: "user", content: `distinct task ${i}` }]);
    for (let i = 0; i < 5; i++) idx.record(oneShot(i).chain, "gpu0", 10, false);
    // the shared system prompt was reused (counted once); the five tasks were not
    const systemChars = "system\u001e".length + system.length;
    expect(idx.activeWorkingSet(0).perReplica.get("gpu0")).toBe(systemChars);

    // a conversation: turn 1 is a one-shot, turn 2 continues it — both turns count
    const t1 = convo(0, "talk");
    const t2 = convo(1, "talk");
    idx.record(t1.chain, "gpu1", 20, false);
    expect(idx.activeWorkingSet(0).perReplica.get("gpu1")).toBeUndefined();
    idx.record(t2.chain, "gpu1", 30, true);
    expect(idx.activeWorkingSet(0).perReplica.get("gpu1")).toBe(t2.chain.ends.at(-1)!);
    // and only recently used links
    expect(idx.activeWorkingSet(25).perReplica.get("gpu0")).toBeUndefined();
    expect(idx.activeWorkingSet(25).perReplica.get("gpu1")).toBe(t2.chain.ends.at(-1)!);
  });

  it("the fleet's active working set counts a prefix held on several replicas once", () => {
    const idx = index();
    const doc = (q: string) => chat([{ role: "user", content: `${"D".repeat(4000)}` }, { role: "assistant", content: "ok" }, { role: "user", content: q }]);
    idx.record(doc("a").chain, "gpu0", 1, true);
    idx.record(doc("b").chain, "gpu1", 2, true);
    const { perReplica, fleet } = idx.activeWorkingSet(0);
    const shared = doc("a").chain.ends.at(-2)!;
    const tail = doc("a").chain.ends.at(-1)! - shared;
    expect(perReplica.get("gpu0")).toBe(shared + tail);
    expect(perReplica.get("gpu1")).toBe(shared + tail);
    expect(fleet).toBe(shared + 2 * tail);
  });

  it("restore rebuilds tips from the saved parents", () => {
    const idx = index();
    for (let t = 0; t < 3; t++) idx.record(convo(t).chain, "gpu0", t, t > 0);
    idx.record(convo(0, "b").chain, "gpu0", 5);
    const copy = index();
    copy.restore(idx.save(), () => true);
    expect(copy.replicaStats("gpu0")).toEqual(idx.replicaStats("gpu0"));
    expect(copy.activeWorkingSet(0)).toEqual(idx.activeWorkingSet(0));
  });
});
