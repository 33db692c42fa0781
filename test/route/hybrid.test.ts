/**
 * The default policy's rule and cost model: the seed's rule at heart (continuations pin,
 * cold one-shots spread), a long held prefix pulls a one-shot, a session key is a soft hint,
 * and every pick is priced in estimated time to first token.
 */
import { describe, expect, it } from "bun:test";
import fc from "fast-check";
import { chat, choice, conversation, fleet, router, send, sendInFlight } from "./_fixtures.ts";
import type { FleetView } from "../../src/route/router.ts";

const TOKEN = 4; // characters per token in the fixture fleet
const words = (tokens: number, label: string) => `${label} `.padEnd(tokens * TOKEN, "x");
const doc = (d: number, question: string) =>
  chat([
    { role: "system", content: words(8_000, `document ${d}`) },
    { role: "user", content: question },
  ]);

describe("hybrid: the seed's rule at heart", () => {
  it("an idle fleet with nothing cached spreads one-shots by the counter", () => {
    const r = router("hybrid");
    const replicas = fleet(3);
    const picks = Array.from({ length: 9 }, (_, i) => send(r, chat([{ role: "user", content: words(2_000, `task ${i}`) }]), replicas)!);
    expect(picks.map((d) => d.replica)).toEqual(["gpu0", "gpu1", "gpu2", "gpu0", "gpu1", "gpu2", "gpu0", "gpu1", "gpu2"]);
    expect(picks.every((d) => d.reason === "spread")).toBe(true);
  });

  it("a cold one-shot passes over the counter's card while it runs requests and another runs none: its prefill would share each step with their decodes", () => {
    const task = (i: number) => chat([{ role: "user", content: words(2_000, `task ${i}`) }]);
    const r = router("hybrid");
    // gpu0, the counter's first pick, runs two requests past their first byte (no queue shows them).
    const replicas = fleet(3, [{ inflight: 2, load: 2 }, {}, {}]);
    expect(choice(send(r, task(0), replicas))).toEqual({ replica: "gpu1", reason: "spread" });
    // Every card running something: the counter decides, where it left off.
    for (const x of replicas) Object.assign(x, { inflight: 1, load: 1 });
    const picks = [1, 2, 3].map((i) => choice(send(r, task(i), replicas)));
    expect(picks).toEqual(["gpu1", "gpu2", "gpu0"].map((replica) => ({ replica, reason: "spread" })));
  });

  it("a burst sharing a long system prompt still uses every card about evenly (the queue prices it)", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const system = words(2_000, "shared subagent prompt");
    const counts = new Map<string, number>();
    for (let i = 0; i < 16; i++) {
      const d = sendInFlight(r, chat([{ role: "system", content: system }, { role: "user", content: words(2_841, `task ${i}`) }]), replicas)!;
      counts.set(d.replica, (counts.get(d.replica) ?? 0) + 1);
    }
    expect(counts.get("gpu0")).toBe(8);
    expect(counts.get("gpu1")).toBe(8);
  });

  it("property: a continuation whose owner has no queue stays with its owner", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 6 }),
        fc.array(fc.nat(200_000), { minLength: 6, maxLength: 6 }),
        fc.integer({ min: 1, max: 8 }),
        fc.nat(5),
        (n, queues, turns, warmup) => {
          const r = router("hybrid");
          const replicas = fleet(n);
          for (let i = 0; i < warmup; i++) send(r, chat([{ role: "user", content: `unrelated ${i}` }]), replicas);
          const convo = conversation(words(500, "agent"), words(3_000, "task"));
          const owner = send(r, chat(convo.messages), replicas)!.replica;
          // Everyone else is as busy as the draw says; the owner is idle.
          replicas.forEach((x, i) => (x.queuedTokens = x.name === owner ? 0 : queues[i]!));
          for (let t = 0; t < turns; t++) {
            convo.next(t);
            expect(choice(send(r, chat(convo.messages), replicas))).toEqual({ replica: owner, reason: "pin" });
          }
        },
      ),
      { numRuns: 100 },
    );
  });
});

