/**
 * What the router learns from what the engine delivered (src/route/evidence.ts): the
 * engine's cached_tokens correct the index; beyond hit and miss, a shortfall is
 * an eviction only when the card could have run out of room; otherwise, on a continuation,
 * it is the chat template re-rendering earlier turns (the index stays as it is). Evictions
 * and hits bound the card's KV from both sides, whatever kv_tokens said.
 */
import { describe, expect, it } from "bun:test";
import { chainChars } from "../../src/route/chain.ts";
import { chat, fleet, router, send } from "./_fixtures.ts";

const words = (chars: number, label: string) => `${label} `.padEnd(chars, "y");
/** A conversation: a long system prompt, then turns. */
const conversation = (label: string, turns: number, systemChars = 20_000, turnChars = 400) => {
  const messages = [{ role: "system", content: words(systemChars, `${label} system`) }];
  for (let t = 0; t < turns; t++) messages.push({ role: "user", content: words(turnChars, `${label} q${t}`) }, { role: "assistant", content: words(turnChars, `${label} a${t}`) });
  messages.push({ role: "user", content: words(turnChars, `${label} q${turns}`) });
  return chat(messages);
};
const oneShot = (label: string) => chat([{ role: "user", content: words(20_000, label) }]);

describe("feedback: the engine's cached_tokens correct the index", () => {
  const long = (label: string) => chat([{ role: "user", content: words(20_000, label) }]);

  function setup() {
    const r = router("hybrid");
    const replicas = fleet(2);
    send(r, long("old A"), [replicas[0]!], 1);
    send(r, long("old B"), [replicas[0]!], 2);
    send(r, long("newer"), [replicas[0]!], 3);
    return { r, replicas };
  }

  it("a settled prediction the engine did not deliver drops what the replica used up to then", () => {
    const { r, replicas } = setup();
    const again = send(r, long("old B"), replicas, 10)!;
    expect(again).toMatchObject({ replica: "gpu0", reason: "cache" });
    expect(r.feedback("gpu0", again.estimate, 0)).toBe("miss");
    // "old A" (older) and "old B" (the evicted one, before this request) went; the newer stayed
    expect(r.index.match(long("old A").chains[0]!, "gpu0").depth).toBe(0);
    expect(r.index.match(long("newer").chains[0]!, "gpu0").depth).toBeGreaterThan(0);
    // and the request itself was just prefilled there again
    expect(r.index.match(long("old B").chains[0]!, "gpu0").chars).toBe(chainChars(long("old B").chains[0]!));
    expect(r.evidence.of("gpu0")).toMatchObject({ misses: 1, hits: 0 });
  });

  it("a partial delivery is a miss too: the engine evicted the prefix's tail, and what was used before it", () => {
    const { r, replicas } = setup();
    const again = send(r, long("old B"), replicas, 10)!;
    // ~5,000 tokens expected; the engine had 3,000 of them
    expect(r.feedback("gpu0", again.estimate, 3_000)).toBe("miss");
    expect(r.index.match(long("old A").chains[0]!, "gpu0").depth).toBe(0);
    expect(r.evidence.of("gpu0")).toMatchObject({ misses: 1, reported: true, distrusted: false });
  });

  it("a delivered hit confirms; a hit the index did not expect is counted", () => {
    const { r, replicas } = setup();
    const again = send(r, long("newer"), replicas, 10)!;
    expect(r.feedback("gpu0", again.estimate, 4_990)).toBe("hit");
    const cold = send(r, long("never seen"), replicas, 11)!;
    expect(r.feedback(cold.replica, cold.estimate, 4_000)).toBe("unexpected_hit");
    expect(r.feedback(cold.replica, cold.estimate, undefined)).toBeUndefined();
    expect(r.evidence.of("gpu0")).toMatchObject({ hits: 1 });
    expect(r.evidence.of(cold.replica).unexpectedHits).toBe(1);
  });

  it("a prediction made while the prefix was still being prefilled is not judged", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    send(r, long("doc"), replicas, 5);
    // The first request has not reached its first byte: gpu0 reports it pending since 5.
    replicas[0]!.pendingSince = 5;
    const sibling = send(r, long("doc"), replicas, 6)!;
    expect(sibling.estimate.settled).toBe(false);
    // The engine computes that prefix again for this one: its queue grows by all of it.
    expect(sibling.estimate.uncachedTokens).toBe(sibling.estimate.totalChars / 4);
    expect(r.feedback("gpu0", sibling.estimate, 0)).toBe("unsettled");
    expect(r.index.match(long("doc").chains[0]!, "gpu0").depth).toBeGreaterThan(0);
  });

  it("on an engine that looks the prefix up when it schedules the request (vLLM), one queued behind its prefill adds only what is new to the queue", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    send(r, long("doc"), replicas, 5);
    // The engine looks the prefix up when this request's turn comes, after that prefill.
    replicas[0]!.pendingSince = 5;
    replicas[0]!.matchedWhenScheduled = true;
    const sibling = send(r, long("doc"), replicas, 6)!;
    expect(sibling.replica).toBe("gpu0");
    // Its queue grows by what is not cached there: nothing of this prompt.
    expect(sibling.estimate.uncachedTokens).toBe(0);
    // Not judged: two requests sent at once may reach the engine the other way round.
    expect(sibling.estimate.settled).toBe(false);
    expect(r.feedback("gpu0", sibling.estimate, 0)).toBe("unsettled");
  });

  it("an engine that never delivers a predicted hit is not believed (its cache may be off)", () => {
    const r = router("hybrid");
    const replicas = fleet(1);
    const miss = (i: number) => {
      send(r, long(`older ${i}`), replicas, i * 3); // what a believed miss drops
      send(r, long("doc"), replicas, i * 3 + 1);
      const again = send(r, long("doc"), replicas, i * 3 + 2)!;
      return r.feedback("gpu0", again.estimate, 0, i * 3 + 2);
    };
    for (let i = 0; i < 8; i++) expect(miss(i)).toBe("miss");
    expect(r.evidence.of("gpu0")).toMatchObject({ hits: 0, misses: 8, distrusted: true });
    // the first seven misses were believed and corrected the index; the eighth was not
    const older = (i: number) => r.index.match(long(`older ${i}`).chains[0]!, "gpu0").depth;
    expect([older(0), older(6), older(7)].map((d) => d > 0)).toEqual([false, false, true]);
    expect(r.evidence.of("gpu0").corrected).toBeGreaterThan(0);
  });
});

