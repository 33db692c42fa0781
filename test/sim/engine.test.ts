/**
 * The scheduler and KV accounting, stepped with a ManualClock: exact model-time figures,
 * no sockets, no sleeping.
 */
import { describe, expect, it } from "bun:test";
import { ManualClock } from "../../src/sim/clock.ts";
import { ComputedRecord } from "../../src/sim/computed-record.ts";
import { SimEngine, type Sequence, type SequenceResult } from "../../src/sim/engine.ts";
import { resolveSimOptions, type SimOptions } from "../../src/sim/options.ts";

/** 1,000 prefill tok/s, 100 decode tok/s alone, 64 blocks of 16 tokens, 4 chars per token. */
const SMALL: Partial<SimOptions> = {
  profile: "tiny",
  kvTokens: 1024,
  blockTokens: 16,
  prefillTps: 1000,
  cachedTokenCost: 0.1,
  decodeTps: 100,
  decodeBatchSlowdown: 0,
  maxSeqs: 16,
  charsPerToken: 4,
  minTickMs: 0,
};

function setup(overrides: Partial<SimOptions> = {}) {
  const clock = new ManualClock(1_000);
  const engine = new SimEngine(resolveSimOptions({ ...SMALL, ...overrides }), clock);
  return { clock, engine };
}

/** A prompt of exactly `tokens` tokens (4 chars each) that starts with `tag`. */
function text(tokens: number, tag = "p"): string {
  return `${tag}|${"lore".repeat(tokens)}`.slice(0, tokens * 4);
}

async function run(clock: ManualClock, seq: Sequence): Promise<SequenceResult> {
  clock.runUntilIdle();
  return seq.done;
}

