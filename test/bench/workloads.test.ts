import { describe, expect, it } from "bun:test";
import {
  AGENT_TOOLS,
  agentFirstTokens,
  agentMessages,
  agentPlan,
  burstMessages,
  chatBody,
  CHARS_PER_TOKEN,
  filler,
  hitCeiling,
  ladderRequests,
  newRunId,
  poissonArrivals,
  replyMessage,
  rng,
  saltLine,
  sharedRequests,
  tokensOf,
  type AgentSpec,
  type LadderSpec,
  toolPauses,
} from "../../src/bench/workloads.ts";
import { DEFAULTS } from "../../src/bench/args.ts";
import { createHasher, hex64 } from "../../src/route/hash.ts";
import { linkHash, prefixChains, type PrefixChain } from "../../src/route/chain.ts";
import { shapeOf } from "../../src/route/shape.ts";
import { renderChat } from "../../src/sim/index.ts";
import { parseRequest } from "../../src/sim/prompt-text.ts";

const spec: AgentSpec = { contextTokens: 6_000, turns: 5, turnTokens: 500, replyTokens: 32, systemTokens: 300 };
/** A reply as the sim produces it: replyTokens tokens of CHARS_PER_TOKEN characters. */
const reply = (i: number) => ({ content: `r${i}`.padEnd(spec.replyTokens * CHARS_PER_TOKEN, "z") });
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

