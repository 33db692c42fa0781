/**
 * Each policy's own behaviour, with the seed's test shape: a batch of single-turn requests
 * uses every replica and consecutive picks alternate; a growing conversation stays on turn
 * one's replica (also with a tiny shared prefix); a replica marked down is avoided.
 */
import { describe, expect, it } from "bun:test";
import { chat, choice, conversation, fleet, router, send } from "./_fixtures.ts";

const batch = (n: number, system = "You are helpful.") =>
  Array.from({ length: n }, (_, i) => chat([{ role: "system", content: system }, { role: "user", content: `question ${i}` }]));

function turns(policy: Parameters<typeof router>[0], system: string, n = 8) {
  const r = router(policy);
  const replicas = fleet(2);
  // Unrelated one-shots first, so the conversation does not simply start on gpu0.
  send(r, batch(1, "other")[0]!, replicas);
  const convo = conversation(system, "start the task");
  const picks: string[] = [];
  for (let t = 0; t < n; t++) {
    picks.push(send(r, chat(convo.messages), replicas, t)!.replica);
    convo.next(t);
  }
  return picks;
}

describe("a batch of single-turn requests", () => {
  it.each([["roundrobin"], ["hybrid"]] as const)("%s: uses both replicas and consecutive picks alternate", (policy) => {
    const r = router(policy);
    const replicas = fleet(2);
    const picks = batch(8).map((req) => send(r, req, replicas)!);
    expect(new Set(picks.map((d) => d.replica)).size).toBe(2);
    for (let i = 1; i < picks.length; i++) expect(picks[i]!.replica).not.toBe(picks[i - 1]!.replica);
    expect(picks.every((d) => d.reason === "spread")).toBe(true);
  });

  it("affinity: a batch sharing a system prompt lands on one replica (why pinning everything loses a card)", () => {
    const r = router("affinity");
    const replicas = fleet(2);
    const picks = batch(8).map((req) => send(r, req, replicas)!);
    expect(new Set(picks.map((d) => d.replica)).size).toBe(1);
    expect(picks[0]!.reason).toBe("hash");
    expect(picks.slice(1).every((d) => d.reason === "pin")).toBe(true);
  });

  it("cache-aware: a burst sharing a long system prompt still uses both replicas about evenly", () => {
    const r = router("cache-aware");
    const replicas = fleet(2);
    const counts = new Map<string, number>();
    for (const req of batch(16, "S".repeat(20_000))) {
      const d = send(r, req, replicas)!;
      const rep = replicas.find((x) => x.name === d.replica)!;
      // a burst: nothing finishes while it arrives
      rep.inflight++;
      rep.load++;
      counts.set(d.replica, (counts.get(d.replica) ?? 0) + 1);
    }
    expect(counts.get("gpu0")).toBeGreaterThanOrEqual(7);
    expect(counts.get("gpu1")).toBeGreaterThanOrEqual(7);
  });

  it("least-loaded: goes to the replica with fewer in flight, rotating on ties", () => {
    const r = router("least-loaded");
    expect(send(r, batch(1)[0]!, fleet(2, [{ inflight: 3, load: 3 }, { inflight: 1, load: 1 }]))!.replica).toBe("gpu1");
    const idle = fleet(2);
    expect([send(r, batch(1)[0]!, idle)!.replica, send(r, batch(1)[0]!, idle)!.replica].sort()).toEqual(["gpu0", "gpu1"]);
  });

  it("least-loaded: a load that is not a number (an engine's NaN gauge) is never a crash; a replica with a known load is preferred", () => {
    const r = router("least-loaded");
    expect(send(r, batch(1)[0]!, fleet(2, [{ load: Number.NaN }, { inflight: 2, load: 2 }]))!.replica).toBe("gpu1");
    expect(send(r, batch(1)[0]!, fleet(2, [{ load: Number.NaN }, { load: Number.POSITIVE_INFINITY }]))).toMatchObject({ reason: "load" });
  });

  it("random: uses the injected randomness", () => {
    const r = router("random", { random: () => 0.99 });
    expect(choice(r.route(batch(1)[0]!, fleet(3)))).toEqual({ replica: "gpu2", reason: "random" });
  });
});