describe("hybrid: the cases in between, by estimated time to first token", () => {
  it("a one-shot over a shared document goes where the document is cached", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const first = send(r, doc(1, "what is in section 2?"), replicas)!;
    expect(first.reason).toBe("spread");
    for (const q of ["who wrote it?", "summarise it", "any numbers?"]) {
      expect(choice(send(r, doc(1, q), replicas))).toEqual({ replica: first.replica, reason: "cache" });
    }
    expect(send(r, doc(1, "again"), replicas)!.estimate).toMatchObject({ capturedChars: expect.any(Number), settled: true });
  });

  // Busy by a prefill queue, or — on an engine whose slots are all taken (Ollama's one) — by the
  // generations ahead of its slot, which no prefill queue shows.
  it.each([
    ["queue costs more", (r: FleetView, s: number) => (r.queuedTokens = s * 4_000)],
    ["slot (Ollama's one, busy with others' answers) frees later", (r: FleetView, s: number) => (r.slotWait = () => s)],
  ] as const)("…unless the holder's %s than prefilling the document elsewhere", (_name, busyFor) => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const holder = send(r, doc(1, "first"), replicas)!.replica;
    const busy = replicas.find((x) => x.name === holder)!;
    busyFor(busy, 1.5); // less than prefilling the 8k document elsewhere (2 s): still faster to wait
    expect(choice(send(r, doc(1, "second"), replicas))).toEqual({ replica: holder, reason: "cache" });
    busyFor(busy, 5); // 5 s against 2 s of prefill elsewhere
    const moved = send(r, doc(1, "third"), replicas)!;
    expect(moved.reason).toBe("cost");
    expect(moved.replica).not.toBe(holder);
  });

  it("a continuation leaves its owner only when the owner's queue costs more than re-prefilling it", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const convo = conversation(words(1_000, "agent"), words(20_000, "repository context"));
    const owner = send(r, chat(convo.messages), replicas)!.replica;
    convo.next(0);
    const o = replicas.find((x) => x.name === owner)!;
    o.queuedTokens = 15_000; // the other card would re-prefill ~21k tokens: stay
    expect(choice(send(r, chat(convo.messages), replicas))).toEqual({ replica: owner, reason: "pin" });
    convo.next(1);
    o.queuedTokens = 60_000; // 15 s of someone else's prefill ahead: move
    expect(send(r, chat(convo.messages), replicas)).toMatchObject({ reason: "cost" });
  });


  it("…but not a conversation (its next turns would follow it) nor a cold spread (the counter keeps the backlogs even)", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const convo = conversation(words(1_000, "agent"), words(4_000, "task"));
    const owner = send(r, chat(convo.messages), replicas)!.replica;
    convo.next(0);
    replicas.find((x) => x.name === owner)!.slotWait = () => 20;
    expect(choice(send(r, chat(convo.messages), replicas))).toEqual({ replica: owner, reason: "pin" });
    // The counter's next two picks: the other card, then the owner, slot wait or not.
    const colds = [1, 2].map((i) => choice(send(r, chat([{ role: "user", content: words(2_000, `new task ${i}`) }]), replicas)));
    expect(colds).toEqual([
      { replica: replicas.find((x) => x.name !== owner)!.name, reason: "spread" },
      { replica: owner, reason: "spread" },
    ]);
  });

  it("a session key brings a rewritten (compacted) context back to its replica, as a soft hint", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const session = { session: "agent-7" };
    const before = send(r, chat([{ role: "user", content: words(3_000, "long history") }], {}, session), replicas)!;
    send(r, chat([{ role: "user", content: "someone else" }]), replicas);
    const compacted = chat([{ role: "user", content: words(800, "summary of the history") }], {}, session);
    expect(choice(send(r, compacted, replicas))).toEqual({ replica: before.replica, reason: "session" });
    // never a hard pin: a session's replica that is far busier is left
    replicas.find((x) => x.name === before.replica)!.queuedTokens = 50_000;
    expect(send(r, chat([{ role: "user", content: words(800, "another summary") }], {}, session), replicas)!.reason).toBe("cost");
  });

  it("a request is moved for its price only to a card running no more requests than its pick: the price counts queued prefills, not the decodes that share every step", () => {
    const task = (i: number) => chat([{ role: "user", content: words(2_000, `task ${i}`) }]);
    // The counter picks gpu0, whose queue costs 12 s; gpu1 has nothing queued.
    const queued = { queuedTokens: 50_000, inflight: 3, load: 3 };
    // gpu1 runs three requests, past their first byte: it is moved there.
    expect(choice(send(router("hybrid"), task(0), fleet(2, [queued, { inflight: 3, load: 3 }])))).toEqual({ replica: "gpu1", reason: "cost" });
    // gpu1 runs twelve: their decodes slow each of its steps, which no queue shows; it stays.
    expect(choice(send(router("hybrid"), task(0), fleet(2, [queued, { inflight: 12, load: 12 }])))).toEqual({ replica: "gpu0", reason: "spread" });
  });

  it("a prefix every card holds is no copy: a question over a system prompt both cards hold moves for its price as a cold one would (llm-d's shared_prefix)", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const system = words(6_000, "group system prompt");
    const ask = (i: number) => chat([{ role: "system", content: system }, { role: "user", content: words(1_200, `question ${i}`) }]);
    // The first question is served on gpu0; the second, while gpu0 queues 50k tokens, on gpu1.
    expect(choice(send(r, ask(0), replicas))).toEqual({ replica: "gpu0", reason: "spread" });
    replicas[0]!.queuedTokens = 50_000;
    expect(choice(send(r, ask(1), replicas))).toEqual({ replica: "gpu1", reason: "cost" });
    // Both hold the prompt and both run a request; gpu0 queues 5,000 tokens (1.55 s to a first
    // token there), gpu1 none (0.3 s). Moving copies nothing: gpu1 holds all gpu0 would reuse.
    Object.assign(replicas[0]!, { queuedTokens: 5_000, inflight: 1, load: 1 });
    Object.assign(replicas[1]!, { queuedTokens: 0, inflight: 1, load: 1 });
    const picks = [2, 3].map((i) => choice(send(r, ask(i), replicas)));
    // The counter's turn: gpu1 for the first, gpu0 for the next, which its price moves.
    expect(picks).toEqual([
      { replica: "gpu1", reason: "spread" },
      { replica: "gpu1", reason: "cost" },
    ]);
  });

  it("a cold conversation is placed where the card has KV room for it", () => {
    const r = router("hybrid");
    const budget = 122_636 * TOKEN;
    for (const name of ["gpu0", "gpu1"]) r.index.setBudget(name, budget); // as the fleet sets it
    const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const family = (f: number, tokens: number) => chat([{ role: "user", content: words(tokens, `family ${f}`) }]);
    expect(send(r, family(0, 80_000), replicas)!.replica).toBe("gpu0");
    expect(send(r, family(1, 70_000), replicas)!.replica).toBe("gpu1");
    // Neither card has room for 60k more; gpu1 (70k) overflows less than gpu0 (80k).
    expect(choice(send(r, family(2, 60_000), replicas))).toEqual({ replica: "gpu1", reason: "spread" });
  });
});