describe("mixed: the agents' tool times", () => {
  it("are drawn from the run alone, within MIN..MAX, different between turns and runs", () => {
    const a = toolPauses("20261202T0300-1", 3, 10, [0.5, 2.5]);
    expect(a.length).toBe(3);
    expect(a.every((turns) => turns.length === 10 && turns.every((ms) => ms >= 500 && ms <= 2_500))).toBe(true);
    // The same run gives every arm the same pauses; another run other ones.
    expect(toolPauses("20261202T0300-1", 3, 10, [0.5, 2.5])).toEqual(a);
    expect(toolPauses("20261202T0300-2", 3, 10, [0.5, 2.5])).not.toEqual(a);
    expect(new Set(a.flat()).size).toBe(30);
    expect(toolPauses("r", 2, 3, [1, 1]).flat()).toEqual([1_000, 1_000, 1_000, 1_000, 1_000, 1_000]);
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

describe("llmd: llm-d's shared_prefix ladder", () => {
  const spec: LadderSpec = { groups: 3, promptsPerGroup: 4, systemTokens: 400, questionTokens: 60, replyTokens: 8, warmupRate: 5, rates: [1, 4], rungRequests: 20, seed: 5 };
  const set = spec.groups * spec.promptsPerGroup;
  const reqs = ladderRequests(spec, "salt");

  it("one full set of prompts as the warm-up, then rungRequests at each rate, in order", () => {
    expect(reqs.length).toBe(set + spec.rates.length * spec.rungRequests);
    expect(reqs.map((r) => r.rung)).toEqual([...Array(set).fill(0), ...Array(20).fill(1), ...Array(20).fill(2)]);
  });

  it("the warm-up sends every prompt once; after it, requests cycle through the same shuffled order", () => {
    const warm = reqs.slice(0, set).map((r) => `${r.group}/${r.prompt}`);
    expect(new Set(warm).size).toBe(set);
    expect(warm).not.toEqual([...warm].sort()); // shuffled, as inference-perf does
    for (let i = set; i < reqs.length; i++) expect(reqs[i]!.messages).toEqual(reqs[i - set]!.messages);
  });

  it("a group shares one system prompt; each prompt has its own question; sizes as asked", () => {
    for (let g = 0; g < spec.groups; g++) expect(new Set(reqs.filter((r) => r.group === g).map((r) => r.messages[0]!.content)).size).toBe(1);
    expect(new Set(reqs.map((r) => r.messages[1]!.content)).size).toBe(set);
    expect(new Set(reqs.map((r) => r.messages[0]!.content)).size).toBe(spec.groups);
    expect(tokensOf(reqs[0]!.messages[1]!.content)).toBe(spec.questionTokens);
    expect(Math.abs(tokensOf(reqs[0]!.messages[0]!.content) - spec.systemTokens)).toBeLessThanOrEqual(2);
  });

  it("groups differ in their first prefix link, and the salt is in the first KV block", async () => {
    const hasher = createHasher();
    const firstLinks = new Set(reqs.map((r) => firstLink(prefixChains(shapeOf("chat", chatBody("m", r.messages, 8)), hasher, 1024))));
    expect(firstLinks.size).toBe(spec.groups);
    expect(firstBlock(ladderRequests(spec, "salt a")[0]!.messages)).not.toBe(firstBlock(ladderRequests(spec, "salt b")[0]!.messages));
  });

  it("Poisson arrivals stepped up: increasing, each rung's mean gap about 1/rate", () => {
    const big = ladderRequests({ ...spec, groups: 1, promptsPerGroup: 1, systemTokens: 20, questionTokens: 5, rungRequests: 3_000, warmupRate: 50 }, "s");
    for (let i = 1; i < big.length; i++) expect(big[i]!.atMs).toBeGreaterThanOrEqual(big[i - 1]!.atMs);
    for (const [rung, rate] of [[1, 1], [2, 4]] as const) {
      const times = big.filter((r) => r.rung === rung).map((r) => r.atMs);
      const meanGapMs = (times.at(-1)! - times[0]!) / (times.length - 1);
      expect(meanGapMs).toBeGreaterThan((1_000 / rate) * 0.9);
      expect(meanGapMs).toBeLessThan((1_000 / rate) * 1.1);
    }
  });

  it("is the same for the same seed and salt", () => {
    expect(ladderRequests(spec, "salt")).toEqual(reqs);
    expect(ladderRequests({ ...spec, seed: 6 }, "salt").map((r) => r.group)).not.toEqual(reqs.map((r) => r.group));
  });
});

describe("the default sizes against the sims' KV (2 cards × 122,636 tokens)", () => {
  const card = 122_636;
  it("pressured: the documents exceed one card but fit the fleet, tighter than shared", () => {
    const p = DEFAULTS.pressured.docs * DEFAULTS.pressured.docTokens;
    const s = DEFAULTS.shared.docs * DEFAULTS.shared.docTokens;
    expect(p).toBeGreaterThan(card);
    expect(p).toBeLessThan(2 * card);
    expect(p / (2 * card)).toBeGreaterThan(s / (2 * card));
  });

  it("llmd: the resident prompts (systems + every question) exceed one card and fit the fleet, like llm-d's 73 %", () => {
    const l = DEFAULTS.llmd;
    const resident = l.groups * (l.systemTokens + l.promptsPerGroup * l.questionTokens);
    expect(resident).toBeGreaterThan(card);
    expect(resident / (2 * card)).toBeCloseTo((150 * (6_000 + 5 * 1_200)) / (8 * 307_328), 1);
  });
});

describe("hitCeiling: the compulsory misses", () => {
  const m = (...contents: string[]) => ({ messages: contents.map((content, i) => ({ role: (i === 0 ? "system" : "user") as "system" | "user", content })) });
  const doc = "d".repeat(400); // 100 tokens
  const q = (i: number) => `${i}`.padEnd(40, "q"); // 10 tokens

  it.each([
    ["nothing sent", [], NaN],
    ["one request: nothing to reuse", [m(doc, q(1))], 0],
    ["a document's second request reuses the document", [m(doc, q(1)), m(doc, q(2))], 100 / 220],
    ["the same prompt again reuses all of it", [m(doc, q(1)), m(doc, q(1))], 110 / 220],
    ["a different document reuses nothing", [m(doc, q(1)), m("e".repeat(400), q(1))], 0],
    ["the same question after another document is no prefix", [m(doc, q(1)), m("e".repeat(400), q(1)), m(doc, q(1))], 110 / 330],
  ] as const)("%s", (_what, requests, expected) => {
    const c = hitCeiling(requests);
    if (Number.isNaN(expected)) expect(c).toBeNaN();
    else expect(c).toBeCloseTo(expected, 10);
  });

  it("shared: every request but each document's first reuses its document", () => {
    const s = { docs: 4, docTokens: 300, tailTokens: 20, requests: 50, rate: 2, replyTokens: 8, seed: 7 };
    const reqs = sharedRequests(s, "");
    const docTokens = tokensOf(reqs[0]!.messages[0]!.content);
    const total = reqs.reduce((a, r) => a + tokensOf(r.messages[0]!.content) + tokensOf(r.messages[1]!.content), 0);
    expect(hitCeiling(reqs)).toBeCloseTo(((50 - new Set(reqs.map((r) => r.doc)).size) * docTokens) / total, 10);
  });

  it("llmd: in the warm-up each group's first prompt misses and the others reuse the system prompt; after it, whole prompts repeat", () => {
    const spec: LadderSpec = { groups: 3, promptsPerGroup: 4, systemTokens: 400, questionTokens: 60, replyTokens: 8, warmupRate: 5, rates: [1, 4], rungRequests: 20, seed: 5 };
    const reqs = ladderRequests(spec, "salt");
    const S = tokensOf(reqs[0]!.messages[0]!.content);
    const Q = spec.questionTokens;
    const later = reqs.length - 12;
    expect(hitCeiling(reqs)).toBeCloseTo(((12 - 3) * S + later * (S + Q)) / (reqs.length * (S + Q)), 10);
  });
});

describe("chatBody", () => {
  it("streams with usage, so cached_tokens arrives per request", () => {
    expect(chatBody("m", [{ role: "user", content: "hi" }], 8)).toMatchObject({ model: "m", stream: true, stream_options: { include_usage: true }, max_tokens: 8 });
    expect(chatBody("m", [{ role: "user", content: "hi" }], 8)).not.toHaveProperty("tools");
  });

  it("carries the agent's tools when given: the two its system prompt names, as OpenAI function tools", () => {
    const body = chatBody("m", [{ role: "user", content: "hi" }], 8, AGENT_TOOLS);
    expect((body.tools as { type: string; function: { name: string } }[]).map((t) => [t.type, t.function.name])).toEqual([
      ["function", "read_file"],
      ["function", "run_tests"],
    ]);
    expect(agentPlan(spec, "s").system).toContain("Tools: read_file, run_tests.");
  });
});

describe("replies sent back the way an agent does", () => {
  const plan = agentPlan(spec, "salt");

  it("content verbatim, a DeepSeek-R1 reply's reasoning and </think> included (the template cuts it, not the client)", () => {
    const r1 = { content: "  hmm let me see\n</think>\n\nthe answer" };
    expect(replyMessage(r1)).toEqual({ role: "assistant", content: r1.content });
    expect(agentMessages(plan, [r1], 2)[2]).toEqual({ role: "assistant", content: r1.content });
  });

  it.each(["reasoning_content", "reasoning"] as const)("reasoning returned apart goes back in the field it came in (%s)", (field) => {
    const reply = { content: "the answer", reasoning: { text: "let me see", field } };
    expect(agentMessages(plan, [reply], 2)[2]).toEqual({ role: "assistant", content: "the answer", [field]: "let me see" });
  });

  it("the sim reads it back: under qwen3-reasoning, reasoning after the last query is rendered, as the template does", () => {
    const messages = [
      { role: "system" as const, content: "sys" },
      { role: "user" as const, content: "task" },
      replyMessage({ content: "answer", reasoning: { text: "thinking", field: "reasoning_content" } }),
    ];
    // The last message is the assistant's: it follows the last query, so its reasoning is written.
    expect(parseRequest("/v1/chat/completions", chatBody("m", messages, 8), undefined, "qwen3-reasoning").prompt).toContain("<think>\nthinking\n</think>\n\nanswer");
  });
});

function firstLink(chains: PrefixChain[]): string {
  return hex64(linkHash(chains[0]!, 0));
}
