/**
 * The llama.cpp slot engine, stepped with a ManualClock: which slot a request gets, what it
 * reuses there, the RAM prompt cache, and why a hit stopped — no sockets, no sleeping.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { ManualClock } from "../../src/sim/clock.ts";
import { resolveSimOptions, type SimOptions } from "../../src/sim/options.ts";
import { openai, sim, state, stopAll } from "./_helpers.ts";
import type { PrefixStop, SequenceResult } from "../../src/sim/engine-api.ts";
import { SlotEngine, type SlotSequence } from "../../src/sim/slots.ts";

/** 2 slots of 4,096 tokens, 1,000 prefill tok/s, reuse free, 4 chars per token, a 4 KiB-per-token RAM cache. */
const BASE: Partial<SimOptions> = {
  profile: "tiny",
  engine: "llamacpp",
  parallel: 2,
  kvTokens: 8192,
  prefillTps: 1000,
  cachedTokenCost: 0,
  decodeTps: 100,
  decodeBatchSlowdown: 0,
  charsPerToken: 4,
  minTickMs: 0,
  cacheRamBytesPerToken: 4096,
};

function setup(overrides: Partial<SimOptions> = {}) {
  const clock = new ManualClock(1_000);
  const engine = new SlotEngine(resolveSimOptions({ ...BASE, ...overrides }), clock);
  return { clock, engine };
}

/** A prompt of exactly `tokens` tokens (4 chars each) that starts with `tag`. */
function text(tokens: number, tag = "p"): string {
  return `${tag}|${"lore".repeat(tokens)}`.slice(0, tokens * 4);
}

async function run(clock: ManualClock, seq: SlotSequence): Promise<SequenceResult> {
  clock.runUntilIdle();
  return seq.done;
}

/** Submit and run one request to its end. */
async function send(h: ReturnType<typeof setup>, prompt: string, maxTokens = 1) {
  const seq = h.engine.submit({ prompt, maxTokens, finishReason: "length" });
  const result = await run(h.clock, seq);
  return { seq, result, slot: seq.slot!.id };
}