describe("hybrid: what a full card would lose", () => {
  const budget = 30_000 * TOKEN;
  const system = words(1_000, "subagent prompt");
  const member = (burst: number, i: number) => chat([{ role: "system", content: system }, { role: "user", content: words(1_500, `burst ${burst} task ${i}`) }]);

  /** Every 0.3 s up to 2.4 s: eight turns, enough for their gaps to count. */
  const early = [300, 600, 900, 1_200, 1_500, 1_800, 2_100, 2_400];

  /** An agent on gpu0 (its turns at `agentTurns`, ms), a burst spread over both cards at 3 s, then a second burst at `at`. */
  const secondBurst = (at: number, agentTurns: number[]) => {
    const r = router("hybrid");
    for (const name of ["gpu0", "gpu1"]) r.index.setBudget(name, budget); // as the fleet sets it
    const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const agent = conversation(words(2_000, "agent"), words(8_000, "task"));
    const owner = send(r, chat(agent.messages), [replicas[0]!], 0)!.replica;
    expect(owner).toBe("gpu0");
    const turn = (at: number, i: number) => {
      agent.next(i);
      agent.messages.push({ role: "user", content: words(300, `tool output ${i}`) });
      expect(choice(send(r, chat(agent.messages), replicas, at))).toEqual({ replica: "gpu0", reason: "pin" });
    };
    agentTurns.filter((t) => t < 3_000).forEach((t, i) => turn(t, i));
    for (let i = 0; i < 16; i++) sendInFlight(r, member(0, i), replicas, 3_000);
    for (const x of replicas) Object.assign(x, { inflight: 0, load: 0, queuedTokens: 0 }); // the burst is answered
    agentTurns.filter((t) => t > 3_000).forEach((t, i) => turn(t, i + 100));
    const counts = new Map<string, number>();
    for (let i = 0; i < 16; i++) {
      const d = sendInFlight(r, member(1, i), replicas, at)!;
      counts.set(d.replica, (counts.get(d.replica) ?? 0) + 1);
    }
    return counts;
  };

  it("a cold prompt when both cards are full pushes out what one cache of both cards' KV would: the fleet's oldest", () => {
    const docOf = (d: number, tokens: number) => chat([{ role: "user", content: words(tokens, `document ${d}`) }]);
    for (const [older, newer] of [["gpu0", "gpu1"], ["gpu1", "gpu0"]] as const) {
      const r = router("hybrid");
      for (const name of ["gpu0", "gpu1"]) r.index.setBudget(name, budget);
      const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
      const on = (name: string) => [replicas.find((x) => x.name === name)!];
      // Both cards full (KV 30k): `older` was sent its documents at 0–2, `newer` at 10–11.
      [15_000, 15_000, 15_000].forEach((t, d) => send(r, docOf(d, t), on(older), d));
      [15_000, 20_000].forEach((t, d) => send(r, docOf(10 + d, t), on(newer), 10 + d));
      const picks = [20, 21, 22].map((d) => Object.values(choice(send(r, docOf(d, 5_000), replicas, d))!).join(" "));
      expect(picks).toEqual([`${older} spread`, `${older} spread`, `${older} spread`]);
    }
  });

  it("…unless that card is prefilling while another idles: the wait there is certain, what the idle card pushes out costs only if asked for again", () => {
    const docOf = (d: number, tokens: number) => chat([{ role: "user", content: words(tokens, `document ${d}`) }]);
    const r = router("hybrid");
    for (const name of ["gpu0", "gpu1"]) r.index.setBudget(name, budget);
    const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const on = (name: string) => [replicas.find((x) => x.name === name)!];
    [15_000, 15_000, 15_000].forEach((t, d) => send(r, docOf(d, t), on("gpu0"), d));
    [15_000, 20_000].forEach((t, d) => send(r, docOf(10 + d, t), on("gpu1"), 10 + d));
    expect(choice(send(r, docOf(20, 5_000), replicas, 20))).toEqual({ replica: "gpu0", reason: "spread" });
    // gpu0, which holds the fleet's oldest KV, is prefilling someone's request; gpu1 runs nothing.
    Object.assign(replicas[0]!, { inflight: 1, load: 1, queuedTokens: 4_000 });
    expect(choice(send(r, docOf(21, 5_000), replicas, 21))).toEqual({ replica: "gpu1", reason: "spread" });
  });

  it("a burst over a full card and one with room: the full card takes fewer while one cache of both would keep what it pushes out, and the queue still gives it its part", () => {
    // gpu0 holds the agent (~13k) and half the first burst (~13k): full; gpu1 half the burst.
    for (const agentTurns of [[...early, 3_500, 4_000], early]) {
      const counts = secondBurst(20_000, agentTurns);
      expect(counts.get("gpu0")).toBeLessThan(8);
      expect(counts.get("gpu0")).toBeGreaterThanOrEqual(4);
    }
  });
});

