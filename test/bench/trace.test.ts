/**
 * The trace workload's pure parts: the parser (every bad line names file, line and field),
 * the conversations, the sample, the window, the text (the same every time, sharing exactly
 * the blocks the trace says in both shapes), the yardsticks on cases small enough to check
 * by hand, and the arms' order over runs.
 */
import { describe, expect, it } from "bun:test";
import { join } from "node:path";
import { LlmrouteError } from "../../src/errors.ts";
import { fineBlocks, lruHits, LruBlocks, traceBlocks, traceYardstick, type BlockRequest } from "../../src/bench/pooled.ts";
import { armOrder, armsOf } from "../../src/bench/run.ts";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { findConversations, keeps, loadTrace, parseTraceLine, planTrace, readTrace, sharedPreamble, TRACE_DEFAULTS, type TraceRecord, type TraceSpec } from "../../src/bench/trace.ts";
import { blockText, recordText, traceMessages } from "../../src/bench/trace-text.ts";
import { renderChat, resolveSimOptions } from "../../src/sim/index.ts";
import { pooledSimOptions } from "../../src/bench/targets.ts";
import { cardText } from "../../src/bench/report.ts";
import { smallTraceText, SMALL_TRACE_BLOCK_TOKENS } from "../../scripts/make-small-trace.ts";
import { tempDir } from "../helpers/tmp.ts";

const SMALL = join(import.meta.dir, "../fixtures/trace/small.jsonl");
const B = 4;

/** A record with ids, its input a whole number of blocks plus `partial` tokens. */
function rec(line: number, timestamp: number, ids: number[], partial = 0, output = 10): TraceRecord {
  return { line, timestamp, inputLength: (partial > 0 ? ids.length - 1 : ids.length) * B + partial, outputLength: output, hashIds: ids };
}

const spec = (over: Partial<TraceSpec> = {}): TraceSpec => ({ ...TRACE_DEFAULTS, file: "t.jsonl", blockTokens: B, ...over });

async function writeTrace(text: string): Promise<string> {
  const file = join(await tempDir("llmroute-trace-"), "t.jsonl");
  await Bun.write(file, text);
  return file;
}

function usageError(f: () => unknown): string {
  try {
    f();
  } catch (error) {
    expect(error).toBeInstanceOf(LlmrouteError);
    expect((error as LlmrouteError).code).toBe("usage");
    return (error as Error).message;
  }
  throw new Error("no error");
}

async function usageErrorOf(p: Promise<unknown>): Promise<string> {
  const error = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(LlmrouteError);
  expect((error as LlmrouteError).code).toBe("usage");
  return (error as Error).message;
}