describe("a shortfall where the card had room is not an eviction", () => {
  it("a continuation that falls short on a card far from full: template, the index untouched", () => {
    const r = router("hybrid");
    // a 1M-token card: nothing was evicted
    const replicas = fleet(2, [{ budgetChars: 4_000_000 }, { budgetChars: 4_000_000 }]);
    const talk = (label: string, turns: number) => conversation(label, turns, 2_000, 8_000);
    send(r, talk("a", 2), replicas, 1);
    const other = send(r, talk("b", 0), replicas, 2)!;
    const turn = send(r, talk("a", 3), replicas, 3)!;
    expect(turn.reason).toBe("pin");
    const predicted = turn.estimate.capturedChars / 4;
    const entries = r.index.size;
    // the engine delivered the system prompt and the first question only: Qwen3 dropped the
    // reasoning of the assistant turns before the new user message
    expect(r.feedback(turn.replica, turn.estimate, 2_500, 3)).toBe("template");
    expect(predicted).toBeGreaterThan(2_500 / 0.9);
    expect(r.index.size).toBe(entries);
    expect(r.evidence.of(turn.replica)).toMatchObject({ templates: 1, misses: 0, corrected: 0 });
    // the other conversation is still believed held
    expect(r.index.match(talk("b", 0).chains[0]!, other.replica).depth).toBeGreaterThan(0);
  });

  it("rounding to a hybrid model's 1,568-token blocks is a hit, not a miss", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ blockTokens: 1_568 }]);
    send(r, oneShot("doc"), replicas, 1);
    const again = send(r, oneShot("doc"), replicas, 2)!;
    const predicted = again.estimate.capturedChars / 4;
    expect(r.feedback("gpu0", again.estimate, predicted - 1_500, 2)).toBe("hit");
  });

  it("a one-shot that falls short was evicted (nothing re-renders it): a miss, and the KV believed is too large", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ budgetChars: 4_000_000 }]);
    send(r, oneShot("doc 1"), replicas, 1);
    const warm = send(r, oneShot("doc 1"), replicas, 2)!;
    expect(r.feedback("gpu0", warm.estimate, warm.estimate.capturedChars / 4, 2)).toBe("hit");
    send(r, oneShot("doc 2"), replicas, 3);
    send(r, oneShot("doc 3"), replicas, 4);
    const revisit = send(r, oneShot("doc 1"), replicas, 5)!;
    expect(r.feedback("gpu0", revisit.estimate, 0, 5)).toBe("miss");
    // evicted after two other documents of 5,000 tokens: the card holds less than 15,000
    const c = r.evidence.of("gpu0").capacity;
    expect(c.upperTokens).toBeGreaterThan(14_000);
    expect(c.upperTokens).toBeLessThan(16_000);
    expect(r.believedKvTokens("gpu0", 1_000_000, 5, 300_000)).toBe(c.upperTokens!);
  });

  it("a continuation that falls short after others filled most of the card is an eviction", () => {
    const r = router("hybrid");
    // ~20,000 tokens of KV; three conversations of ~5,200 tokens each fit, but two of them
    // since the first one's last use fill more than half of it
    const replicas = fleet(1, [{ budgetChars: 80_000 }]);
    send(r, oneShot("older"), replicas, 1);
    send(r, conversation("a", 0), replicas, 2);
    send(r, conversation("b", 0), replicas, 3);
    send(r, conversation("c", 0), replicas, 4);
    const back = send(r, conversation("a", 1), replicas, 5)!;
    expect(back.reason).toBe("pin");
    expect(r.feedback("gpu0", back.estimate, 0, 5)).toBe("miss");
    // an LRU engine evicted what was used before it too
    expect(r.index.match(oneShot("older").chains[0]!, "gpu0").depth).toBe(0);
    expect(r.evidence.of("gpu0").corrected).toBeGreaterThan(0);
  });
});

