/**
 * The router around the policy: what a decision expects of the cache (available, captured),
 * the feedback that corrects the index from what the engine delivered, and identity gaps
 * only the index can close (a raw completions prompt extending an earlier one).
 */
import { describe, expect, it } from "bun:test";
import { chainChars } from "../../src/route/chain.ts";
import { chat, choice, fleet, input, router, send } from "./_fixtures.ts";

const words = (chars: number, label: string) => `${label} `.padEnd(chars, "y");

describe("estimates: available and captured", () => {
  it("available is cached somewhere; captured is cached on the chosen replica", () => {
    const r = router("roundrobin");
    const replicas = fleet(2);
    const doc = (q: string) => chat([{ role: "system", content: words(40_000, "doc") }, { role: "user", content: q }]);
    send(r, doc("a"), replicas); // gpu0 holds the document
    const second = send(r, doc("b"), replicas)!; // round-robin sends this one to gpu1
    expect(second.replica).toBe("gpu1");
    const docChars = chainChars(doc("a").chains[0]!) - "user\u001ea".length;
    expect(second.estimate).toMatchObject({ availableChars: docChars, capturedChars: 0 });
    const third = send(r, doc("c"), replicas)!; // back on gpu0, which holds it
    expect(third.estimate).toMatchObject({ availableChars: docChars, capturedChars: docChars });
    expect(third.estimate.uncachedTokens).toBeCloseTo((chainChars(doc("c").chains[0]!) - docChars) / 4);
  });
});

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
    expect(r.truthOf("gpu0")).toMatchObject({ misses: 1, hits: 0 });
  });

  it("a partial delivery is a miss too: the engine evicted the prefix's tail, and what was used before it", () => {
    const { r, replicas } = setup();
    const again = send(r, long("old B"), replicas, 10)!;
    // ~5,000 tokens expected; the engine had 3,000 of them
    expect(r.feedback("gpu0", again.estimate, 3_000)).toBe("miss");
    expect(r.index.match(long("old A").chains[0]!, "gpu0").depth).toBe(0);
    expect(r.truthOf("gpu0")).toMatchObject({ misses: 1, reported: true, distrusted: false });
  });

  it("a delivered hit confirms; a hit the index did not expect is counted", () => {
    const { r, replicas } = setup();
    const again = send(r, long("newer"), replicas, 10)!;
    expect(r.feedback("gpu0", again.estimate, 4_990)).toBe("hit");
    const cold = send(r, long("never seen"), replicas, 11)!;
    expect(r.feedback(cold.replica, cold.estimate, 4_000)).toBe("unexpected_hit");
    expect(r.feedback(cold.replica, cold.estimate, undefined)).toBeUndefined();
    expect(r.truthOf("gpu0")).toMatchObject({ hits: 1 });
    expect(r.truthOf(cold.replica).unexpectedHits).toBe(1);
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
    expect(r.truthOf("gpu0")).toMatchObject({ hits: 0, misses: 8, distrusted: true });
    // the first seven misses were believed and corrected the index; the eighth was not
    const older = (i: number) => r.index.match(long(`older ${i}`).chains[0]!, "gpu0").depth;
    expect([older(0), older(6), older(7)].map((d) => d > 0)).toEqual([false, false, true]);
    expect(r.truthOf("gpu0").corrected).toBeGreaterThan(0);
  });
});