describe("parseTraceLine: a bad line names the file, the line and the field, and what would be valid", () => {
  const good = { timestamp: 5, input_length: 10, output_length: 3, hash_ids: [0, 1, 2] };
  const line = (o: Record<string, unknown>) => JSON.stringify({ ...good, ...o });

  it("a good line", () => {
    expect(parseTraceLine(line({}), "t.jsonl", 7, B)).toEqual({ line: 7, timestamp: 5, inputLength: 10, outputLength: 3, hashIds: [0, 1, 2] });
  });

  it.each([
    ["not JSON", "{timestamp: 0", /^t\.jsonl:7: not JSON \(.+\); each line must be one JSON object, e\.g\. \{"timestamp"/],
    ["not an object", "[1, 2]", /^t\.jsonl:7: not a JSON object \(an array\)/],
    ["a missing field", JSON.stringify({ timestamp: 0, output_length: 3, hash_ids: [0] }), /^t\.jsonl:7: field input_length: missing; must be the prompt's tokens, a whole number >= 1$/],
    ["a wrong type", line({ timestamp: "0" }), /^t\.jsonl:7: field timestamp: "0" is a string; must be milliseconds from the trace's start, a number >= 0$/],
    ["a negative length", line({ output_length: -1 }), /^t\.jsonl:7: field output_length: -1 is negative; must be the reply's tokens, a whole number >= 0$/],
    ["a fractional length", line({ input_length: 9.5 }), /^t\.jsonl:7: field input_length: 9\.5; must be the prompt's tokens, a whole number >= 1$/],
    ["an empty prompt", line({ input_length: 0, hash_ids: [] }), /^t\.jsonl:7: field input_length: 0; must be/],
    ["hash_ids not an array", line({ hash_ids: "0,1,2" }), /^t\.jsonl:7: field hash_ids: a string; must be an array of 3 block ids/],
    ["a bad id", line({ hash_ids: [0, -1, 2] }), /^t\.jsonl:7: field hash_ids: item 1 is -1; must be an array of 3 block ids \(whole numbers >= 0\)/],
    ["ids for another block size", line({ hash_ids: [0, 1] }), /^t\.jsonl:7: field hash_ids: 2 ids; must be an array of 3 block ids .+ input_length 10.+--trace-block-tokens, 4 now/],
  ])("%s", (_what, text, message) => {
    expect(usageError(() => parseTraceLine(text, "t.jsonl", 7, B))).toMatch(message);
  });

  it("timestamps out of order name both lines", () => {
    const before = parseTraceLine(line({ timestamp: 300 }), "t.jsonl", 3, B);
    expect(usageError(() => parseTraceLine(line({ timestamp: 200 }), "t.jsonl", 4, B, before))).toBe(
      "t.jsonl:4: field timestamp: 200 is earlier than line 3's 300; a trace must be in arrival order (sort it by timestamp)",
    );
    // Equal timestamps are in order.
    expect(parseTraceLine(line({ timestamp: 300 }), "t.jsonl", 4, B, before).timestamp).toBe(300);
  });
});

describe("readTrace: the whole file, streamed, checked before anything is sent", () => {
  it("reads every line, skipping blank ones, with their line numbers", async () => {
    const file = await writeTrace(`${JSON.stringify({ timestamp: 0, input_length: 5, output_length: 1, hash_ids: [0, 1] })}\n\n${JSON.stringify({ timestamp: 9, input_length: 4, output_length: 1, hash_ids: [0] })}`);
    const records = await readTrace(file, B);
    expect(records.map((r) => [r.line, r.timestamp])).toEqual([
      [1, 0],
      [3, 9],
    ]);
  });

  it("a bad line deep in the file names its line", async () => {
    const ok = (t: number) => JSON.stringify({ timestamp: t, input_length: 4, output_length: 1, hash_ids: [0] });
    const file = await writeTrace([ok(0), ok(1), ok(2), "not json", ok(4)].join("\n"));
    expect(await usageErrorOf(readTrace(file, B))).toStartWith(`${file}:4: not JSON`);
  });

  it("timestamps out of order across lines", async () => {
    const ok = (t: number) => JSON.stringify({ timestamp: t, input_length: 4, output_length: 1, hash_ids: [0] });
    const file = await writeTrace([ok(0), ok(50), ok(40)].join("\n"));
    expect(await usageErrorOf(readTrace(file, B))).toBe(`${file}:3: field timestamp: 40 is earlier than line 2's 50; a trace must be in arrival order (sort it by timestamp)`);
  });

  it("an empty file, and a missing one", async () => {
    const empty = await writeTrace("\n\n");
    expect(await usageErrorOf(readTrace(empty, B))).toStartWith(`${empty}:2: empty: no request in the file`);
    expect(await usageErrorOf(readTrace(`${empty}.nope`, B))).toStartWith(`${empty}.nope: no such file`);
  });

  it("the small trace is what its script writes, and reads whole", async () => {
    expect(await Bun.file(SMALL).text()).toBe(smallTraceText());
    const records = await readTrace(SMALL, SMALL_TRACE_BLOCK_TOKENS);
    expect(records.length).toBe(177);
  });

  it("loadTrace refuses a window that measures nothing", async () => {
    expect(await usageErrorOf(loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, startMinutes: 60 }))).toMatch(/no request to measure: the window \(--trace-start 60/);
  });
});

describe("conversations: chains of requests that extend each other's full blocks", () => {
  // Block 0 is the preamble every request has. 1 → 2 → 3 is one conversation: each turn
  // re-sends the previous one's full blocks; the previous partial block (id 12, 13) is not shared.
  const records = [
    rec(1, 0, [0, 1, 12], 2), // a: full [0, 1]
    rec(2, 1, [0, 5, 6], 0), // b: another conversation: only the preamble in common with a
    rec(3, 2, [0, 1, 2, 13], 3), // a's second turn: starts with a's full blocks [0, 1]
    rec(4, 3, [0, 14], 1), // only the preamble: its own conversation
    rec(5, 4, [0, 1, 2, 3, 15], 1), // a's third turn: extends turn 2 ([0, 1, 2]), the longest
    rec(6, 5, [0, 5, 6, 7], 0), // b's second turn
    rec(7, 6, [0, 1, 16], 2), // a re-ask of a's first turn: extends it (its own full blocks end inside a's chain)
  ];
  const c = findConversations(records, B);

  it("the preamble is the leading blocks every request shares, and chains nothing", () => {
    expect(c.preamble).toBe(1);
    expect(sharedPreamble([rec(1, 0, [3, 4], 0), rec(2, 0, [3, 4, 9], 1)], B)).toBe(2);
    // Never longer than some request's full blocks.
    expect(sharedPreamble([rec(1, 0, [3, 4], 2), rec(2, 0, [3, 4, 9], 1)], B)).toBe(1);
  });

  it("each request's conversation, parent and turn", () => {
    expect(c.conversation).toEqual([0, 1, 0, 2, 0, 1, 0]);
    expect(c.parent).toEqual([-1, -1, 0, -1, 2, 1, 0]);
    expect(c.turn).toEqual([1, 1, 2, 1, 3, 2, 2]);
    expect(c.count).toBe(3);
  });

  it("a request whose full blocks end inside a longer chain is no one's parent: every request's turns agree where they share blocks", () => {
    // p's full blocks run to depth 5; s's ([0, 1, 2]) end inside them, after p. q shares
    // [0, 1, 2, 3] with p: had s become q's parent, q would carry a turn boundary after
    // block 2 that p does not, and their prompts would part a block before the trace says.
    const pq = [rec(1, 0, [0, 1, 2, 3, 4, 30], 1), rec(2, 1, [0, 1, 2, 31], 2), rec(3, 2, [0, 1, 2, 3, 9, 32], 1), rec(4, 3, [0, 5, 33], 1)];
    const cs = findConversations(pq, B);
    expect(cs.preamble).toBe(1);
    expect(cs.parent).toEqual([-1, -1, -1, -1]);
    const plan = { records: pq, conversations: cs };
    const [p, q] = [0, 2].map((i) => renderChat(traceMessages(plan, i, "chat", "[salt]", B) as never));
    let shared = 0;
    while (p![shared] === q![shared]) shared++;
    // The salt line, blocks 0–3, and the markers between: 4 blocks of 16 characters in common.
    expect(p!.slice(0, shared)).toContain(blockText(3, B));
  });

  it("on the small trace: 64 conversations of 1–5 turns, every later turn extending its parent's full blocks", async () => {
    const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64 });
    const { conversations: cs, records: rs } = plan;
    expect(cs.count).toBe(64);
    expect(cs.preamble).toBe(2);
    expect(Math.max(...cs.turn)).toBe(5);
    rs.forEach((r, i) => {
      const p = cs.parent[i]!;
      if (p < 0) return;
      const full = Math.floor(rs[p]!.inputLength / 64);
      expect(r.hashIds.slice(0, full)).toEqual(rs[p]!.hashIds.slice(0, full));
      expect(cs.conversation[i]).toBe(cs.conversation[p]!);
    });
  });
});

describe("the sample, the window and the speed", () => {
  const many = Array.from({ length: 400 }, (_, i) => rec(i + 1, i * 1_000, [0, i + 1, 1000 + i], 1));

  it("keeps about 1 of every K conversations, whole; half the K keeps a superset", () => {
    const plan8 = planTrace(many, spec({ sample: 8 }));
    const plan4 = planTrace(many, spec({ sample: 4 }));
    expect(plan8.keptConversations).toBeGreaterThan(400 / 8 / 2);
    expect(plan8.keptConversations).toBeLessThan((400 / 8) * 2);
    const kept4 = new Set(plan4.requests.map((r) => r.conversation));
    expect(plan8.requests.every((r) => kept4.has(r.conversation))).toBe(true);
    expect(plan4.keptConversations).toBeGreaterThan(plan8.keptConversations);
  });

  it("the same seed keeps the same conversations; another seed others", () => {
    const kept = (seed: number) => Array.from({ length: 400 }, (_, c) => keeps({ sample: 4, sampleSeed: seed }, c));
    expect(kept(1)).toEqual(kept(1));
    expect(kept(2)).not.toEqual(kept(1));
  });

  it("a sampled conversation keeps all its turns", async () => {
    const plan = planTrace(await readTrace(SMALL, 64), { ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, sample: 3 });
    const turns = (c: number, rs: readonly { conversation: number }[]) => rs.filter((r) => r.conversation === c).length;
    const all = plan.conversations.conversation.map((conversation) => ({ conversation }));
    for (const c of new Set(plan.requests.map((r) => r.conversation))) expect(turns(c, plan.requests)).toBe(turns(c, all));
  });

  it("a window: the warm-up from --trace-start, then the measured minutes; arrivals from the window's start, sped up", () => {
    const plan = planTrace(many, spec({ startMinutes: 1, warmupMinutes: 1, minutes: 2, speed: 2 }));
    expect(plan.window).toEqual({ startMs: 60_000, warmupEndMs: 120_000, endMs: 240_000 });
    expect(plan.requests.length).toBe(180);
    expect(plan.requests.filter((r) => r.warmup).length).toBe(60);
    expect(plan.requests[0]).toMatchObject({ record: 60, atMs: 0, warmup: true });
    expect(plan.requests[60]).toMatchObject({ record: 120, atMs: 30_000, warmup: false });
    expect(plan.requests.at(-1)).toMatchObject({ record: 239, atMs: 89_500 });
  });
});

describe("the text: the same every time, sharing exactly the trace's blocks", () => {
  const salt = "[bench 0123456789ab trace hybrid]";

  it("a block's text is its id's, block × 4 characters, and a partial block its start", () => {
    expect(blockText(7, 64)).toBe(blockText(7, 64));
    expect(blockText(7, 64)).not.toBe(blockText(8, 64));
    expect(blockText(7, 64).length).toBe(256);
    const r = rec(1, 0, [3, 7], 2);
    expect(recordText(r, B)).toBe(blockText(3, B) + blockText(7, B).slice(0, 8));
  });

  /** The rendered prompt (ChatML, as the sim renders it) and where the flat text's character `c` lands in it. */
  function rendered(messages: { role: string; content: string }[], c: number): { text: string; at: number } {
    const text = renderChat(messages as never);
    let flat = 0;
    let out = 0;
    for (const m of messages) {
      const head = `<|im_start|>${m.role}\n`.length;
      if (c <= flat + m.content.length) return { text, at: out + head + (c - flat) };
      flat += m.content.length;
      out += head + m.content.length + "<|im_end|>\n".length;
    }
    return { text, at: out };
  }

  const common = (a: string, b: string) => {
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    return i;
  };

  it.each(["chat", "flat"] as const)("%s: each request's contents, joined, are the salt line and the trace's text", async (shape) => {
    const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64 });
    plan.records.forEach((r, i) => {
      const messages = traceMessages(plan, i, shape, salt, 64);
      expect(messages.map((m) => m.content).join("")).toBe(`${salt}\n${recordText(r, 64)}`);
      expect(messages.at(-1)!.role).toBe("user");
      expect(traceMessages(plan, i, shape, salt, 64)).toEqual(messages);
    });
  });

  it.each(["chat", "flat"] as const)("%s: two requests that share k blocks render alike through those k blocks and differ within the next", async (shape) => {
    const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64 });
    const rs = plan.records;
    let pairs = 0;
    for (let i = 0; i < rs.length; i++) {
      for (let j = 0; j < i; j++) {
        let k = 0;
        while (k < rs[i]!.hashIds.length && rs[i]!.hashIds[k] === rs[j]!.hashIds[k]) k++;
        // Only full blocks are shared (a partial block's id is its own).
        k = Math.min(k, Math.floor(rs[i]!.inputLength / 64), Math.floor(rs[j]!.inputLength / 64));
        if (k === 0) continue;
        const end = salt.length + 1 + k * 64 * 4;
        const a = rendered(traceMessages(plan, i, shape, salt, 64), end);
        const b = rendered(traceMessages(plan, j, shape, salt, 64), end);
        const shared = common(a.text, b.text);
        expect(shared).toBeGreaterThanOrEqual(a.at);
        // Past block k, at most the chat markers after a message that ended there, and a block tag's common start.
        expect(shared).toBeLessThan(a.at + 48);
        pairs++;
      }
    }
    expect(pairs).toBeGreaterThan(1_000);
  });

  it("chat: the preamble is the system message, earlier turns are reply and user messages, the new text last", async () => {
    const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64 });
    const third = plan.records.findIndex((_, i) => plan.conversations.turn[i] === 3);
    const messages = traceMessages(plan, third, "chat", salt, 64);
    expect(messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user"]);
    expect(messages[0]!.content).toBe(`${salt}\n${blockText(0, 64)}${blockText(1, 64)}`);
    // The reply is as long as the previous turn's output, where the next blocks hold it.
    const parent = plan.conversations.parent[third]!;
    expect(messages[4]!.content.length).toBe(plan.records[parent]!.outputLength * 4);
    expect(traceMessages(plan, third, "flat", salt, 64)).toEqual([{ role: "user", content: `${salt}\n${recordText(plan.records[third]!, 64)}` }]);
  });
});