describe("an engine with one prompt per slot (llama.cpp)", () => {
  const slotted = () => fleet(1, [{ slots: 2 }]);

  it("with fewer other conversations since than slots, a shortfall is not an eviction", () => {
    const r = router("hybrid");
    const replicas = slotted();
    send(r, conversation("a", 0), replicas, 1);
    send(r, conversation("b", 0), replicas, 2);
    const turn = send(r, conversation("a", 1), replicas, 3)!;
    expect(r.feedback("gpu0", turn.estimate, 100, 3)).toBe("template");
  });

  it("with as many other conversations since as slots, the slot was taken: an eviction", () => {
    const r = router("hybrid");
    const replicas = slotted();
    send(r, conversation("a", 0), replicas, 1);
    const hit = send(r, conversation("a", 1), replicas, 2)!;
    expect(r.feedback("gpu0", hit.estimate, hit.estimate.capturedChars / 4, 2)).toBe("hit");
    send(r, conversation("b", 0), replicas, 3);
    send(r, conversation("c", 0), replicas, 4);
    const turn = send(r, conversation("a", 2), replicas, 5)!;
    expect(r.feedback("gpu0", turn.estimate, 100, 5)).toBe("miss");
  });

  it("four conversations taking turns on two slots miss every turn: a thrashing card, not a cache that is off", () => {
    const r = router("hybrid");
    const replicas = slotted();
    const labels = ["a", "b", "c", "d"];
    let t = 1;
    for (const l of labels) send(r, conversation(l, 0), replicas, t++);
    for (let turn = 1; turn <= 4; turn++) {
      for (const l of labels) {
        const at = t++;
        const sent = send(r, conversation(l, turn), replicas, at)!;
        expect(r.feedback("gpu0", sent.estimate, 0, at)).toBe("miss");
      }
    }
    expect(r.evidence.of("gpu0")).toMatchObject({ misses: 16, unexplained: 0, distrusted: false });
    // and what the slots hold is bounded: less than four conversations' worth
    const upper = r.evidence.of("gpu0").capacity.upperTokens!;
    expect(upper).toBeLessThan((4 * chainChars(conversation("a", 4).chains[0]!)) / 4);
  });

  it("a prefix a running request holds is not settled: another slot has its own KV", () => {
    const r = router("hybrid");
    let running = 0;
    const replicas = fleet(1, [{ slots: 2, busyWith: (tag) => tag === running }]);
    running = r.commit(oneShot("shared"), r.route(oneShot("shared"), replicas, 1)!, 1).tag;
    const burst = r.route(oneShot("shared"), replicas, 2)!;
    expect(burst.estimate.settled).toBe(false);
    running = 0;
    expect(r.route(oneShot("shared"), replicas, 3)!.estimate.settled).toBe(true);
  });

  it("two commits in one millisecond: only the one still running makes its prefix busy (commits are told apart by tag, not time)", () => {
    const r = router("hybrid");
    const running = new Set<number>();
    const replicas = fleet(1, [{ slots: 4, busyWith: (tag) => running.has(tag) }]);
    const held = r.commit(oneShot("shared"), r.route(oneShot("shared"), replicas, 1)!, 1);
    const other = r.commit(oneShot("unrelated"), r.route(oneShot("unrelated"), replicas, 1)!, 1);
    expect(held.tag).not.toBe(other.tag);
    running.add(other.tag); // the unrelated one runs on; the one that holds "shared" has ended
    const next = r.route(oneShot("shared"), replicas, 2)!;
    expect(next.estimate.busyWith).toBeUndefined();
    expect(next.estimate.settled).toBe(true);
  });

  it("hybrid, which waits for slots, names the running request whose slot holds the prefix; a policy that does not, none", () => {
    for (const [policy, named] of [["hybrid", true], ["affinity", false]] as const) {
      const r = router(policy);
      let running = 0;
      const replicas = fleet(1, [{ slots: 2, busyWith: (tag) => tag === running }]);
      running = r.commit(oneShot("shared"), r.route(oneShot("shared"), replicas, 1)!, 1).tag;
      expect(r.route(oneShot("shared"), replicas, 2)!.estimate.busyWith).toBe(named ? running : undefined);
      running = 0;
      expect(r.route(oneShot("shared"), replicas, 3)!.estimate.busyWith).toBeUndefined();
    }
  });
});