describe("identity gaps the index closes", () => {
  const completion = (prompt: string) => input("/v1/completions", { model: "m", prompt });

  it("a completions prompt that extends one already served is a continuation, and pins", () => {
    const r = router("hybrid-plain");
    const replicas = fleet(2);
    const base = `${words(5_000, "agent transcript")}\nAssistant:`;
    const first = send(r, completion(base), replicas)!;
    send(r, completion("something unrelated"), replicas);
    const next = `${base} I will read the file.\nObservation: ${words(2_000, "file")}\nAssistant:`;
    expect(choice(send(r, completion(next), replicas))).toEqual({ replica: first.replica, reason: "pin" });
  });

  it("a completions prompt that shares only a prefix (diverges before the end of the earlier one) is not", () => {
    const r = router("hybrid-plain");
    const replicas = fleet(2);
    const base = `${words(5_000, "shared preamble")} question one`;
    send(r, completion(base), replicas);
    const other = `${words(5_000, "shared preamble")} question two, a different ending`;
    expect(send(r, completion(other), replicas)!.reason).toBe("spread");
  });

  it("each prompt of a batch is its own chain: a batch member alone later finds its prefix", () => {
    const r = router("roundrobin");
    const replicas = fleet(2);
    const a = words(3_000, "prompt a");
    const b = words(3_000, "prompt b");
    const batch = send(r, input("/v1/completions", { model: "m", prompt: [a, b] }), replicas)!;
    const alone = r.route(completion(b), replicas)!;
    expect(alone.estimate.availableChars).toBe(b.length);
    expect(batch.estimate.totalChars).toBe(a.length + b.length);
  });
});

describe("what a client's values cost", () => {
  it("a session key is remembered at a fixed size: 40 requests with 1 MB keys leave almost nothing behind, and the keys still work", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const heap = () => {
      Bun.gc(true);
      return process.memoryUsage().heapUsed;
    };
    const key = (i: number) => `${i}:`.padEnd(1_000_000, "k");
    const before = heap();
    const placed: string[] = [];
    for (let i = 0; i < 40; i++) placed.push(send(r, chat([{ role: "user", content: words(800, `first ${i}`) }], {}, { session: key(i) }), replicas, i)!.replica);
    // 40 MB of keys went through; what stays is a few bytes per session
    expect(heap() - before).toBeLessThan(4_000_000);
    const again = send(r, chat([{ role: "user", content: words(800, "a rewritten history") }], {}, { session: key(7) }), replicas, 50)!;
    expect(choice(again)).toEqual({ replica: placed[7]!, reason: "session" });
  });
});

describe("a commit taken back (the replica computed nothing)", () => {
  it("two commits of one prompt in the same millisecond: the failed one's retract leaves what the other one committed", () => {
    const r = router("hybrid");
    const replicas = fleet(1);
    const req = chat([{ role: "user", content: words(5_000, "the same prompt twice") }]);
    const failed = r.commit(req, r.route(req, replicas, 7)!, 7);
    r.commit(req, r.route(req, replicas, 7)!, 7);
    expect(failed()).toBe(0);
    expect(r.index.match(req.chains[0]!, "gpu0").depth).toBe(req.chains[0]!.length);
  });

  it("taken back alone, a commit's new links go, and the links it only touched stay", () => {
    const r = router("hybrid");
    const replicas = fleet(1);
    const shared = { role: "system", content: words(3_000, "shared system prompt") };
    send(r, chat([shared, { role: "user", content: "one" }]), replicas, 1);
    const req = chat([shared, { role: "user", content: words(3_000, "two") }]);
    const retract = r.commit(req, r.route(req, replicas, 2)!, 2);
    const sharedLinks = chat([shared]).chains[0]!.length;
    expect(sharedLinks).toBeGreaterThan(1);
    expect(retract()).toBe(req.chains[0]!.length - sharedLinks);
    expect(r.index.match(req.chains[0]!, "gpu0").depth).toBe(sharedLinks);
  });
});

describe("tools are no shared prefix", () => {
  it("a second conversation with the same tools and its own system prompt is spread, not sent where the first one's tools are", () => {
    const r = router("hybrid");
    const replicas = fleet(2);
    const tools = [{ type: "function", function: { name: "search", description: words(20_000, "searches"), parameters: {} } }];
    const first = (label: string) => chat([{ role: "system", content: words(400, `${label} system`) }, { role: "user", content: `${label} question` }], { tools });
    const a = send(r, first("a"), replicas, 1)!;
    const b = send(r, first("b"), replicas, 2)!;
    // No template renders the tools first (Qwen: after the system text; Mistral 3: before the
    // last user message): the two prompts share no tokens, so nothing is captured anywhere.
    expect(b.estimate).toMatchObject({ availableChars: 0, capturedChars: 0 });
    expect(choice(b)).toEqual({ replica: a.replica === "gpu0" ? "gpu1" : "gpu0", reason: "spread" });
  });
});