describe("the yardsticks: one LRU cache, and an infinite one", () => {
  const req = (keys: number[], counted = true, lastTokens = B): BlockRequest => ({ keys, lastTokens, inputTokens: (keys.length - 1) * B + lastTokens, counted });

  it("hits are the leading blocks present, full ones only, in tokens", () => {
    // [1,2,3] cold; [1,2,4] hits 1,2; [1,2,3] hits all three; [9,2,3]: 9 absent ends the hit.
    const r = lruHits([req([1, 2, 3]), req([1, 2, 4]), req([1, 2, 3]), req([9, 2, 3])], Infinity, B);
    expect(r).toEqual({ hitTokens: 5 * B, promptTokens: 12 * B, hitRate: 5 / 12, requests: 4 });
    // A partial last block is never a hit, even when present.
    expect(lruHits([req([1, 2], true, 2), req([1, 2], true, 2)], Infinity, B).hitTokens).toBe(B);
  });

  it("evicts the least recently used, a request's tail before its head", () => {
    // Room for 3: after [1,2,3] the order (old → new) is 3,2,1; [4] evicts 3; [1,2,3] hits 1,2.
    const r = lruHits([req([1, 2, 3], false), req([4], false), req([1, 2, 3])], 3, B);
    expect(r.hitTokens).toBe(2 * B);
    const lru = new LruBlocks(2);
    lru.touch(1);
    lru.touch(2);
    lru.touch(1);
    lru.touch(3);
    expect([lru.has(1), lru.has(2), lru.has(3), lru.size]).toEqual([true, false, true, 2]);
  });

  it("the warm-up fills the cache but is not counted", () => {
    expect(lruHits([req([1, 2], false), req([1, 2, 3])], Infinity, B)).toMatchObject({ hitTokens: 2 * B, promptTokens: 3 * B, requests: 1 });
  });

  it("in finer blocks, a partial trace block's full sub-blocks are keys of their own", () => {
    const r = rec(1, 0, [5, 6], 3);
    expect(traceBlocks(r, B, true)).toEqual({ keys: [5, 6], lastTokens: 3, inputTokens: 7, counted: true });
    // 4-token blocks in 2-token ones: id 5 → keys 10, 11; the partial 3 tokens of id 6 → 12 (full), 13 (1 token).
    expect(fineBlocks(r, B, 2, true)).toEqual({ keys: [10, 11, 12, 13], lastTokens: 1, inputTokens: 7, counted: true });
  });

  it("over a plan: the ceiling ≥ the pooled cache, which is unknown without the cards' KV", async () => {
    const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, warmupMinutes: 2 });
    const big = traceYardstick(plan, 10_000_000);
    const small = traceYardstick(plan, 2_000);
    expect(big.requests).toBe(plan.requests.filter((r) => !r.warmup).length);
    expect(big.pooled!.hitRate).toBeCloseTo(big.ceiling.hitRate, 12);
    expect(small.pooled!.hitRate).toBeLessThan(big.pooled!.hitRate);
    expect(small.pooled!.hitRate).toBeGreaterThan(0);
    expect(traceYardstick(plan, 0).pooled).toBeUndefined();
  });
});