describe("SlotEngine: slots and reuse", () => {
  it("reuses the common prefix at token granularity, not in blocks", async () => {
    const h = setup();
    const first = text(100, "a");
    await send(h, first);
    // 201 shared characters = 50 whole tokens (SimEngine, in 16-token blocks, would reuse 48).
    const { result } = await send(h, `${first.slice(0, 201)}Z${text(50, "b")}`);
    expect(result.cachedTokens).toBe(50);
  });

  it("always recomputes the last prompt token", async () => {
    const h = setup();
    const prompt = text(100, "a");
    await send(h, prompt);
    const { result } = await send(h, prompt);
    expect(result.cachedTokens).toBe(99);
    expect(result.prefixStop).toBe("full");
    // One token of prefill at 1,000 tok/s.
    expect(result.ttftModelMs).toBeCloseTo(1, 6);
  });

  it("keeps the generated tokens but the last in the slot, so a continuation reuses them", async () => {
    const h = setup();
    const prompt = text(100, "a");
    const { result, slot } = await send(h, prompt, 5);
    expect(h.engine.slots()[slot]!.cached_tokens).toBe(104);
    const next = await send(h, `${prompt}${result.text}${text(20, "u")}`);
    expect(next.slot).toBe(slot);
    expect(next.result.cachedTokens).toBe(104);
  });

  it("generates the given output text, and a continuation that quotes it reuses it", async () => {
    const h = setup();
    const prompt = text(100, "a");
    const seq = h.engine.submit({ prompt, maxTokens: 3, finishReason: "length", output: (i) => `<t${i}>` });
    const r = await run(h.clock, seq);
    expect(r.text).toBe("<t0><t1><t2>");
    const next = await send(h, `${prompt}<t0><t1><t2>${text(10, "u")}`);
    expect(next.result.cachedTokens).toBe(102);
  });

  it("the first request takes the last of the empty slots; the next, the least recently used", async () => {
    const h = setup();
    expect((await send(h, text(100, "a"))).slot).toBe(1);
    expect((await send(h, text(100, "b"))).slot).toBe(0);
    expect((await send(h, text(100, "c"))).slot).toBe(1);
  });

  it("chooses the slot whose tokens the prompt resembles most, over the least recently used", async () => {
    const h = setup({ cacheRam: 0 });
    const a = text(400, "a");
    const b = text(400, "b");
    await send(h, a); // slot 1
    await send(h, b); // slot 0, released last
    const cont = await send(h, `${a}${text(100, "more")}`);
    expect(cont.slot).toBe(1);
    expect(cont.result.cachedTokens).toBe(400);
  });

  it.each([
    // 60 of 460 tokens (13 %) match slot 0: above --slot-prompt-similarity 0.10, slot 0 it is.
    [60, 0, 60, "new"],
    // 40 of 440 (9 %): below it, so the least recently used slot 1, and the 40 tokens in slot 0 are not reused.
    [40, 1, 0, "elsewhere"],
  ])("a prompt sharing %p tokens with slot 0 goes to slot %p and reuses %p (%s)", async (shared, slot, cached, stop) => {
    const h = setup({ cacheRam: 0 });
    await send(h, text(400, "a")); // slot 1, released first
    const b = text(400, "b");
    await send(h, b); // slot 0
    const r = await send(h, `${b.slice(0, shared * 4)}${text(400, "z")}`);
    expect(r.slot).toBe(slot);
    expect(r.result.cachedTokens).toBe(cached);
    expect(r.result.prefixStop).toBe(stop as PrefixStop);
  });

  it("--slot-prompt-similarity 0 chooses by LRU only", async () => {
    const h = setup({ cacheRam: 0, slotPromptSimilarity: 0 });
    const a = text(400, "a");
    await send(h, a); // slot 1
    await send(h, text(400, "b")); // slot 0
    await send(h, text(400, "c")); // slot 1: a is gone
    const r = await send(h, `${text(400, "b")}${text(10, "more")}`);
    expect(r.slot).toBe(0); // LRU happens to be b's slot
    const again = await send(h, `${a}${text(10, "more")}`);
    expect(again.slot).toBe(1);
    expect(again.result.cachedTokens).toBe(0);
  });
});