describe("the KV believed: a starting figure bounded by the evidence", () => {
  it("an eviction bounds it from above, a hit from below, and an old upper bound relaxes", () => {
    const r = router("hybrid");
    const c = r.evidence.of("gpu0").capacity;
    expect(r.believedKvTokens("gpu0", 100_000, 0, 1_000)).toBe(100_000);
    expect(r.believedKvTokens("gpu0", undefined, 0, 1_000)).toBeUndefined();
    c.upperTokens = 20_000;
    c.upperAt = 0;
    expect(r.believedKvTokens("gpu0", 100_000, 0, 1_000)).toBe(20_000);
    expect(r.believedKvTokens("gpu0", undefined, 0, 1_000)).toBe(20_000);
    // three windows without a new eviction: 30 % more
    expect(r.believedKvTokens("gpu0", 100_000, 3_000, 1_000)).toBeCloseTo(26_000);
    c.lowerTokens = 50_000;
    expect(r.believedKvTokens("gpu0", 10_000, 0, 1_000)).toBe(50_000);
  });

  it("the engine's counters over a window judge an engine whose responses say nothing", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ budgetChars: 40_000 }]);
    send(r, oneShot("doc"), replicas, 1);
    const again = send(r, oneShot("doc"), replicas, 2)!;
    const predicted = again.estimate.capturedChars / 4;
    expect(r.feedback("gpu0", again.estimate, undefined, 2)).toBeUndefined();
    expect(r.evidence.of("gpu0").windowPredictedTokens).toBeCloseTo(predicted);
    expect(r.windowFeedback("gpu0", predicted, 9_000, 10_000, 3)).toBe("hit");
    expect(r.evidence.of("gpu0").windowPredictedTokens).toBe(0);
    const third = send(r, oneShot("doc"), replicas, 4)!;
    r.feedback("gpu0", third.estimate, undefined, 4);
    // Short: judged with the next window, which brings nothing either: a miss.
    expect(r.windowFeedback("gpu0", 0, 9_000, 10_000, 5)).toBeUndefined();
    expect(r.windowFeedback("gpu0", 0, 9_000, 10_000, 6)).toBe("miss");
    expect(r.evidence.of("gpu0").capacity.upperTokens).toBe(9_000);
    expect(chainChars(oneShot("doc").chains[0]!)).toBeGreaterThan(0);
  });

  it("a window read between a hit and its prediction is no miss, whichever came first", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ budgetChars: 40_000 }]);
    send(r, oneShot("doc"), replicas, 1);
    const again = send(r, oneShot("doc"), replicas, 2)!;
    const predicted = again.estimate.capturedChars / 4;
    // SGLang counts a request's cached tokens when it finishes (tokenizer_manager.py
    // collect_metrics), which can come after the router saw its last chunk: the prediction is
    // in this window, the hit in the next.
    r.feedback("gpu0", again.estimate, undefined, 2);
    expect(r.windowFeedback("gpu0", 0, 9_000, 10_000, 3)).toBeUndefined();
    expect(r.windowFeedback("gpu0", predicted, 9_000, 10_000, 4)).toBe("hit");
    // vLLM counts the hit when it schedules the prefill, long before the answer ends: the hit
    // is in this window, the prediction in the next.
    const third = send(r, oneShot("doc"), replicas, 5)!;
    expect(r.windowFeedback("gpu0", predicted, 9_000, 10_000, 6)).toBeUndefined();
    r.feedback("gpu0", third.estimate, undefined, 7);
    expect(r.windowFeedback("gpu0", 0, 9_000, 10_000, 8)).toBe("hit");
    expect(r.evidence.of("gpu0")).toMatchObject({ hits: 2, misses: 0 });
  });
});

