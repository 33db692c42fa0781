/**
 * The router around the policy: what a decision expects of the cache (available, captured),
 * identity gaps only the index can close (a raw completions prompt, or a chat sent as one
 * message, extending an earlier one), sessions, and commits taken back. What the engine
 * delivered is judged in evidence.test.ts.
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

  it("a chat that sends its whole conversation as one message (flat) and extends one already served is a continuation, and pins", () => {
    const r = router("hybrid-plain");
    const replicas = fleet(2);
    const flat = (content: string) => chat([{ role: "user", content }]);
    const base = `${words(5_000, "agent transcript")}\nAssistant:`;
    const first = send(r, flat(base), replicas)!;
    send(r, flat("something unrelated"), replicas);
    const next = send(r, flat(`${base} I will read the file.\nObservation: ${words(2_000, "file")}`), replicas)!;
    expect(choice(next)).toEqual({ replica: first.replica, reason: "pin" });
    expect(next.estimate.continuation).toBe(true);
  });

  it("a flat chat that shares only a prefix, or repeats an earlier one word for word, is no continuation", () => {
    const r = router("hybrid-plain");
    const replicas = fleet(2);
    const flat = (content: string) => chat([{ role: "user", content }]);
    send(r, flat(`${words(5_000, "shared preamble")} question one`), replicas);
    expect(send(r, flat(`${words(5_000, "shared preamble")} question two, a different ending`), replicas)!.estimate.continuation).toBe(false);
    const again = send(r, flat(`${words(5_000, "shared preamble")} question one`), replicas)!;
    expect(again.estimate.continuation).toBe(false);
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
