import { describe, expect, it } from "bun:test";
import {
  agentFirstTokens,
  agentMessages,
  agentPlan,
  burstMessages,
  chatBody,
  CHARS_PER_TOKEN,
  filler,
  newRunId,
  poissonArrivals,
  rng,
  saltLine,
  sharedRequests,
  tokensOf,
  type AgentSpec,
} from "../../src/bench/workloads.ts";
import { createHasher, hex64 } from "../../src/route/hash.ts";
import { linkHash, prefixChains, type PrefixChain } from "../../src/route/chain.ts";
import { shapeOf } from "../../src/route/shape.ts";
import { renderChat } from "../../src/sim/index.ts";

const spec: AgentSpec = { contextTokens: 6_000, turns: 5, turnTokens: 500, replyTokens: 32, systemTokens: 300 };
/** A reply as the sim produces it: replyTokens tokens of CHARS_PER_TOKEN characters. */
const reply = (i: number) => `r${i}`.padEnd(spec.replyTokens * CHARS_PER_TOKEN, "z");
/** The sim's first KV block: 16 tokens × 4 characters of the rendered prompt. */
const firstBlock = (messages: { role: string; content: string }[]) => renderChat(messages).slice(0, 64);

describe("filler", () => {
  it("is deterministic in its label, starts with it, and has the asked size", () => {
    const a = filler(1_000, "doc 1");
    expect(filler(1_000, "doc 1")).toBe(a);
    expect(a.startsWith("doc 1\n")).toBe(true);
    expect(a.length).toBe(1_000 * CHARS_PER_TOKEN);
    expect(tokensOf(a)).toBe(1_000);
    expect(filler(1_000, "doc 2")).not.toBe(a);
  });

  it("is words, not one repeated character", () => {
    const words = new Set(filler(500, "x").split(/\s+/));
    expect(words.size).toBeGreaterThan(50);
  });
});

describe("salting: one arm never measures another's warm cache", () => {
  const runs = [newRunId(), newRunId()];
  it("run ids are fresh", () => {
    expect(runs[0]).toMatch(/^[0-9a-f]{12}$/);
    expect(runs[0]).not.toBe(runs[1]);
  });

  const arms: [string, string, string][] = [
    [runs[0]!, "agent", "hybrid"],
    [runs[0]!, "agent", "roundrobin"],
    [runs[0]!, "burst", "hybrid"],
    [runs[1]!, "agent", "hybrid"],
  ];
  const agentPrompts = arms.map(([run, workload, arm]) => agentMessages(agentPlan(spec, saltLine(run, workload, arm)), [], 1));

  it("every arm's prompt differs in its first KV block (so no block of it is shared)", () => {
    const blocks = agentPrompts.map(firstBlock);
    expect(new Set(blocks).size).toBe(arms.length);
  });

  it("every arm's prompt differs in the router's first prefix link", async () => {
    const hasher = createHasher();
    const firstLinks = agentPrompts.map((messages) => firstLink(prefixChains(shapeOf("chat", chatBody("m", messages, 8)), hasher, 1024)));
    expect(new Set(firstLinks).size).toBe(arms.length);
  });

  it("burst and shared prompts carry the salt in their first block too", () => {
    const a = burstMessages({ size: 2, systemTokens: 100, taskTokens: 50, replyTokens: 8 }, saltLine(runs[0]!, "burst", "a"));
    const b = burstMessages({ size: 2, systemTokens: 100, taskTokens: 50, replyTokens: 8 }, saltLine(runs[0]!, "burst", "b"));
    expect(firstBlock(a[0]!)).not.toBe(firstBlock(b[0]!));
    const shared = { docs: 2, docTokens: 200, tailTokens: 20, requests: 4, rate: 1, replyTokens: 8, seed: 3 };
    const x = sharedRequests(shared, saltLine(runs[0]!, "shared", "a"));
    const y = sharedRequests(shared, saltLine(runs[0]!, "shared", "b"));
    expect(firstBlock(x[0]!.messages)).not.toBe(firstBlock(y[0]!.messages));
  });
});

