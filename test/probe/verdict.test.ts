import { describe, expect, it } from "bun:test";
import {
  conversationFigures,
  engineVerdict,
  median,
  viaVerdict,
  type ConversationMeasure,
  type PairMeasure,
  type RequestMeasure,
} from "../../src/probe/verdict.ts";
import { renderVia } from "../../src/probe/render.ts";

const req = (ttftMs: number, extra: Partial<RequestMeasure> = {}): RequestMeasure => ({ ttftMs, totalMs: ttftMs + 5, streamed: true, content: "ok", ...extra });
const pair = (coldMs: number, warmMs: number, extra: Partial<PairMeasure> & { cached?: number; coldExtra?: Partial<RequestMeasure>; warmExtra?: Partial<RequestMeasure> } = {}): PairMeasure => {
  const { cached, coldExtra, warmExtra, ...rest } = extra;
  return {
    salt: "s",
    prefixTokens: 90_000,
    prefixTokensSource: "tokenize",
    cold: req(coldMs, coldExtra),
    warm: req(warmMs, { ...(cached === undefined ? {} : { cachedTokens: cached, cachedSource: "usage" }), ...warmExtra }),
    ...rest,
  };
};

describe("median", () => {
  it.each([
    [[], undefined],
    [[3], 3],
    [[5, 1, 3], 3],
    [[4, 1, 3, 2], 2.5],
    [[1, NaN, 3], 2],
  ])("%p → %p", (xs, m) => {
    expect(median(xs)).toBe(m as number | undefined);
  });
});

describe("engineVerdict", () => {
  it.each([
    ["the seed's 22.3 s cold then 1.4 s warm", 0, [pair(22_300, 1_400)]],
    ["warm exactly half of cold", 0, [pair(1_000, 500)]],
    ["warm a bit faster only", 1, [pair(1_000, 700)]],
    ["no difference", 1, [pair(1_000, 1_010)]],
    ["timing unclear but the engine reused 95 % of the prefix", 0, [pair(1_000, 800, { cached: 85_500 })]],
    ["timing unclear and 80 % cached", 1, [pair(1_000, 800, { cached: 72_000 })]],
    ["median of three pairs, one noisy", 0, [pair(1_000, 100), pair(1_000, 900), pair(1_000, 120)]],
    ["median of three pairs, one lucky", 1, [pair(1_000, 100), pair(1_000, 900), pair(1_000, 950)]],
  ] as const)("%s → exit %d", (_name, code, pairs) => {
    const { verdict, summary } = engineVerdict({ pairs: [...pairs] });
    expect(verdict.code).toBe(code);
    expect(verdict.summary).toContain(`n=${pairs.length}`);
    expect(summary.n).toBe(pairs.length);
  });

  it("the summary carries the medians and the median per-pair ratio", () => {
    const { summary } = engineVerdict({ pairs: [pair(20_000, 1_000), pair(24_000, 2_400), pair(22_000, 1_100)] });
    expect(summary.coldTtftMs).toBe(22_000);
    expect(summary.warmTtftMs).toBe(1_100);
    expect(summary.ratio).toBeCloseTo(0.05, 5);
  });

  it("no effect with cached_tokens 0: 'prefix caching disabled' is named from evidence, first", () => {
    const { verdict } = engineVerdict({ pairs: [pair(1_000, 990, { cached: 0 })] });
    expect(verdict.code).toBe(1);
    expect(verdict.causes[0]).toEqual({ text: expect.stringContaining("prefix caching disabled"), evidence: true });
    expect(verdict.causes.filter((c) => c.text.includes("prefix caching disabled"))).toHaveLength(1);
  });

  it("a faster warm request the engine counts ~0 cached for is not a cache (a cold request slowed by load): exit 1, and the note says why", () => {
    // As on a loaded CI box: llama-server with --no-cache-prompt, cold 2.3 s, warm 1.0 s, timings.cache_n 0.
    const slowCold = pair(2_300, 1_000, { warmExtra: { cachedTokens: 0, cachedSource: "timings" } });
    const { verdict } = engineVerdict({ pairs: [slowCold] });
    expect(verdict.code).toBe(1);
    expect(verdict.causes[0]).toEqual({ text: expect.stringContaining("0% of the prefix cached"), evidence: true });
    expect(verdict.notes.join(" ")).toContain("warm TTFT was 0.43x cold, but the engine counted 0% cached");
    // 10 % counted and faster by time: the timing decides, as before.
    expect(engineVerdict({ pairs: [pair(2_300, 1_000, { cached: 9_000 })] }).verdict.code).toBe(0);
  });

  it("no effect with flat vLLM counters during the warm request: named from evidence", () => {
    const counters = { hits: 0, queries: 90_016, names: ["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"] as [string, string] };
    const { verdict } = engineVerdict({ pairs: [pair(1_000, 990, { warmCounters: counters })] });
    const first = verdict.causes[0]!;
    expect(first.evidence).toBe(true);
    expect(first.text).toContain("vllm:prefix_cache_hits_total rose by 0 of 90,016");
    expect(verdict.notes.join(" ")).toContain("no cached_tokens");
  });

  it("cold and warm answered by different replicas behind a router: a proxy in between", () => {
    const { verdict } = engineVerdict({ pairs: [pair(1_000, 990, { coldExtra: { replica: "gpu0" }, warmExtra: { replica: "gpu1" } })] });
    expect(verdict.causes.find((c) => c.evidence)?.text).toContain("sent the cold request to gpu0 and the warm one to gpu1");
  });

  it("a busy replica is a warning on success and a cause on failure", () => {
    const idle = { running: 2, waiting: 5, family: "vllm" as const };
    const ok = engineVerdict({ pairs: [pair(1_000, 100)], idle });
    expect(ok.verdict.code).toBe(0);
    expect(ok.verdict.notes.join(" ")).toContain("not idle");
    const bad = engineVerdict({ pairs: [pair(1_000, 900)], idle });
    expect(bad.verdict.causes.filter((c) => c.evidence).map((c) => c.text).join(" ")).toContain("2 running and 5 waiting");
  });

  it.each([
    [10, "below one cache block"],
    [300, "too short"],
  ])("a %d-token prompt is named as a cause", (tokens, text) => {
    const { verdict } = engineVerdict({ pairs: [pair(10, 10, { prefixTokens: tokens })] });
    expect(verdict.causes.filter((c) => c.evidence).map((c) => c.text).join(" ")).toContain(text);
  });

  it("every 'no effect' lists the four common causes somewhere", () => {
    const { verdict } = engineVerdict({ pairs: [pair(1_000, 1_000)] });
    const all = verdict.causes.map((c) => c.text).join(" ");
    for (const cause of ["prefix caching disabled", "evicted", "busy", "proxy"]) expect(all).toContain(cause);
  });

  it("sample size is always visible, and one pair is called out as thin", () => {
    expect(engineVerdict({ pairs: [pair(1_000, 100)] }).verdict.notes.join(" ")).toContain("n=1");
    expect(engineVerdict({ pairs: [pair(1_000, 100), pair(1_000, 100), pair(1_000, 100)] }).verdict.notes.join(" ")).not.toContain("n=3:");
  });

  it("without streaming the timing basis is stated", () => {
    const { verdict } = engineVerdict({ pairs: [pair(1_000, 100, { coldExtra: { streamed: false } })] });
    expect(verdict.notes.join(" ")).toContain("did not stream");
  });
});