describe("SimEngine timing", () => {
  it("cold TTFT is prompt/prefill_tps; a repeat pays only the last block plus the cached-context cost", async () => {
    const { clock, engine } = setup();
    const prompt = text(800);
    const cold = await run(clock, engine.submit({ prompt, maxTokens: 1, finishReason: "length" }));
    expect(cold.cachedTokens).toBe(0);
    expect(cold.ttftModelMs).toBeCloseTo(800, 6);

    const warm = await run(clock, engine.submit({ prompt, maxTokens: 1, finishReason: "length" }));
    // 800 tokens = 50 full blocks; the last is always recomputed (at least one token must be).
    expect(warm.cachedTokens).toBe(784);
    expect(warm.ttftModelMs).toBeCloseTo(16 + 0.1 * 784, 6);
  });

  it("a prompt sharing only a prefix reuses exactly the full blocks of that prefix", async () => {
    const { clock, engine } = setup();
    await run(clock, engine.submit({ prompt: text(400) + text(100, "a"), maxTokens: 1, finishReason: "length" }));
    const other = await run(clock, engine.submit({ prompt: text(400) + text(100, "b"), maxTokens: 1, finishReason: "length" }));
    expect(other.cachedTokens).toBe(400);
    expect(other.ttftModelMs).toBeCloseTo(100 + 40, 6);
  });

  /** Two prompts submitted at once; their results. */
  async function twoAtOnce(overrides: Partial<SimOptions>, a: { tokens: number; maxTokens: number }, b: { tokens: number }) {
    const { clock, engine } = setup(overrides);
    const first = engine.submit({ prompt: text(a.tokens, "a"), maxTokens: a.maxTokens, finishReason: "length" });
    const second = engine.submit({ prompt: text(b.tokens, "b"), maxTokens: 1, finishReason: "length" });
    clock.runUntilIdle();
    return [await first.done, await second.done] as const;
  }

  it.each([
    ["arrival (the default profile's: vLLM's and SGLang's chunked prefill): the second prompt's first token after the first's", {}, 300],
    ["shared (llama.cpp's and Ollama's slots): two prompts at once both take twice as long as one alone", { prefillOrder: "shared" }, 600],
  ] as const)("prefill_order %s", async (_what, overrides, firstTtft) => {
    const [a, b] = await twoAtOnce(overrides, { tokens: 300, maxTokens: 1 }, { tokens: 300 });
    expect(a.ttftModelMs).toBeCloseTo(firstTtft, 6);
    expect(b.ttftModelMs).toBeCloseTo(600, 6);
  });

  it.each([
    // a's two more tokens while b prefills (100 → 600 ms): each takes 10 ms of decode + a
    // 100-token chunk (100 ms) = 110 ms, so a ends at 320 ms.
    ["chunk (vLLM): one token per step of a prefill chunk", { prefillChunkTokens: 100 }, 320],
    // a's two more tokens only after b's prefill (100 → 600 ms), 10 ms each.
    ["none (SGLang runs prefill first): nothing until no prefill is left", { decodeWhilePrefilling: "none" }, 620],
  ] as const)("in arrival order, while a prefill runs, decode_while_prefilling %s", async (_what, overrides, aEndsAt) => {
    const [a, b] = await twoAtOnce(overrides, { tokens: 100, maxTokens: 3 }, { tokens: 500 });
    expect(a.ttftModelMs).toBeCloseTo(100, 6);
    expect(a.durationMs).toBeCloseTo(aEndsAt, 6);
    expect(b.ttftModelMs).toBeCloseTo(600, 6);
  });

  it.each([
    // Looked up when its prefill starts (vLLM's get_computed_blocks, SGLang's radix match):
    // b finds a's 400 tokens (25 blocks) cached and pays only its own 160 plus 0.1 × 400
    // cached — and holds no block while it waits.
    ["arrival: a request queued behind the prefill of its prefix finds it cached", {}, { blocks: 25, aTtft: 400, cached: 400, bTtft: 400 + 160 + 40 }],
    // Looked up on arrival, before a has computed anything: b holds its blocks while it waits.
    ["arrival, prefix_lookup arrival: b looked up on arrival misses the prefix", { prefixLookup: "arrival" }, { blocks: 25 + 35, aTtft: 400, cached: 0, bTtft: 960 }],
    // SGLang's overlap loop forms b's batch, the very next one, while a's only chunk runs,
    // before a's prefix is in the tree: b misses it.
    ["arrival, prefix_lookup batch (SGLang): b in the very next batch misses a prompt within one chunk", { prefixLookup: "batch" }, { blocks: 25 + 35, aTtft: 400, cached: 0, bTtft: 960 }],
    // Both share the card from the start: b looked up before a had computed anything.
    ["shared: two prompts prefilling at once each compute the common prefix", { prefillOrder: "shared" }, { blocks: 25 + 35, aTtft: 800, cached: 0, bTtft: 960 }],
  ] as const)("prefill_order %s", async (_what, overrides, want) => {
    const { clock, engine } = setup(overrides);
    const prefix = text(400);
    const a = engine.submit({ prompt: prefix, maxTokens: 1, finishReason: "length" });
    const b = engine.submit({ prompt: prefix + text(160, "b"), maxTokens: 1, finishReason: "length" });
    clock.advance(1);
    expect(engine.kv().usedBlocks).toBe(want.blocks);
    clock.runUntilIdle();
    expect((await a.done).ttftModelMs).toBeCloseTo(want.aTtft, 6);
    expect((await b.done).cachedTokens).toBe(want.cached);
    expect((await b.done).ttftModelMs).toBeCloseTo(want.bTtft, 6);
  });

  it.each([
    // a is prefilled in four 100-token chunks. b, queued behind c, joins a batch only once c
    // has one chunk left (at 700 ms): a is all in the tree, b pays its own 160 + 0.1 × 400.
    ["queued a batch or more behind the prefill of its prefix, a request finds it", "c", { cached: 400, bTtft: 800 + 160 + 40 }],
    // b, right behind a, joins the batch formed while a's last chunk runs (at 300 ms): it finds
    // a's first three chunks (18 whole blocks of 300 tokens), and computes the rest again.
    ["in the very next batch, it misses the last chunk of that prefill", undefined, { cached: 288, bTtft: 400 + 272 + 28.8 }],
  ] as const)("prefix_lookup batch (SGLang): %s", async (_what, between, want) => {
    const { clock, engine } = setup({ prefixLookup: "batch", prefillChunkTokens: 100 });
    const prefix = text(400);
    const a = engine.submit({ prompt: prefix, maxTokens: 1, finishReason: "length" });
    const c = between ? engine.submit({ prompt: text(400, between), maxTokens: 1, finishReason: "length" }) : undefined;
    const b = engine.submit({ prompt: prefix + text(160, "b"), maxTokens: 1, finishReason: "length" });
    clock.advance(1);
    // Only a holds blocks: the others wait without KV until their batch forms.
    expect(engine.kv().usedBlocks).toBe(25);
    clock.runUntilIdle();
    expect((await a.done).ttftModelMs).toBeCloseTo(400, 6);
    if (c) expect((await c.done).ttftModelMs).toBeCloseTo(800, 6);
    expect((await b.done).cachedTokens).toBe(want.cached);
    expect((await b.done).ttftModelMs).toBeCloseTo(want.bTtft, 6);
  });

  it("prefix_lookup batch at a model time too large for float rounding to place the wake-up: the next event admits instead, nothing spins", async () => {
    // 10^10 model seconds: one ulp is ~2 µs, two milliseconds of prefill at 1,000 tokens/s.
    const clock = new ManualClock(1e13);
    const engine = new SimEngine(resolveSimOptions({ ...SMALL, prefixLookup: "batch", prefillChunkTokens: 100 }), clock);
    const prefix = text(400);
    const a = engine.submit({ prompt: prefix, maxTokens: 1, finishReason: "length" });
    const b = engine.submit({ prompt: prefix + text(160, "b"), maxTokens: 1, finishReason: "length" });
    clock.runUntilIdle();
    expect((await a.done).ttftModelMs).toBeCloseTo(400, -1);
    // Admitted during a's last chunk (288 cached) or, if rounding moved it, at a's end (400).
    expect([288, 400]).toContain((await b.done).cachedTokens);
  });

  it("each engine profile brings its prefill order; an explicit one wins, a wrong one is refused", () => {
    const order = (engine: SimOptions["engine"], extra: Partial<SimOptions> = {}) => resolveSimOptions({ engine, ...extra }).prefillOrder;
    expect([order("vllm"), order("vllm-details"), order("sglang"), order("llamacpp"), order("ollama")]).toEqual(["arrival", "arrival", "arrival", "shared", "shared"]);
    expect(resolveSimOptions(SMALL).prefillOrder).toBe("arrival");
    expect(order("vllm", { prefillOrder: "shared" })).toBe("shared");
    const decode = (engine: SimOptions["engine"]) => resolveSimOptions({ engine }).decodeWhilePrefilling;
    expect([decode("vllm"), decode("sglang")]).toEqual(["chunk", "none"]);
    const lookup = (engine: SimOptions["engine"]) => resolveSimOptions({ engine }).prefixLookup;
    expect([lookup("vllm"), lookup("vllm-details"), lookup("sglang")]).toEqual(["scheduled", "scheduled", "batch"]);
    const chunk = (engine: SimOptions["engine"]) => resolveSimOptions({ engine }).prefillChunkTokens;
    expect([chunk("vllm"), chunk("sglang"), resolveSimOptions({ engine: "sglang", prefillChunkTokens: 8192 }).prefillChunkTokens]).toEqual([2048, 4096, 8192]);
    expect(() => resolveSimOptions({ prefixLookup: "later" as SimOptions["prefixLookup"] })).toThrow(/prefix-lookup = "later": must be scheduled, batch or arrival/);
    expect(() => resolveSimOptions({ decodeWhilePrefilling: "some" as SimOptions["decodeWhilePrefilling"] })).toThrow(/decode-while-prefilling = "some": must be chunk or none/);
    expect(() => resolveSimOptions({ prefillOrder: "lifo" as SimOptions["prefillOrder"] })).toThrow(/prefill-order = "lifo": must be arrival or shared/);
    expect(() => resolveSimOptions({ prefillChunkTokens: 0 })).toThrow(/prefill-chunk-tokens = 0: must be a positive integer/);
  });

  it("a burst of 16 on one replica takes twice the prefill time of the same burst split over two", async () => {
    const burst = (engine: SimEngine, from: number, count: number) =>
      Array.from({ length: count }, (_, i) => engine.submit({ prompt: text(50, `q${from + i}`), maxTokens: 1, finishReason: "length" }));
    const one = setup({ kvTokens: 4096 });
    const onOne = burst(one.engine, 0, 16);
    one.clock.runUntilIdle();
    const two = [setup({ kvTokens: 4096 }), setup({ kvTokens: 4096 })];
    const onTwo = [...burst(two[0]!.engine, 0, 8), ...burst(two[1]!.engine, 8, 8)];
    two.forEach((r) => r.clock.runUntilIdle());
    const slowest = async (seqs: Sequence[]) => Math.max(...(await Promise.all(seqs.map((s) => s.done))).map((r) => r.ttftModelMs!));
    expect(await slowest(onOne)).toBeCloseTo(800, 6);
    expect(await slowest(onTwo)).toBeCloseTo(400, 6);
  });

  it("decodes at decode_tps per sequence, slower in a batch", async () => {
    const alone = setup();
    const seq = alone.engine.submit({ prompt: text(100), maxTokens: 11, finishReason: "length" });
    const r = await run(alone.clock, seq);
    expect(r.completionTokens).toBe(11);
    expect(r.text).toHaveLength(44);
    // First token at 100 ms, then 10 more at 100 tok/s.
    expect(alone.clock.now() - 1_000).toBeCloseTo(100 + 100, 6);

    const batch = setup({ decodeBatchSlowdown: 0.5, prefillOrder: "shared" });
    const s1 = batch.engine.submit({ prompt: text(50, "a"), maxTokens: 11, finishReason: "length" });
    const s2 = batch.engine.submit({ prompt: text(50, "b"), maxTokens: 11, finishReason: "length" });
    batch.clock.runUntilIdle();
    await Promise.all([s1.done, s2.done]);
    // Prefill 100 tokens shared = 100 ms, then 10 tokens at 100 / 1.5 tok/s = 150 ms.
    expect(batch.clock.now() - 1_000).toBeCloseTo(250, 6);
  });

  it("time_scale multiplies every real duration and leaves model time alone", async () => {
    const { clock, engine } = setup({ timeScale: 0.01 });
    const r = await run(clock, engine.submit({ prompt: text(800), maxTokens: 1, finishReason: "length" }));
    expect(r.ttftModelMs).toBeCloseTo(800, 6);
    expect(r.ttftMs).toBeCloseTo(8, 6);
  });

  it("reproduces the seed's cold/warm probe at the 3090 profile: 90k tokens ~22 s cold, ~1.1 s warm", async () => {
    const clock = new ManualClock();
    const engine = new SimEngine(resolveSimOptions({ profile: "3090", timeScale: 0.01 }), clock);
    const prefix = text(90_000, "ctx");
    const cold = await run(clock, engine.submit({ prompt: `${prefix}tail-1`, maxTokens: 1, finishReason: "length" }));
    const warm = await run(clock, engine.submit({ prompt: `${prefix}tail-2`, maxTokens: 1, finishReason: "length" }));
    expect(cold.ttftModelMs! / 1000).toBeGreaterThan(21);
    expect(cold.ttftModelMs! / 1000).toBeLessThan(23.5);
    expect(warm.cachedTokens).toBe(90_000);
    expect(warm.ttftModelMs! / 1000).toBeGreaterThan(1.0);
    expect(warm.ttftModelMs! / 1000).toBeLessThan(1.5);
  });

  it("reproduces the seed's burst shape at the 3090 profile: 16 cold requests ~30 s on one card, ~18.6 s on two", async () => {
    // 16 × (4,871-token prompt, 293 output tokens): the arithmetic in docs/sim.md's calibration table.
    const makespan = async (cards: number) => {
      const engines = Array.from({ length: cards }, () => {
        const clock = new ManualClock();
        return { clock, engine: new SimEngine(resolveSimOptions({ profile: "3090", timeScale: 0.01 }), clock) };
      });
      const seqs = Array.from({ length: 16 }, (_, i) =>
        engines[i % cards]!.engine.submit({ prompt: text(4_871, `burst${i}`), maxTokens: 293, finishReason: "length" }),
      );
      engines.forEach((e) => e.clock.runUntilIdle());
      await Promise.all(seqs.map((s) => s.done));
      return Math.max(...engines.map((e) => e.clock.now())) / 0.01 / 1000;
    };
    const one = await makespan(1);
    const two = await makespan(2);
    expect(one).toBeGreaterThan(28.5);
    expect(one).toBeLessThan(31.5);
    expect(two).toBeGreaterThan(17.5);
    expect(two).toBeLessThan(19.5);
  });
});