describe("agent", () => {
  const plan = agentPlan(spec, "salt");

  it("turn k carries the system prompt, the task, and k−1 replies each followed by a tool result", () => {
    const replies = [0, 1, 2, 3].map(reply);
    for (let turn = 1; turn <= spec.turns; turn++) {
      const m = agentMessages(plan, replies, turn);
      expect(m.length).toBe(2 + 2 * (turn - 1));
      expect(m.map((x) => x.role)).toEqual(["system", "user", ...Array.from({ length: turn - 1 }, () => ["assistant", "user"] as const).flat()]);
      // Each turn extends the previous one: the prefix a pinned replica holds.
      if (turn > 1) expect(agentMessages(plan, replies, turn).slice(0, m.length - 2)).toEqual(agentMessages(plan, replies, turn - 1));
    }
  });

  it("the last turn's prompt is about contextTokens", () => {
    const replies = [0, 1, 2, 3].map(reply);
    const last = tokensOf(renderChat(agentMessages(plan, replies, spec.turns)));
    expect(Math.abs(last - spec.contextTokens)).toBeLessThan(50);
    expect(plan.toolOutputs.length).toBe(spec.turns - 1);
  });

  it("refuses turns that do not fit the context, naming both", () => {
    expect(agentFirstTokens({ ...spec, turns: 20 })).toBeLessThan(0);
    expect(() => agentPlan({ ...spec, turns: 20 }, "s")).toThrow(/20 turns .* 6000 tokens/);
  });

  it("needs the replies of earlier turns", () => {
    expect(() => agentMessages(plan, [], 2)).toThrow(RangeError);
  });
});

describe("burst", () => {
  it("is `size` one-shots sharing one system prompt, each with its own task", () => {
    const b = burstMessages({ size: 16, systemTokens: 100, taskTokens: 50, replyTokens: 8 }, "salt");
    expect(b.length).toBe(16);
    expect(new Set(b.map((m) => m[0]!.content)).size).toBe(1);
    expect(new Set(b.map((m) => m[1]!.content)).size).toBe(16);
    expect(b.every((m) => m.length === 2 && m[0]!.role === "system" && m[1]!.role === "user")).toBe(true);
  });
});

describe("shared", () => {
  const s = { docs: 4, docTokens: 300, tailTokens: 20, requests: 400, rate: 2, replyTokens: 8, seed: 7 };

  it("poisson arrivals: increasing, mean gap 1/rate", () => {
    const times = poissonArrivals(4_000, 2, rng(1));
    expect(times[0]).toBe(0);
    for (let i = 1; i < times.length; i++) expect(times[i]!).toBeGreaterThanOrEqual(times[i - 1]!);
    const meanGapMs = times.at(-1)! / (times.length - 1);
    expect(meanGapMs).toBeGreaterThan(450);
    expect(meanGapMs).toBeLessThan(550);
  });

  it("requests: the asked count, every document used, one text per document, distinct tails", () => {
    const reqs = sharedRequests(s, "salt");
    expect(reqs.length).toBe(400);
    expect(new Set(reqs.map((r) => r.doc))).toEqual(new Set([0, 1, 2, 3]));
    for (let d = 0; d < 4; d++) expect(new Set(reqs.filter((r) => r.doc === d).map((r) => r.messages[0]!.content)).size).toBe(1);
    expect(new Set(reqs.map((r) => r.messages[1]!.content)).size).toBe(400);
  });

  it("documents differ from their first prefix link (distinct RAG documents, not one system prompt)", async () => {
    const hasher = createHasher();
    const reqs = sharedRequests(s, "salt");
    const first = new Map(reqs.map((r) => [r.doc, firstLink(prefixChains(shapeOf("chat", chatBody("m", r.messages, 8)), hasher, 1024))]));
    expect(new Set(first.values()).size).toBe(4);
  });

  it("is the same for the same seed and salt", () => {
    expect(sharedRequests(s, "salt")).toEqual(sharedRequests(s, "salt"));
    expect(sharedRequests({ ...s, seed: 8 }, "salt").map((r) => r.doc)).not.toEqual(sharedRequests(s, "salt").map((r) => r.doc));
  });
});

describe("chatBody", () => {
  it("streams with usage, so cached_tokens arrives per request", () => {
    expect(chatBody("m", [{ role: "user", content: "hi" }], 8)).toMatchObject({ model: "m", stream: true, stream_options: { include_usage: true }, max_tokens: 8 });
  });
});

function firstLink(chains: PrefixChain[]): string {
  return hex64(linkHash(chains[0]!, 0));
}