describe("arms and their order", () => {
  it("odd runs go forward, even runs backward: A B C, C B A", () => {
    expect([1, 2, 3, 4].map((r) => armOrder(["a", "b", "c"], r).join(""))).toEqual(["abc", "cba", "abc", "cba"]);
  });

  it("a trace on sims adds the pooled arm after the oracle; on real replicas neither", () => {
    const o = parseBenchArgs({ trace: "t.jsonl", policies: "roundrobin,hybrid" });
    expect(armsOf("trace", o, { kind: "sim" })).toEqual(["roundrobin", "hybrid", "oracle", "pooled"]);
    expect(armsOf("agent", o, { kind: "sim" })).toEqual(["roundrobin", "hybrid", "oracle"]);
    expect(armsOf("trace", o, { kind: "config" })).toEqual(["roundrobin", "hybrid"]);
    expect(armsOf("trace", parseBenchArgs({ trace: "t.jsonl", pooled: false }), { kind: "sim" })).not.toContain("pooled");
  });
});

describe("card profiles and the pooled sim", () => {
  it("h100-8b and 4xh100-70b: the KV, rates and sequences of their sources; the card's step budget over the engine profile's", () => {
    const h100 = resolveSimOptions({ profile: "h100-8b", engine: "vllm-details" });
    expect([h100.kvTokens, h100.prefillTps, h100.decodeTps, h100.maxSeqs, h100.decodeBatchSlowdown, h100.prefillChunkTokens, h100.maxModelLen]).toEqual([467_280, 50_000, 170, 1_024, 0.08, 8_192, 131_072]);
    // Llama-3.1-8B bf16: 2 × 32 layers × 8 KV heads × 128 dims × 2 bytes = 128 KiB a token; 467,280 tokens = 57 GiB of an 80 GB card.
    expect((h100.kvTokens * 2 * 32 * 8 * 128 * 2) / 2 ** 30).toBeCloseTo(57.0, 1);
    const h70 = resolveSimOptions({ profile: "4xh100-70b", engine: "sglang" });
    expect([h70.kvTokens, h70.prefillTps, h70.decodeTps, h70.prefillChunkTokens]).toEqual([468_000, 11_500, 80, 8_192]);
    // The 3090 keeps its engine's budget (vLLM below H100 class: 2,048).
    expect(resolveSimOptions({ profile: "3090", engine: "vllm-details" }).prefillChunkTokens).toBe(2_048);
    expect(cardText("h100-8b")).toBe("h100-8b (Llama-3.1-8B on one H100)");
    expect(cardText("3090")).toBe("3090-class");
  });

  it("--card picks the profile for the sims; not with --config", () => {
    expect(parseBenchArgs({}).card).toBe("3090");
    expect(parseBenchArgs({ card: "4xh100-70b" }).card).toBe("4xh100-70b");
    expect(() => parseBenchArgs({ card: "a100" })).toThrow(/--card "a100": unknown "a100"; choose from 3090, h100-8b, 4xh100-70b, tiny/);
    expect(() => parseBenchArgs({ config: "router.toml", card: "h100-8b" })).toThrow(/--card: only with simulated replicas/);
  });

  it("the pooled sim: N cards' KV, prefill and sequences, decode slowdown ÷ N; llama.cpp's slots and RAM cache × N", () => {
    const card = resolveSimOptions({ profile: "h100-8b", engine: "vllm-details" });
    expect(pooledSimOptions(card, 4)).toMatchObject({ name: "pooled", kvTokens: 4 * 467_280, prefillTps: 200_000, maxSeqs: 4_096, decodeBatchSlowdown: 0.02, decodeTps: 170, maxModelLen: 131_072 });
    const slots = resolveSimOptions({ profile: "3090", engine: "llamacpp" });
    expect(pooledSimOptions(slots, 2)).toMatchObject({ parallel: 8, kvUnified: true, kvTokens: 2 * 122_636, cacheRam: 2 * 8_192 });
    // It resolves: a sim can start with it.
    expect(resolveSimOptions(pooledSimOptions(card, 4)).kvTokens).toBe(1_869_120);
  });
});