describe("a growing conversation stays on turn one's replica", () => {
  it.each([
    ["hybrid", "a long system prompt ".repeat(500)],
    ["hybrid", "tiny"],
    ["affinity", "a long system prompt ".repeat(500)],
    ["affinity", "tiny"],
    ["cache-aware", "a long system prompt ".repeat(500)],
  ] as const)("%s, system prompt of %#", (policy, system) => {
    const picks = turns(policy, system);
    expect(new Set(picks).size).toBe(1);
  });

  it("roundrobin alternates the turns (the cache loss the seed measured)", () => {
    const picks = turns("roundrobin", "sys");
    for (let i = 1; i < picks.length; i++) expect(picks[i]).not.toBe(picks[i - 1]!);
  });

  it("hybrid: turn one is spread; later turns are pins", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const convo = conversation("sys", "go");
    const reasons: string[] = [];
    for (let t = 0; t < 4; t++) {
      reasons.push(send(r, chat(convo.messages), replicas, t)!.reason);
      convo.next(t);
    }
    expect(reasons).toEqual(["spread", "pin", "pin", "pin"]);
  });

  it("hybrid: an unknown continuation is spread, then remembered", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const convo = conversation("sys", "go");
    convo.next(0); // arrives already carrying a turn the router never saw
    const first = send(r, chat(convo.messages), replicas)!;
    expect(first.reason).toBe("spread");
    convo.next(1);
    expect(choice(send(r, chat(convo.messages), replicas))).toEqual({ replica: first.replica, reason: "pin" });
  });

  it("hybrid: when the owner dies the conversation moves to a live replica and stays there", () => {
    const r = router("hybrid");
    const replicas = fleet(3);
    const convo = conversation("sys", "go");
    const owner = send(r, chat(convo.messages), replicas)!.replica;
    convo.next(0);
    replicas.find((x) => x.name === owner)!.healthy = false;
    const moved = send(r, chat(convo.messages), replicas)!;
    expect(moved.replica).not.toBe(owner);
    replicas.find((x) => x.name === owner)!.healthy = true;
    for (let t = 1; t < 4; t++) {
      convo.next(t);
      expect(choice(send(r, chat(convo.messages), replicas))).toEqual({ replica: moved.replica, reason: "pin" });
    }
  });

  it("tenants do not share pins: the same conversation under another tenant is spread anew", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const convo = conversation("sys", "go");
    convo.next(0);
    const a = send(r, chat(convo.messages, { cache_salt: "a" }), replicas)!;
    const b = send(r, chat(convo.messages, {}, { tenant: "b" }), replicas)!;
    expect([a.reason, b.reason]).toEqual(["spread", "spread"]);
    expect(a.replica).not.toBe(b.replica);
  });
});

describe("affinity: rendezvous placement is stable when the fleet changes", () => {
  it("removing one of four replicas moves only the requests it owned", () => {
    const reqs = Array.from({ length: 200 }, (_, i) => chat([{ role: "user", content: `doc ${i}` }]));
    const place = (n: number, down?: number) => {
      const replicas = fleet(n);
      if (down !== undefined) replicas[down]!.healthy = false;
      return reqs.map((q) => router("affinity").route(q, replicas)!.replica);
    };
    const before = place(4);
    const after = place(4, 2);
    const counts = new Map<string, number>();
    before.forEach((rep, i) => {
      counts.set(rep, (counts.get(rep) ?? 0) + 1);
      if (rep !== "gpu2") expect(after[i]).toBe(rep);
      else expect(after[i]).not.toBe("gpu2");
    });
    // and the unknown prefixes spread over all four
    expect(counts.size).toBe(4);
  });
});