describe("SlotEngine: concurrency", () => {
  it("concurrent requests in different slots share no KV; a third waits for a slot and then reuses its prefix", async () => {
    const h = setup({ cacheRam: 0 });
    const shared = text(300, "shared");
    const a = h.engine.submit({ prompt: `${shared}${text(50, "x")}`, maxTokens: 1, finishReason: "length" });
    const b = h.engine.submit({ prompt: `${shared}${text(50, "y")}`, maxTokens: 1, finishReason: "length" });
    h.clock.advance(100); // both are a third through their prefill
    const c = h.engine.submit({ prompt: `${shared}${text(50, "z")}`, maxTokens: 1, finishReason: "length" });
    expect(h.engine.runningCount).toBe(2);
    expect(h.engine.waitingCount).toBe(1);
    expect(c.state).toBe("waiting");
    expect(h.engine.slots().map((s) => s.is_processing)).toEqual([true, true]);
    h.clock.runUntilIdle();
    const [ra, rb, rc] = await Promise.all([a.done, b.done, c.done]);
    expect(ra!.cachedTokens).toBe(0);
    expect(rb!.cachedTokens).toBe(0);
    expect(rb!.prefixStop).toBe("new"); // nothing of it computed yet when it started
    expect(rc!.cachedTokens).toBe(300);
    // Both prefill at once on a shared card: 700 tokens at 1,000 tok/s.
    expect(ra!.ttftModelMs).toBeCloseTo(700, 6);
    expect(h.engine.waitingCount).toBe(0);
  });

  it("a request arriving during a step waits for its end, and then reuses the slot the first one just left", async () => {
    const h = setup({ cacheRam: 0 });
    const shared = text(300, "shared");
    const a = h.engine.submit({ prompt: `${shared}${text(50, "x")}`, maxTokens: 1, finishReason: "length" });
    h.clock.advance(100); // a's whole prompt is one step of 350 tokens: 350 ms
    const b = h.engine.submit({ prompt: `${shared}${text(50, "y")}`, maxTokens: 1, finishReason: "length" });
    expect(b.state).toBe("waiting");
    expect(h.engine.slots().map((s) => s.is_processing)).toEqual([false, true]);
    const rb = await run(h.clock, b);
    expect(a.slot!.id).toBe(1);
    expect(b.slot!.id).toBe(1);
    expect(rb.cachedTokens).toBe(300);
    // Admitted at 350 ms, then 50 tokens: 250 + 50 ms after it arrived.
    expect(rb.ttftModelMs).toBeCloseTo(300, 6);
  });

  it("a prompt longer than one batch takes several steps; a request arriving meanwhile starts at the next, in another slot, and stops 'elsewhere'", async () => {
    const h = setup({ cacheRam: 0, batchSize: 128 });
    const shared = text(300, "shared");
    h.engine.submit({ prompt: `${shared}${text(50, "x")}`, maxTokens: 1, finishReason: "length" });
    h.clock.advance(100);
    const b = h.engine.submit({ prompt: `${shared}${text(50, "y")}`, maxTokens: 1, finishReason: "length" });
    h.clock.advance(28); // the first step (128 tokens) ends
    expect(b.state).toBe("prefill");
    expect(h.engine.slots().map((s) => [s.is_processing, s.cached_tokens])).toEqual([
      [true, 0],
      [true, 128],
    ]);
    const rb = await run(h.clock, b);
    expect(rb.cachedTokens).toBe(0);
    expect(rb.prefixStop).toBe("elsewhere");
    expect(rb.heldTokens).toBe(128);
    expect(rb.computedTokens).toBe(0); // nothing of it was computed beyond what the busy slot holds
    expect(h.engine.stats.stop_elsewhere_total).toBe(1);
  });

  it("a prompt whose head sits in a busy slot and whose tail was computed here and dropped: 'elsewhere', with how far it had been computed", async () => {
    const h = setup({ cacheRam: 0 });
    const head = text(300, "head");
    const prompt = `${head}${text(100, "tail")}`;
    const first = await send(h, prompt);
    // Another request over the same head takes that slot by similarity (300 of 400 tokens):
    // it keeps the head and drops the first prompt's tail, and runs on.
    const other = h.engine.submit({ prompt: `${head}${text(100, "next")}`, maxTokens: 500, finishReason: "length" });
    h.clock.advance(150); // its 100 new tokens prefilled (1,000 tok/s): decoding
    expect(other.slot!.id).toBe(first.slot);
    expect(other.state).toBe("decode");
    const again = await send(h, prompt);
    expect(again.slot).not.toBe(first.slot);
    expect(again.result.cachedTokens).toBe(0);
    expect(again.result.prefixStop).toBe("elsewhere");
    expect(again.result.heldTokens).toBe(300);
    expect(again.result.computedTokens).toBe(400);
  });

  it("waiting requests get slots first come, first served", async () => {
    const h = setup({ cacheRam: 0 });
    const order: string[] = [];
    const seqs = ["a", "b", "c", "d"].map((tag, i) =>
      h.engine.submit({
        prompt: text(100 * (4 - i), tag),
        maxTokens: 1,
        finishReason: "length",
        listener: { onAdmit: () => order.push(tag) },
      }),
    );
    h.clock.runUntilIdle();
    await Promise.all(seqs.map((s) => s.done));
    expect(order).toEqual(["a", "b", "c", "d"]);
  });
});