describe("SimEngine KV pool", () => {
  it("makes a request wait while KV is short, without evicting blocks a running sequence holds", async () => {
    const { clock, engine } = setup(); // 64 blocks
    const big = engine.submit({ prompt: text(800, "big"), maxTokens: 40, finishReason: "length" }); // 50 blocks
    clock.advance(900); // past its prefill, decoding
    expect(engine.runningCount).toBe(1);
    const small = engine.submit({ prompt: text(300, "small"), maxTokens: 1, finishReason: "length" }); // 19 blocks: does not fit
    clock.advance(1);
    expect(engine.waitingCount).toBe(1);
    expect(small.state).toBe("waiting");
    expect(engine.match(text(800, "big")).cachedTokens).toBe(784);
    expect(engine.pool.evictions).toBe(0);

    clock.runUntilIdle();
    await Promise.all([big.done, small.done]);
    expect(engine.waitingCount).toBe(0);
    // It could only start once the big one finished: 0.9 s + 1 ms in, then 300 ms of prefill later than that.
    expect((await small.done).ttftModelMs!).toBeGreaterThan(300);
  });

  it("evicts the least recently used prefixes when the working set exceeds the pool", async () => {
    const { clock, engine } = setup(); // 64 blocks
    const prompts = ["a", "b", "c"].map((tag) => text(600, tag)); // 38 blocks each
    for (const prompt of prompts) await run(clock, engine.submit({ prompt, maxTokens: 1, finishReason: "length" }));
    // 600 tokens = 37 full blocks + 1 partial one (never cached). a took 38 of the 64 blocks;
    // b took the 26 never-used ones, a's partial block and a's 11 last full blocks; c took a's
    // remaining 26 and b's partial + 11 last. Tails are freed first, so prefixes survive longest.
    expect(engine.pool.evictions).toBe(11 + 26 + 11);
    expect(engine.match(prompts[2]!).cachedTokens).toBe(592);
    expect(engine.match(prompts[1]!).cachedTokens).toBe(26 * 16);
    expect(engine.match(prompts[0]!).cachedTokens).toBe(0);
  });

  it("match() reports the cached prefix without touching the eviction order", async () => {
    const { clock, engine } = setup();
    await run(clock, engine.submit({ prompt: text(200, "a"), maxTokens: 1, finishReason: "length" }));
    await run(clock, engine.submit({ prompt: text(200, "b"), maxTokens: 1, finishReason: "length" }));
    const before = engine.pool.evictionOrder();
    expect(engine.match(text(200, "a"))).toEqual({ promptTokens: 200, cachedTokens: 192 });
    expect(engine.match(text(200, "zzz"))).toEqual({ promptTokens: 200, cachedTokens: 0 });
    expect(engine.pool.evictionOrder()).toEqual(before);
  });

  it("preempts the newest sequence when decoding runs out of blocks, and still finishes both", async () => {
    const { clock, engine } = setup(); // 64 blocks
    const a = engine.submit({ prompt: text(480, "a"), maxTokens: 100, finishReason: "length" }); // 30 blocks, grows to 37
    const b = engine.submit({ prompt: text(480, "b"), maxTokens: 100, finishReason: "length" });
    clock.runUntilIdle();
    const [ra, rb] = await Promise.all([a.done, b.done]);
    expect(engine.stats.preemptions_total).toBeGreaterThan(0);
    expect(ra.completionTokens).toBe(100);
    expect(rb.completionTokens).toBe(100);
    expect(ra.text).not.toBe(rb.text);
    expect(engine.pool.usedBlocks).toBe(0);
  });

  it("caches generated tokens, so the next turn that quotes the reply hits past the old prompt", async () => {
    const { clock, engine } = setup();
    const turn1 = text(100, "t1");
    const r1 = await run(clock, engine.submit({ prompt: turn1, maxTokens: 64, finishReason: "length" }));
    const turn2 = `${turn1}${r1.text}<|im_end|>\n${text(50, "t2")}`;
    const r2 = await run(clock, engine.submit({ prompt: turn2, maxTokens: 1, finishReason: "length" }));
    // 100 prompt + 63 generated tokens had their KV written: 10 full blocks.
    expect(r2.cachedTokens).toBe(160);
  });

  it("a cancelled sequence stops, frees its blocks, keeps what it computed cached and counts as cancelled", async () => {
    const { clock, engine } = setup();
    const seq = engine.submit({ prompt: text(800), maxTokens: 1, finishReason: "length" });
    clock.advance(400); // half of the prefill
    const ended = new Promise<SequenceResult>((resolve) => engine.onSequenceEnd((_, r) => resolve(r)));
    engine.cancel(seq);
    const result = await ended;
    expect(result.reason).toBe("cancelled");
    expect(result.completionTokens).toBe(0);
    expect(engine.stats.cancelled_total).toBe(1);
    expect(engine.stats.completed_total).toBe(0);
    expect(engine.pool.usedBlocks).toBe(0);
    expect(engine.runningCount).toBe(0);
    expect(engine.match(text(800)).cachedTokens).toBe(400);
    expect(clock.pendingTimers).toBe(0);
  });

  it("a cancel from inside a token callback takes effect at once", async () => {
    const { clock, engine } = setup();
    let seen = 0;
    const seq: Sequence = engine.submit({
      prompt: text(100),
      maxTokens: 50,
      finishReason: "length",
      listener: { onToken: (_, i) => (seen = i + 1) === 3 && engine.cancel(seq, "fault") },
    });
    const r = await run(clock, seq);
    expect(r.reason).toBe("fault");
    expect(seen).toBe(3);
    expect(r.completionTokens).toBe(3);
    expect(engine.stats.cancelled_total).toBe(0);
  });

  it("with prefix caching off nothing is ever reused", async () => {
    const { clock, engine } = setup({ prefixCache: false });
    const first = await run(clock, engine.submit({ prompt: text(400), maxTokens: 1, finishReason: "length" }));
    const second = await run(clock, engine.submit({ prompt: text(400), maxTokens: 1, finishReason: "length" }));
    expect(second.cachedTokens).toBe(0);
    expect(second.ttftModelMs).toBeCloseTo(first.ttftModelMs!, 6);
    expect(engine.match(text(400)).cachedTokens).toBe(0);
    expect(engine.pool.cachedBlocks).toBe(0);
  });

  it("a cache_salt separates otherwise identical prompts", async () => {
    const { clock, engine } = setup();
    await run(clock, engine.submit({ prompt: text(200), maxTokens: 1, finishReason: "length", salt: "tenant-a" }));
    expect(engine.match(text(200), "tenant-a").cachedTokens).toBe(192);
    expect(engine.match(text(200), "tenant-b").cachedTokens).toBe(0);
    expect(engine.match(text(200)).cachedTokens).toBe(0);
  });

  it("holds at most max_seqs sequences running", () => {
    // Shared prefill order: in arrival order only one is admitted while a prefill runs.
    const { clock, engine } = setup({ maxSeqs: 2, prefillOrder: "shared" });
    for (const tag of ["a", "b", "c"]) engine.submit({ prompt: text(16, tag), maxTokens: 5, finishReason: "length" });
    clock.advance(1);
    expect(engine.runningCount).toBe(2);
    expect(engine.waitingCount).toBe(1);
    clock.runUntilIdle();
    expect(engine.runningCount + engine.waitingCount).toBe(0);
    expect(engine.stats.completed_total).toBe(3);
  });

  it("reset ends everything and forgets the cache and the counters", async () => {
    const { clock, engine } = setup();
    await run(clock, engine.submit({ prompt: text(200), maxTokens: 1, finishReason: "length" }));
    const live = engine.submit({ prompt: text(200, "x"), maxTokens: 100, finishReason: "length" });
    clock.advance(10);
    engine.reset();
    expect((await live.done).reason).toBe("reset");
    expect(engine.pool.cachedBlocks).toBe(0);
    expect(engine.pool.usedBlocks).toBe(0);
    expect(engine.stats.completed_total).toBe(0);
    expect(engine.stats.prompt_tokens_total).toBe(0);
  });
});