describe("hybrid: a card that no longer keeps its conversations", () => {
  const budget = 122_636 * TOKEN;
  /** A family: a long first prompt, then turns of `turnTokens` tool output each. */
  const family = (f: number, tokens: number) => {
    const messages = [{ role: "user" as const, content: words(tokens, `family ${f}`) }] as { role: "user" | "assistant"; content: string }[];
    return {
      turn(i: number, turnTokens = 1_000) {
        if (i > 1) messages.push({ role: "assistant", content: `answer ${i}` }, { role: "user", content: words(turnTokens, `family ${f} tool output ${i}`) });
        return chat([...messages]);
      },
    };
  };

  /** A router whose index, as the fleet sets it, believes held only what fits each card. */
  const budgeted = (names: string[]) => {
    const r = router("hybrid");
    for (const name of names) r.index.setBudget(name, budget);
    return r;
  };

  it("two conversations outgrowing one card while the other card is idle: the next turn moves (room), once", () => {
    const r = budgeted(["gpu0", "gpu1"]);
    const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const [f0, f1, f2] = [family(0, 80_000), family(1, 64_000), family(2, 54_000)];
    expect(send(r, f0.turn(1), replicas, 0)!.replica).toBe("gpu0");
    expect(send(r, f1.turn(1), replicas, 1)!.replica).toBe("gpu1");
    expect(send(r, f2.turn(1), replicas, 2)!.replica).toBe("gpu1"); // 64k + 54k fit gpu1's 122.6k
    // f0 is done; f1 and f2 take turns on gpu1, 1,000 tokens more each turn.
    const picks: string[] = [];
    for (let i = 2; i <= 6; i++) {
      for (const [f, conv] of [[1, f1], [2, f2]] as const) picks.push(`f${f}.${i} ${Object.values(choice(send(r, conv.turn(i), replicas, 10 * i + f))!).join(" ")}`);
    }
    // While 64k + 54k and their turns fit 122.6k, both stay pinned. f1's fourth turn takes
    // gpu1 over its KV, but f2's fourth loses less than 512 tokens (67k of f1's came in between
    // and it holds 56k): it stays. f1's fifth would lose more (57k of f2's + its 67k): it moves
    // to gpu0, sent nothing since, and stays there.
    expect(picks).toEqual([
      "f1.2 gpu1 pin", "f2.2 gpu1 pin", "f1.3 gpu1 pin", "f2.3 gpu1 pin",
      "f1.4 gpu1 pin", "f2.4 gpu1 pin", "f1.5 gpu0 room", "f2.5 gpu1 pin", "f1.6 gpu0 pin", "f2.6 gpu1 pin",
    ]);
  });

  it("no move while the other card is as busy: both cards over their KV, the conversations stay pinned", () => {
    const r = budgeted(["gpu0", "gpu1"]);
    const replicas = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const [f0, f1, f2] = [family(0, 80_000), family(1, 64_000), family(2, 54_000)];
    send(r, f0.turn(1), replicas, 0);
    send(r, f1.turn(1), replicas, 1);
    send(r, f2.turn(1), replicas, 2);
    const reasons = new Set<string>();
    for (let i = 2; i <= 6; i++) {
      // f0 keeps working on gpu0: 80k sent there between every two turns of f1 and f2.
      send(r, f0.turn(i), replicas, 10 * i);
      for (const [f, conv] of [[1, f1], [2, f2]] as const) reasons.add(choice(send(r, conv.turn(i), replicas, 10 * i + f))!.reason);
    }
    expect([...reasons]).toEqual(["pin"]);
  });

  it.each([
    // f1 and f2 outgrow gpu0 turn by turn; gpu1, idle, has no KV known: no target.
    ["a card whose KV is not known is no target", ["gpu0"], [{ budgetChars: budget }, {}], 0],
    // gpu1 holds them, and no card's KV is known: nothing triggers a move.
    ["a card with no KV known never moves a conversation", [], [{}, {}], 1],
  ] as const)("%s", (_what, known, views, card) => {
    const r = budgeted([...known]);
    const replicas = fleet(2, [...views]);
    const [f1, f2] = [family(1, 64_000), family(2, 54_000)];
    send(r, f1.turn(1), [replicas[card]!], 1);
    send(r, f2.turn(1), [replicas[card]!], 2);
    for (let i = 2; i <= 6; i++) {
      expect(choice(send(r, f1.turn(i), replicas, 10 * i + 1))).toEqual({ replica: `gpu${card}`, reason: "pin" });
      expect(choice(send(r, f2.turn(i), replicas, 10 * i + 2))).toEqual({ replica: `gpu${card}`, reason: "pin" });
    }
  });

  it("a large new turn alone moves nothing", () => {
    // gpu0 over its KV (an old 70k document, a 60k conversation, a 20k one-shot since): the
    // conversation's next turn pastes 50k. What it held (60k) and what came since (20k) fit,
    // so the card kept it: it stays, though its new prompt and what came since would not fit.
    const r = budgeted(["gpu0", "gpu1"]);
    const two = fleet(2, [{ budgetChars: budget }, { budgetChars: budget }]);
    const paste = family(3, 60_000);
    send(r, chat([{ role: "user", content: words(70_000, "old document") }]), [two[0]!], 0);
    send(r, paste.turn(1), [two[0]!], 1);
    send(r, chat([{ role: "user", content: words(20_000, "one-shot") }]), [two[0]!], 2);
    expect(choice(send(r, paste.turn(2, 50_000), two, 3))).toEqual({ replica: "gpu0", reason: "pin" });
  });

});