describe("SlotEngine: the RAM prompt cache", () => {
  /** Three 500-token documents on two slots, then the first again. */
  async function revisit(overrides: Partial<SimOptions>) {
    const h = setup(overrides);
    const docs = ["A", "B", "C"].map((tag) => text(500, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    const again = await send(h, docs[0]!);
    return { h, again };
  }

  it("saves a slot's prompt when the slot is reused and restores it on a revisit", async () => {
    const { h, again } = await revisit({});
    expect(again.result.cachedTokens).toBe(499);
    expect(again.result.prefixStop).toBe("full");
    const cache = h.engine.promptCache();
    expect(cache.restores_total).toBe(1);
    expect(cache.restored_tokens_total).toBe(500);
    // A left the cache when restored; B and C (the idle slots' copies) remain.
    expect(cache.entry_tokens).toEqual([500, 500]);
    expect(cache.bytes).toBe(1000 * 4096);
  });

  it("--cache-ram 0: the revisit finds nothing, and says the prefix was evicted", async () => {
    const { h, again } = await revisit({ cacheRam: 0 });
    expect(again.result.cachedTokens).toBe(0);
    expect(again.result.prefixStop).toBe("evicted");
    expect(h.engine.promptCache()).toMatchObject({ enabled: false, entries: 0 });
  });

  it("a byte limit that holds one document evicts the oldest entry", async () => {
    // 3 MiB at 4 KiB per token = 768 tokens: one 500-token document at a time.
    const { h, again } = await revisit({ cacheRam: 3 });
    expect(again.result.cachedTokens).toBe(0);
    expect(again.result.prefixStop).toBe("evicted");
    expect(h.engine.promptCache().evictions_total).toBeGreaterThanOrEqual(1);
  });

  it.each([
    [-1, 0, "evicted"],
    [8192, 399, "full"],
  ])("--cache-ram %p: with no byte limit the token limit is n_ctx (1,024 here), with one it is raised to what the bytes hold: a revisit reuses %p", async (cacheRam, cached, stop) => {
    const h = setup({ cacheRam, kvTokens: 1024 });
    const docs = ["A", "B", "C", "D"].map((tag) => text(400, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    const again = await send(h, docs[0]!);
    expect(again.result.cachedTokens).toBe(cached);
    expect(again.result.prefixStop).toBe(stop as PrefixStop);
  });

  it("a document larger than the whole byte limit is never saved", async () => {
    const { h, again } = await revisit({ cacheRam: 1 }); // 256 tokens
    expect(again.result.cachedTokens).toBe(0);
    expect(h.engine.promptCache().saves_total).toBe(0);
  });

  it.each([
    [600, 0],
    [300, 1],
  ])("a similar slot keeping %p of its 1,000 tokens is saved to RAM first %p time(s): only when it would lose over half", async (kept, saves) => {
    const h = setup({ cacheIdleSlots: false });
    const x = text(1000, "x");
    await send(h, x);
    const r = await send(h, `${x.slice(0, kept * 4)}${text(100, "new")}`);
    expect(r.slot).toBe(1);
    expect(r.result.cachedTokens).toBe(kept);
    expect(h.engine.promptCache().saves_total).toBe(saves);
  });

  it("a restore is a copy: it delays the first token by tokens × bytes ÷ bandwidth, and a request arriving meanwhile joins the same step", async () => {
    // 2 MB/s: one 500-token document (2,048,000 bytes) takes 1.024 s to save or restore.
    const h = setup({ cacheRamGbps: 0.002 });
    const docs = ["A", "B", "C"].map((tag) => text(500, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    const revisit = h.engine.submit({ prompt: docs[0]!, maxTokens: 1, finishReason: "length" });
    h.clock.advance(1_000);
    const other = h.engine.submit({ prompt: text(100, "other"), maxTokens: 1, finishReason: "length" });
    h.clock.advance(500);
    // Both hold a slot; neither prompt has started: the copies are still running.
    expect(h.engine.slots().map((s) => s.is_processing)).toEqual([true, true]);
    expect([revisit.state, other.state]).toEqual(["waiting", "waiting"]);
    h.clock.runUntilIdle();
    const r = (await revisit.done);
    expect(r.cachedTokens).toBe(499);
    // Restoring A (1.024 s), then saving the idle slot holding C (1.024 s), then 1 token,
    // prefilled beside the other request's at half the rate.
    expect(r.ttftModelMs).toBeCloseTo(2_048 + 2, 6);
    // The other request arrived 1 s in; its 100 tokens start at 2.048 s with A's (1 shared, 99 alone).
    expect((await other.done).ttftModelMs).toBeCloseTo(1_048 + 2 + 99, 6);
  });

  it("an unrelated prompt does not restore a cached one", async () => {
    const h = setup();
    for (const tag of ["A", "B", "C"]) await send(h, text(500, `doc${tag}`));
    const other = await send(h, text(500, "docD"));
    expect(other.result.cachedTokens).toBe(0);
    expect(other.result.prefixStop).toBe("new");
    expect(h.engine.promptCache().restores_total).toBe(0);
  });

  it("a prompt keeping under a quarter of a cached entry does not restore it", async () => {
    const h = setup();
    const docs = ["A", "B", "C"].map((tag) => text(500, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    // 100 of A's 500 tokens = f_keep 0.2 < 0.25: "don't trash large prompts".
    const r = await send(h, `${docs[0]!.slice(0, 400)}${text(20, "q")}`);
    expect(r.result.cachedTokens).toBe(0);
    expect(r.result.prefixStop).toBe("elsewhere");
  });

  it("four conversations on two slots: every turn reuses its history with the RAM cache, almost none without", async () => {
    const turns = async (cacheRam: number) => {
      const h = setup({ cacheRam });
      const history = ["w", "x", "y", "z"].map((tag) => text(200, `${tag}-sys`));
      const ratios: number[] = [];
      for (let turn = 0; turn < 3; turn++) {
        for (let c = 0; c < 4; c++) {
          const prompt = `${history[c]}${text(50, `u${turn}${c}`)}`;
          const { result } = await send(h, prompt, 4);
          if (turn > 0) ratios.push(result.cachedTokens / result.promptTokens);
          history[c] = `${prompt}${result.text}`;
        }
      }
      return ratios;
    };
    const withCache = await turns(8192);
    const without = await turns(0);
    expect(Math.min(...withCache)).toBeGreaterThan(0.8);
    expect(Math.max(...without)).toBe(0);
  });
});

describe("SlotEngine: options", () => {
  it("cache_prompt off reuses nothing, and the hit counts as full", async () => {
    const h = setup({ prefixCache: false });
    const prompt = text(100, "a");
    await send(h, prompt);
    const { result } = await send(h, prompt);
    expect(result.cachedTokens).toBe(0);
    expect(result.prefixStop).toBe("full");
    expect(h.engine.match(prompt).cachedTokens).toBe(0);
  });

  it("a request's cache_prompt false overrides the server default", async () => {
    const h = setup();
    const prompt = text(100, "a");
    await send(h, prompt);
    const seq = h.engine.submit({ prompt, maxTokens: 1, finishReason: "length", cachePrompt: false });
    expect((await run(h.clock, seq)).cachedTokens).toBe(0);
  });

  it("parallel -1 is llama-server's auto: 4 slots sharing one unified KV, each up to all of it", () => {
    const o = resolveSimOptions({ ...BASE, parallel: -1 });
    expect(o).toMatchObject({ parallel: 4, kvUnified: true, maxModelLen: 8192 });
    const engine = new SlotEngine(o, new ManualClock());
    expect(engine.slots().map((s) => s.n_ctx)).toEqual([8192, 8192, 8192, 8192]);
    // Split KV: n_ctx / parallel, padded to 256.
    expect(resolveSimOptions({ ...BASE, kvTokens: 10_000, parallel: 3 }).maxModelLen).toBe(3_584);
  });

  it("unified: idle slots are saved to RAM and cleared when a task starts, and restored on a revisit", async () => {
    const h = setup({ kvUnified: true });
    const a = text(500, "docA");
    const first = await send(h, a);
    await send(h, text(500, "docB"));
    expect(h.engine.slots()[first.slot]!.cached_tokens).toBe(0);
    const again = await send(h, a);
    expect(again.result.cachedTokens).toBe(499);
  });

  it("unified: requests that overflow the shared KV together fail, like 'Context size has been exceeded.'", async () => {
    const h = setup({ kvUnified: true, kvTokens: 1024, cacheRam: 0 });
    const a = h.engine.submit({ prompt: text(600, "a"), maxTokens: 1, finishReason: "length" });
    const b = h.engine.submit({ prompt: text(600, "b"), maxTokens: 1, finishReason: "length" });
    h.clock.runUntilIdle();
    expect((await a.done).reason).toBe("overflow");
    expect((await b.done).reason).toBe("overflow");
    expect(h.engine.slots().map((s) => s.cached_tokens)).toEqual([0, 0]);
  });

  it("unified: a slot gone idle since the last task started is purged unsaved when a running request needs its room (try_clear_idle_slots): what it held is gone", async () => {
    const h = setup({ kvUnified: true, kvTokens: 1024 });
    // Both start together (their starts save nothing worth keeping); b ends first, and no task
    // starts after it: its idle slot is never saved to the RAM cache.
    const a = h.engine.submit({ prompt: text(600, "a"), maxTokens: 200, finishReason: "length" });
    const b = h.engine.submit({ prompt: text(300, "b"), maxTokens: 1, finishReason: "length" });
    h.clock.runUntilIdle();
    expect((await b.done).reason).toBe("length");
    // a grew past what the pool held beside b's idle slot: that slot was purged, and a went on.
    expect((await a.done).reason).toBe("length");
    expect(h.engine.promptCache().entry_tokens).not.toContain(300);
    expect((await send(h, text(300, "b"))).result.cachedTokens).toBe(0);
  });

  it("a generation stops at the slot's context", async () => {
    const h = setup({ kvTokens: 1024 }); // 512 per slot
    const { result } = await send(h, text(500, "a"), 50);
    expect(result.reason).toBe("length");
    expect(result.completionTokens).toBe(12);
  });
});

describe("SlotEngine: introspection", () => {
  it("match() says what the next request would reuse, and touches nothing", async () => {
    const h = setup();
    const docs = ["A", "B", "C"].map((tag) => text(500, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    const before = JSON.stringify([h.engine.slots(), h.engine.promptCache()]);
    expect(h.engine.match(docs[0]!)).toEqual({ promptTokens: 500, cachedTokens: 499 });
    expect(h.engine.match(`${docs[2]!}more`)).toEqual({ promptTokens: 501, cachedTokens: 500 });
    expect(JSON.stringify([h.engine.slots(), h.engine.promptCache()])).toBe(before);
    expect((await send(h, docs[0]!)).result.cachedTokens).toBe(499);
  });

  it("counts what responses report, and each stop reason", async () => {
    const h = setup({ cacheRam: 0 });
    const a = text(100, "a");
    await send(h, a); // new
    await send(h, a); // full, 99
    await send(h, text(100, "b")); // new
    await send(h, text(100, "c")); // new; a's slot reused
    await send(h, a); // evicted
    expect(h.engine.stats).toMatchObject({
      cached_tokens_total: 99,
      prefix_cache_hits_total: 99,
      prefix_cache_queries_total: 500,
      completed_total: 5,
      stop_new_total: 3,
      stop_full_total: 1,
      stop_evicted_total: 1,
      stop_elsewhere_total: 0,
    });
  });

  it("a cancelled request leaves what it computed in its slot", async () => {
    const h = setup();
    const prompt = text(800, "a");
    const seq = h.engine.submit({ prompt, maxTokens: 1, finishReason: "length" });
    h.clock.advance(400);
    h.engine.cancel(seq);
    const r = (await seq.done);
    expect(r.reason).toBe("cancelled");
    expect(h.engine.slots()[1]).toEqual({ id: 1, n_ctx: 4096, is_processing: false, cached_tokens: 400 });
    expect(h.engine.stats.cancelled_total).toBe(1);
    expect((await send(h, prompt)).result.cachedTokens).toBe(400);
  });

  it("reset empties the slots and the RAM cache and forgets what was computed", async () => {
    const h = setup();
    const docs = ["A", "B", "C"].map((tag) => text(500, `doc${tag}`));
    for (const doc of docs) await send(h, doc);
    const live = h.engine.submit({ prompt: text(200, "x"), maxTokens: 100, finishReason: "length" });
    h.clock.advance(10);
    h.engine.reset();
    expect((await live.done).reason).toBe("reset");
    expect(h.engine.slots().map((s) => s.cached_tokens)).toEqual([0, 0]);
    expect(h.engine.promptCache()).toMatchObject({ entries: 0, tokens: 0, saves_total: 0 });
    expect(h.engine.stats.completed_total).toBe(0);
    const again = await send(h, docs[0]!);
    expect(again.result.prefixStop).toBe("new");
    expect(again.slot).toBe(1);
  });
});

describe("SlotEngine behind the HTTP app", () => {
  afterAll(stopAll);

  it("a chat continuation reports the slot's reuse in usage, and another conversation in between takes the other slot", async () => {
    const server = await sim({ profile: "tiny", engine: "llamacpp", parallel: 2, kvTokens: 8192, cacheRam: 0 });
    const client = openai(server);
    const ask = (messages: { role: "system" | "user" | "assistant"; content: string }[]) =>
      client.chat.completions.create({ model: "sim-model", messages, max_tokens: 4 });
    const system = { role: "system" as const, content: text(300, "agent-a") };
    // A question of 16 characters makes the rendered prompt whole tokens (1,296 characters), so
    // the reply's tokens sit on the same 4-character grid when the next turn renders it.
    const question = "first question??";
    const first = await ask([system, { role: "user", content: question }]);
    await ask([{ role: "system", content: text(300, "agent-b") }, { role: "user", content: "other" }]);
    const second = await ask([
      system,
      { role: "user", content: question },
      { role: "assistant", content: first.choices[0]!.message.content! },
      { role: "user", content: "second question" },
    ]);
    // Everything before the second question, but the last generated token (never decoded into the slot).
    const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThan(first.usage!.prompt_tokens);
    expect(cached).toBe(first.usage!.prompt_tokens + first.usage!.completion_tokens - 1);
    expect((await state(server)).cached_tokens_total).toBe(cached);
  });

  it("x-sim-prefix says stop=elsewhere when the prefix sits in a slot llama.cpp does not give the request; /sim/state counts it", async () => {
    const server = await sim({ profile: "tiny", engine: "llamacpp", parallel: 2, kvTokens: 8192, cacheRam: 0 });
    const complete = async (prompt: string) => {
      const res = await fetch(`${server.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt, max_tokens: 1 }) });
      expect(res.status).toBe(200);
      return res.headers.get("x-sim-prefix");
    };
    expect(await complete(text(400, "a"))).toBe("cached=0; stop=new"); // slot 1
    const b = text(400, "b");
    expect(await complete(b)).toBe("cached=0; stop=new"); // slot 0
    // 40 of 440 tokens match slot 0: under --slot-prompt-similarity 0.10, so slot 1 (LRU) it is.
    // held: the 40 tokens slot 0 holds of it.
    expect(await complete(`${b.slice(0, 160)}${text(400, "z")}`)).toBe("cached=0; stop=elsewhere; held=40");
    expect(await state(server)).toMatchObject({ stop_new_total: 2, stop_elsewhere_total: 1, stop_evicted_total: 0, stop_full_total: 0 });
  });

  it("x-sim-prefix adds computed= when the prompt's head sits in a busy slot and its tail, computed here, was dropped", async () => {
    const server = await sim({ profile: "tiny", engine: "llamacpp", parallel: 2, kvTokens: 8192, cacheRam: 0 });
    const head = text(300, "head");
    const prompt = `${head}${text(100, "tail")}`;
    const complete = async (text: string) => {
      const res = await fetch(`${server.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: text, max_tokens: 1 }) });
      expect(res.status).toBe(200);
      return res.headers.get("x-sim-prefix");
    };
    expect(await complete(prompt)).toBe("cached=0; stop=new");
    // Over the same head, a long generation takes that slot (by similarity: it keeps the head
    // and drops the tail) and is still decoding once its first token has come.
    const controller = new AbortController();
    const running = await fetch(`${server.url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ prompt: `${head}${text(100, "next")}`, max_tokens: 4000, stream: true }),
      signal: controller.signal,
    });
    const reader = running.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    try {
      expect(await complete(prompt)).toBe("cached=0; stop=elsewhere; held=300; computed=400");
    } finally {
      controller.abort();
      await reader.cancel().catch(() => {});
    }
  });
});