const convo = (label: "long" | "short", turns: [string, number, number?][]): ConversationMeasure => ({
  label,
  prefixTokens: label === "long" ? 16_000 : 50,
  prefixBytes: label === "long" ? 64_000 : 180,
  turns: turns.map(([replica, ttft, cached], i) => req(ttft, { replica, route: i === 0 ? "spread" : "pin", promptTokens: 16_000 + 20 * i, ...(cached === undefined ? {} : { cachedTokens: cached }) })),
});

describe("viaVerdict", () => {
  const pinnedLong = convo("long", [["gpu0", 4_000], ["gpu0", 300], ["gpu0", 320], ["gpu0", 310]]);
  const pinnedShort = convo("short", [["gpu1", 30], ["gpu1", 29], ["gpu1", 31], ["gpu1", 30]]);

  it("pinned and warm → 0", () => {
    const { verdict, figures } = viaVerdict([pinnedLong, pinnedShort]);
    expect(verdict.code).toBe(0);
    expect(figures.map((f) => f.pinned)).toEqual([true, true]);
    expect(figures[0]!.ratio).toBeCloseTo(310 / 4_000, 5);
    expect(verdict.summary).toContain("n=4");
  });

  it("round-robin: not pinned → 1, naming the replica of every turn and the turns that went cold again", () => {
    const rr = convo("long", [["gpu0", 4_000], ["gpu1", 3_900], ["gpu0", 300], ["gpu1", 310]]);
    const { verdict, figures } = viaVerdict([rr, convo("short", [["gpu0", 30], ["gpu1", 30], ["gpu0", 30], ["gpu1", 30]])]);
    expect(verdict.code).toBe(1);
    expect(verdict.summary).toContain("gpu0 -> gpu1 -> gpu0 -> gpu1");
    expect(figures[0]!.coldTurns).toEqual([2]);
    expect(verdict.causes[0]!.text).toContain("turn 2 paid a cold prefill again");
  });

  it("the identity-window trap: long pinned, short not → 1 and named", () => {
    const { verdict } = viaVerdict([pinnedLong, convo("short", [["gpu0", 30], ["gpu1", 30], ["gpu1", 30], ["gpu0", 30]])]);
    expect(verdict.code).toBe(1);
    expect(verdict.causes.map((c) => c.text).join(" ")).toContain("identity-window trap");
  });

  it("pinned but the replica's cache shows nothing → 1, pointing at probing that replica", () => {
    const cold = convo("long", [["gpu0", 4_000], ["gpu0", 3_900], ["gpu0", 4_100], ["gpu0", 3_950]]);
    const { verdict } = viaVerdict([cold, pinnedShort]);
    expect(verdict.code).toBe(1);
    expect(verdict.causes[0]!.text).toContain("llmroute probe --replica gpu0");
  });

  it("warm by cached tokens even when timing is noisy: cached / previous turn's prompt", () => {
    const noisy = convo("long", [["gpu0", 1_000], ["gpu0", 900, 15_990], ["gpu0", 950, 16_010]]);
    const f = conversationFigures(noisy);
    expect(f.warm).toBe(true);
    expect(f.cachedFraction).toBeGreaterThan(0.99);
  });

  it("a first turn slowed by load, then turns the engine counts ~0 cached for: not warm", () => {
    const slowFirst = convo("long", [["gpu0", 4_000], ["gpu0", 1_900, 0], ["gpu0", 1_950, 0]]);
    expect(conversationFigures(slowFirst).warm).toBe(false);
    expect(viaVerdict([slowFirst, pinnedShort]).verdict.code).toBe(1);
    // Without a count from the engine, timing alone decides.
    expect(conversationFigures(convo("long", [["gpu0", 4_000], ["gpu0", 1_900], ["gpu0", 1_950]])).warm).toBe(true);
  });

  const withRoutes = (c: ConversationMeasure, routes: string[]): ConversationMeasure => ({ ...c, turns: c.turns.map((t, i) => ({ ...t, route: routes[i]! })) });

  it("a failover that moved the short conversation is named first, not the identity-window trap", () => {
    const short = withRoutes(convo("short", [["gpu0", 30], ["gpu0", 29], ["gpu1", 31], ["gpu1", 30]]), ["spread", "pin", "pin,failover", "pin"]);
    const { verdict } = viaVerdict([pinnedLong, short]);
    expect(verdict.code).toBe(1);
    expect(verdict.causes[0]!.text).toStartWith("short conversation: turn 3 failed over (gpu0 -> gpu0 -> gpu1 -> gpu1");
    expect(verdict.causes.map((c) => c.text).join(" ")).not.toContain("identity-window trap");
    expect(verdict.summary).toStartWith("a turn failed over (short turn 3)");
  });

  it("a failover that moved the long conversation is named first, not the policy", () => {
    const long = withRoutes(convo("long", [["gpu0", 4_000], ["gpu0", 300], ["gpu1", 4_100], ["gpu1", 320]]), ["spread", "pin", "pin,failover", "pin"]);
    const { verdict } = viaVerdict([long, pinnedShort]);
    expect(verdict.code).toBe(1);
    expect(verdict.causes[0]!.text).toContain("long conversation: turn 3 failed over");
    expect(verdict.causes.map((c) => c.text).join(" ")).not.toContain("use hybrid");
  });

  it("the report says which turn failed over, and lists the failover first among the likely causes", () => {
    const short = withRoutes(convo("short", [["gpu0", 30], ["gpu0", 29], ["gpu1", 31], ["gpu1", 30]]), ["spread", "pin", "pin,failover", "pin"]);
    const { figures, verdict } = viaVerdict([pinnedLong, short]);
    const text = renderVia({ mode: "via", target: { label: "r", url: "http://r" }, model: "m", notes: [], conversations: [pinnedLong, short], figures, verdict });
    expect(text).toContain("  pinned: NO (gpu0 -> gpu0 -> gpu1 -> gpu1); failed over on turn 3");
    expect(text.split("likely causes (from this run):\n")[1]!.split("\n")[0]).toStartWith("  - short conversation: turn 3 failed over");
  });

  it("a failover and a move of its own: both named, the failover first", () => {
    const short = withRoutes(convo("short", [["gpu0", 30], ["gpu1", 29], ["gpu0", 31], ["gpu0", 30]]), ["spread", "spread", "spread,failover", "pin"]);
    const { verdict } = viaVerdict([pinnedLong, short]);
    expect(verdict.causes.map((c) => c.text.slice(0, 40))).toEqual([expect.stringContaining("turn 3 failed over"), expect.stringContaining("short-prefix conversation not pinned")]);
  });

  it("a first turn failed over, the conversation then pinned where it landed: 0, with a note", () => {
    const short = withRoutes(pinnedShort, ["spread,failover", "pin", "pin", "pin"]);
    const { verdict } = viaVerdict([pinnedLong, short]);
    expect(verdict.code).toBe(0);
    expect(verdict.notes.join(" ")).toContain("short conversation: turn 1 failed over, without moving the conversation");
  });

  it("a turn without the router's header is never counted as pinned", () => {
    const missing = convo("long", [["gpu0", 4_000], ["gpu0", 300]]);
    delete missing.turns[1]!.replica;
    expect(conversationFigures(missing).pinned).toBe(false);
  });
});