describe("hybrid: the queue priced as the engine schedules it", () => {
  it("prefillAhead: an engine that shares its prefill compute makes a short request wait for as much of each other prefill as its own size", async () => {
    const { prefillAhead } = await import("../../src/route/policy.ts");
    const r = { queuedTokens: 7_200 * 3 + 500, queue: [7_200, 7_200, 7_200] };
    // a 1,500-token request behind three 7,200-token cold prompts (and 500 unlisted tokens)
    expect(prefillAhead({ ...r, concurrency: Infinity }, 1_500)).toBe(500 + 3 * 1_500);
    // a first-come queue (no concurrency known): all of it
    expect(prefillAhead(r, 1_500)).toBe(r.queuedTokens);
    // every slot busy (llama.cpp with 2 slots): it waits for a slot, behind all of them
    expect(prefillAhead({ ...r, concurrency: 2 }, 1_500)).toBe(r.queuedTokens);
  });

  it("a document's question stays with the card that holds it while that card prefills others' cold prompts, on an engine that shares its prefill: no copy", () => {
    const r = router("hybrid");
    const shared = { concurrency: Infinity, budgetChars: 8_000 * TOKEN * 4 };
    const replicas = fleet(2, [shared, shared]);
    send(r, doc(0, "first question"), replicas, 1); // gpu0 holds document 0
    // gpu0 is prefilling four other cold documents; gpu1 one
    const busy = fleet(2, [
      { ...shared, queuedTokens: 4 * 8_000, queue: [8_000, 8_000, 8_000, 8_000] },
      { ...shared, queuedTokens: 8_000, queue: [8_000] },
    ]);
    const d = r.route(doc(0, "second question"), busy, 2)!;
    expect(d).toMatchObject({ replica: "gpu0", reason: "cache" });
    // Without knowing how the engine schedules (a first-come queue), the same state copied it.
    const fcfs = fleet(2, [
      { budgetChars: shared.budgetChars, queuedTokens: 4 * 8_000 },
      { budgetChars: shared.budgetChars, queuedTokens: 8_000 },
    ]);
    expect(r.route(doc(0, "second question"), fcfs, 2)!).toMatchObject({ replica: "gpu1", reason: "cost" });
  });
});