describe("cache-aware", () => {
  it("distinct long documents spread to the replica with the smallest cached set", () => {
    const r = router("cache-aware");
    const replicas = fleet(2);
    const docs = ["A", "B", "C", "D"].map((d) => chat([{ role: "user", content: d.repeat(30_000) }]));
    const owners = docs.map((doc) => send(r, doc, replicas)!.replica);
    expect(owners.filter((o) => o === "gpu0")).toHaveLength(2);
    // each document's later readers follow it while load is even
    docs.forEach((doc, i) => expect(choice(send(r, doc, replicas))).toEqual({ replica: owners[i]!, reason: "pin" }));
  });

  it("the imbalance guard overrides a cached match", () => {
    const r = router("cache-aware");
    const replicas = fleet(2);
    const doc = chat([{ role: "user", content: "D".repeat(30_000) }]);
    const owner = send(r, doc, replicas)!.replica;
    const o = replicas.find((x) => x.name === owner)!;
    o.inflight = o.load = 4;
    expect(send(r, doc, replicas)).toMatchObject({ reason: "load" });
    expect(r.route(doc, replicas)!.replica).not.toBe(owner);
  });
});

describe("max_inflight spill (all policies)", () => {
  it.each([["hybrid"], ["affinity"], ["cache-aware"]] as const)(
    "%s: a pinned owner at the threshold spills to the least loaded replica below it",
    (policy) => {
      const r = router(policy, { maxInflight: 2 });
      const replicas = fleet(3);
      const convo = conversation("a long system prompt ".repeat(100), "go");
      const owner = send(r, chat(convo.messages), replicas)!.replica;
      convo.next(0);
      for (const rep of replicas) rep.inflight = rep.load = rep.name === owner ? 2 : 1;
      const others = replicas.filter((x) => x.name !== owner);
      others[1]!.inflight = others[1]!.load = 0;
      // cache-aware's imbalance guard would pick the idlest by itself; keep loads even for it
      if (policy === "cache-aware") others[1]!.load = 1;
      expect(choice(r.route(chat(convo.messages), replicas))).toEqual({ replica: others[1]!.name, reason: "spill" });
    },
  );

  it.each([["roundrobin"], ["random"]] as const)("%s: spreads that land on a full replica spill too", (policy) => {
    const r = router(policy, { maxInflight: 1, random: () => 0 });
    const replicas = fleet(2, [{ inflight: 1 }, { inflight: 0 }]);
    expect(r.route(chat([{ role: "user", content: "q" }]), replicas)).toMatchObject({ replica: "gpu1", reason: "spill" });
  });

  it("when every replica is at the threshold the policy's choice stands", () => {
    const r = router("hybrid", { maxInflight: 1 });
    const replicas = fleet(2, [{ inflight: 1 }, { inflight: 1 }]);
    expect(r.route(chat([{ role: "user", content: "q" }]), replicas)!.reason).toBe("spread");
  });
});

describe("previous_response_id", () => {
  it("goes to the replica that produced the response, never spills, and never goes elsewhere", () => {
    const r = router("hybrid", { maxInflight: 1 });
    r.rememberResponse("resp_1", "gpu1");
    const replicas = fleet(2, [{}, { inflight: 5 }]);
    const req = chat([]);
    const follow = { ...req, shape: { ...req.shape, previousResponseId: "resp_1", continuation: true } };
    expect(choice(r.route(follow, replicas))).toEqual({ replica: "gpu1", reason: "sticky" });
    // Its state exists only on gpu1: no other replica can answer it.
    replicas[1]!.healthy = false;
    expect(r.route(follow, replicas)).toBeUndefined();
  });

  it("an owner outside this model's pool cannot take it: routed by policy, and the engine answers", () => {
    const r = router("hybrid");
    r.rememberResponse("resp_1", "gpu0");
    const poolOfModelB = fleet(2).slice(1); // gpu1 only
    const req = chat([]);
    const follow = { ...req, shape: { ...req.shape, previousResponseId: "resp_1", continuation: true } };
    expect(r.route(follow, poolOfModelB)?.replica).toBe("gpu1");
  });
});