describe("where a template ends the cache is learnt, and predicted", () => {
  const charsTo = (req: ReturnType<typeof chat>, role: string, which: "start" | "end", nth: number) => {
    let at = 0;
    let seen = 0;
    for (const [head, text] of req.shape.sequences[0]!) {
      const start = at;
      at += head.length + text.length;
      if (head.startsWith(`${role}\u001e`) && ++seen === nth) return which === "start" ? start : at;
    }
    throw new Error("no such segment");
  };

  it("Qwen3: a new user turn drops the reasoning of the turns before it; after two such shortfalls the hit is predicted where it ends", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ budgetChars: 4_000_000 }]);
    // an agent's turns: user, then assistant/tool pairs; each user turn re-renders the earlier reasoning
    const messages: { role: string; content: string }[] = [{ role: "system", content: words(2_000, "sys") }];
    let t = 1;
    const verdicts: string[] = [];
    const predictedVsDelivered: number[][] = [];
    for (let userTurn = 0; userTurn < 4; userTurn++) {
      messages.push({ role: "user", content: words(400, `question ${userTurn}`) });
      for (let step = 0; step < 2; step++) {
        const req = chat(messages);
        const at = t++;
        const sent = send(r, req, replicas, at)!;
        // the engine's cache: everything when the previous request ended with the same user turn;
        // up to the end of the previous user message when this request adds a new one
        const newUser = step === 0 && userTurn > 0;
        const deliveredChars = newUser ? charsTo(req, "user", "end", userTurn) : sent.estimate.capturedChars;
        const delivered = Math.floor(deliveredChars / 4);
        predictedVsDelivered.push([Math.round(sent.estimate.capturedChars / 4), delivered]);
        if (sent.estimate.capturedChars > 0) verdicts.push(r.feedback("gpu0", sent.estimate, delivered, at)!);
        messages.push({ role: "assistant", content: words(3_000, `reasoning and a call ${userTurn}.${step}`) }, { role: "tool", content: words(3_000, `tool result ${userTurn}.${step}`) });
      }
    }
    // turns 2 and 3's new user messages fell short where no eviction could be: template;
    // by the fourth, the router predicts that shortfall and the engine delivers what it predicted
    expect(verdicts.filter((v) => v === "template")).toHaveLength(2);
    expect(verdicts.filter((v) => v === "miss")).toHaveLength(0);
    expect(verdicts.at(-2)).toBe("hit");
    const [predicted, delivered] = predictedVsDelivered.at(-2)!;
    expect(Math.abs(predicted! - delivered!)).toBeLessThan(16);
    expect(r.evidence.of("gpu0").corrected).toBe(0);
  });

  it("Mistral 3 with tools: the cache ends where the previous last user message began, without the tools", () => {
    const r = router("hybrid");
    const replicas = fleet(1, [{ budgetChars: 4_000_000 }]);
    const tools = [{ type: "function", function: { name: "search", description: words(3_000, "searches"), parameters: {} } }];
    const messages: { role: string; content: string }[] = [{ role: "system", content: words(2_000, "sys") }];
    const verdicts: string[] = [];
    for (let turn = 1; turn <= 5; turn++) {
      messages.push({ role: "user", content: words(1_500, `question ${turn}`) });
      const req = chat(messages, { tools });
      const sent = send(r, req, replicas, turn)!;
      if (turn > 1) {
        // rendered: system, turns…, [AVAILABLE_TOOLS] before the last user message: the cache
        // ends where the previous request's last user message began, tools not included
        const toolsChars = req.shape.sequences[0]![0]![0].length + req.shape.sequences[0]![0]![1].length;
        const delivered = Math.floor((charsTo(req, "user", "start", turn - 1) - toolsChars) / 4);
        verdicts.push(r.feedback("gpu0", sent.estimate, delivered, turn)!);
      }
      messages.push({ role: "assistant", content: words(1_500, `answer ${turn}`) });
    }
    expect(verdicts).toEqual(["template", "template", "hit", "hit"]);
  });

  it("on a card whose KV is unknown, the turns before the break is learnt drop nothing: the shortfall ends where the template ends it", () => {
    const r = router("hybrid");
    // No kv_tokens, nothing published: an eviction is possible whenever anything came between.
    const replicas = fleet(1);
    const tools = [{ type: "function", function: { name: "search", description: words(3_000, "searches"), parameters: {} } }];
    const conversations = ["a", "b"].map((label) => [{ role: "system", content: words(2_000, `${label} sys`) }]);
    const verdicts: string[] = [];
    let t = 0;
    for (let turn = 1; turn <= 4; turn++) {
      // two conversations take turns: the other one's turn came between each turn and its next
      for (const [c, messages] of conversations.entries()) {
        messages.push({ role: "user", content: words(1_500, `${c} question ${turn}`) });
        const req = chat(messages, { tools });
        const sent = send(r, req, replicas, ++t)!;
        // conversation b's first turn shares only the tools with a: nothing to predict
        if (turn === 1) expect(sent.estimate.capturedChars).toBe(0);
        else {
          const toolsChars = req.shape.sequences[0]![0]![0].length + req.shape.sequences[0]![0]![1].length;
          verdicts.push(r.feedback("gpu0", sent.estimate, Math.floor((charsTo(req, "user", "start", turn - 1) - toolsChars) / 4), t)!);
        }
        messages.push({ role: "assistant", content: words(1_500, `answer ${turn}`) });
      }
    }
    expect(verdicts).toEqual(["template", "template", "hit", "hit", "hit", "hit"]);
    expect(r.evidence.of("gpu0")).toMatchObject({ misses: 0, corrected: 0 });
  });
});