describe("hybrid: conversations taking turns at a card's KV wall", () => {
  /** A conversation of `tokens` tokens whose first turn gpu0 served; its second turn (76,000 tokens) as a request. */
  const secondTurn = (r: ReturnType<typeof router>, replicas: FleetView[]) => {
    const messages = [{ role: "user" as const, content: words(75_000, "long conversation") }] as { role: "user" | "assistant"; content: string }[];
    expect(send(r, chat([...messages]), replicas)!.replica).toBe("gpu0");
    messages.push({ role: "assistant", content: "answer 1" }, { role: "user", content: words(1_000, "tool output 2") });
    return chat(messages);
  };
  /** gpu0 holds it and runs another conversation's 65,000-token turn below a wall it admits below 119,000 at; the others are idle. */
  const walled = (waitedSeconds: number, others: Partial<FleetView>[] = [{}]) =>
    fleet(1 + others.length, [{ inflightTokens: 65_000, wall: { admitsBelow: 119_000, waitedSeconds } }, ...others]);
  const decide = (waitedSeconds: number, others?: Partial<FleetView>[], owner: Partial<FleetView> = {}) => {
    const r = router("hybrid");
    const replicas = fleet(3);
    const turn = secondTurn(r, replicas);
    const views = walled(waitedSeconds, others);
    Object.assign(views[0]!, owner);
    const d = send(r, turn, views, 10)!;
    return { ...choice(d), ...(d.from ? { from: d.from } : {}) };
  };

  // Moving costs its whole prefill on gpu1: 76,000 tokens at 4,000 a second, 19 s.
  it("a turn that would wait there moves once the waits at the wall reach its prefill elsewhere — not before", () => {
    expect(decide(0)).toEqual({ replica: "gpu0", reason: "pin" });
    expect(decide(18.5)).toEqual({ replica: "gpu0", reason: "pin" });
    expect(decide(19.5)).toEqual({ replica: "gpu1", reason: "wall", from: "gpu0" });
  });

  it("no move for a turn that fits beside what runs there, or where no card has room beside what runs", () => {
    // 40,000 in flight + 76,000 stay below 119,000: it does not wait.
    expect(decide(100, [{}], { inflightTokens: 40_000 })).toEqual({ replica: "gpu0", reason: "pin" });
    // gpu1 runs 50,000: with 76,000 past the owner's wall (gpu1 has none of its own).
    expect(decide(100, [{ inflightTokens: 50_000 }])).toEqual({ replica: "gpu0", reason: "pin" });
    // 30,000 there fits below the owner's wall, not below gpu1's own lower one.
    expect(decide(100, [{ inflightTokens: 30_000 }])).toEqual({ replica: "gpu1", reason: "wall", from: "gpu0" });
    expect(decide(100, [{ inflightTokens: 30_000, wall: { admitsBelow: 100_000, waitedSeconds: 0 } }])).toEqual({ replica: "gpu0", reason: "pin" });
    // Nothing in flight there but a wall it would not fit below: the card's own conversations
    // would take turns with it.
    expect(decide(100, [{ wall: { admitsBelow: 10_000, waitedSeconds: 0 } }])).toEqual({ replica: "gpu0", reason: "pin" });
    expect(decide(100, [{ wall: { admitsBelow: 100_000, waitedSeconds: 0 } }])).toEqual({ replica: "gpu1", reason: "wall", from: "gpu0" });
    // A card whose KV is known to be smaller than the conversation.
    expect(decide(100, [{ budgetChars: 50_000 * TOKEN }])).toEqual({ replica: "gpu0", reason: "pin" });
  });

  it("no move to a card whose own wall has cost as much waiting: the conversation would take turns there instead", () => {
    expect(decide(100, [{ wall: { admitsBelow: 119_000, waitedSeconds: 100 } }])).toEqual({ replica: "gpu0", reason: "pin" });
    expect(decide(100, [{ wall: { admitsBelow: 119_000, waitedSeconds: 50 } }])).toEqual({ replica: "gpu1", reason: "wall", from: "gpu0" });
  });

  it("of the cards it fits on, the one with the fewest tokens in flight; a slower prefill there must be paid too", () => {
    expect(decide(100, [{ inflightTokens: 20_000 }, { inflightTokens: 10_000 }])).toEqual({ replica: "gpu2", reason: "wall", from: "gpu0" });
    // At 2,000 tokens a second its prefill there takes 38 s: 30 s of waits are not enough.
    expect(decide(30, [{ prefillRate: 2_000 }])).toEqual({ replica: "gpu0", reason: "pin" });
    expect(decide(39, [{ prefillRate: 2_000 }])).toEqual({ replica: "gpu1", reason: "wall", from: "gpu0" });
  });

  it("moved, the conversation's next turns are pinned to its new card", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const messages = [{ role: "user" as const, content: words(75_000, "long conversation") }] as { role: "user" | "assistant"; content: string }[];
    send(r, chat([...messages]), replicas, 0);
    messages.push({ role: "assistant", content: "answer 1" }, { role: "user", content: words(1_000, "tool output 2") });
    expect(choice(send(r, chat([...messages]), walled(30), 10))).toEqual({ replica: "gpu1", reason: "wall" });
    messages.push({ role: "assistant", content: "answer 2" }, { role: "user", content: words(1_000, "tool output 3") });
    // gpu1 holds it deepest now. (gpu0's wall, in these views, still stands with 30 s of waits
    // and a turn in flight: were gpu0 still taken for its owner, this turn would read `wall`.)
    expect(choice(send(r, chat([...messages]), walled(30), 20))).toEqual({ replica: "gpu1", reason: "pin" });
  });
});