describe("SimEngine at extreme time scales", () => {
  it("a near-zero time scale late in a long run still makes progress (float precision of model time)", async () => {
    // A clock an hour in, at 1e-6: model time is ~3.6e9 s, where one ulp is ~5e-7 s —
    // larger than a whole 4-token decode. Every sequence must still finish.
    const clock = new ManualClock(3_600_000);
    const engine = new SimEngine(resolveSimOptions({ ...SMALL, timeScale: 1e-6, prefillTps: 50_000, decodeTps: 1_000 }), clock);
    const results = await Promise.all(
      [0, 1, 2].map((i) => run(clock, engine.submit({ prompt: text(500, `q${i}`), maxTokens: 4, finishReason: "length" }))),
    );
    expect(results.map((r) => r.completionTokens)).toEqual([4, 4, 4]);
  });
});

describe("SimEngine prefix-stop introspection", () => {
  const ask = async (clock: ManualClock, engine: SimEngine, prompt: string) => {
    const seq = engine.submit({ prompt, maxTokens: 1, finishReason: "length" });
    const r = await run(clock, seq);
    return [r.cachedTokens, r.prefixStop];
  };

  it("full when every cacheable block hit, new when never computed, evicted when computed and dropped since, new again after a reset", async () => {
    const { clock, engine } = setup(); // 64 blocks of 16 tokens
    const a = text(400, "a");
    expect(await ask(clock, engine, a)).toEqual([0, "new"]);
    expect(await ask(clock, engine, a)).toEqual([384, "full"]);
    // A shares its first 25 blocks with this one, then goes its own way.
    expect(await ask(clock, engine, a + text(100, "b"))).toEqual([400, "new"]);
    for (const tag of ["c", "d", "e"]) await ask(clock, engine, text(400, tag)); // 25 blocks each: A is pushed out
    expect(engine.pool.evictions).toBeGreaterThan(0);
    expect(await ask(clock, engine, a)).toEqual([0, "evicted"]);
    expect(engine.stats).toMatchObject({ stop_full_total: 1, stop_evicted_total: 1, stop_new_total: 5 });
    engine.reset();
    expect(await ask(clock, engine, text(400, "e"))).toEqual([0, "new"]);
    expect(engine.stats).toMatchObject({ stop_full_total: 0, stop_evicted_total: 0, stop_new_total: 1 });
  });

  it("a hit stopped by a block evicted in the middle of a prefix reports evicted, not new", async () => {
    const { clock, engine } = setup({ kvTokens: 512 }); // 32 blocks
    const shared = text(320, "shared"); // 20 blocks
    await ask(clock, engine, shared + text(96, "x")); // 26 blocks
    // 20 + 12 fresh blocks: the free queue gives up x's tail first, then the shared prefix's end.
    await ask(clock, engine, text(200, "y"));
    const [cached, stop] = await ask(clock, engine, shared + text(96, "x"));
    expect(stop).toBe("evicted");
    expect(cached).toBeLessThan(320);
  });

  it("onAdmit fires once, before the first token, with the final cached tokens and stop", async () => {
    const { clock, engine } = setup();
    await ask(clock, engine, text(200, "warm"));
    const seen: [number, string | undefined, number][] = [];
    const seq = engine.submit({
      prompt: text(200, "warm"),
      maxTokens: 3,
      finishReason: "length",
      listener: { onAdmit: (s) => seen.push([s.cachedTokens, s.prefixStop, s.generated]) },
    });
    await run(clock, seq);
    expect(seen).toEqual([[192, "full", 0]]);
  });

  it("a reply's tokens come from SubmitInput.output when given", async () => {
    const { clock, engine } = setup();
    const r = await run(clock, engine.submit({ prompt: text(40), maxTokens: 3, finishReason: "length", output: (i) => `<t${i}>` }));
    expect(r.text).toBe("<t0><t1><t2>");
  });
});

describe("ComputedRecord", () => {
  it("forgets the least recently computed hash beyond its capacity", () => {
    const record = new ComputedRecord(2);
    record.add(1n);
    record.add(2n);
    record.add(1n); // touched again: 2 is now the oldest
    record.add(3n);
    expect([record.has(1n), record.has(2n), record.has(3n), record.size]).toEqual([true, false, true, 2]);
    expect(ComputedRecord.forPool(10).capacity).toBe(65_536);
    expect(ComputedRecord.forPool(10_000).capacity).toBe(160_000);
  });
});
