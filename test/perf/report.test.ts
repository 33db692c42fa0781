import { describe, expect, it } from "bun:test";
import { addedMs, renderReport, targetsOf, type OverheadResults } from "../../perf/lib/report.ts";
import type { Cell } from "../../perf/lib/summarize.ts";
import { judge } from "../../perf/lib/targets.ts";

const cell = (arm: string, body: string, concurrency: number, rps: number, p50Ms: number, armUs?: number): Cell => ({
  arm, body, concurrency, runs: 3, rps, p50Ms, p99Ms: p50Ms * 3, ...(armUs === undefined ? {} : { armUs }), engineUs: 40, clientUs: 20, errors: 0, spread: 0.05,
});

const results = (over: Partial<OverheadResults> = {}): OverheadResults => ({
  machine: { date: "2026-11-30T01:02:03.000Z", cpu: "AMD EPYC", cores: 2, load: [1, 2, 3], kernel: "6.1", bun: "1.4.5" },
  finishedAt: "2026-11-30T01:20:00.000Z",
  loadAfter: [1.5, 2, 3],
  otherCores: 0.6,
  pinning: { proxy: "1", load: "0" },
  runs: 3,
  seconds: 3,
  client: "wrk 4.1.0 (1 thread, keep-alive)",
  arms: [{ id: "direct" }, { id: "haproxy" }, { id: "passthrough" }, { id: "llmroute" }],
  missing: [{ id: "nginx", why: "nginx not installed: `apt-get install nginx-light`" }],
  bodies: [{ id: "small", label: "small (1.0 KB)", bytes: 1000 }, { id: "large", label: "339 KB", bytes: 339_000 }],
  concurrency: [1, 64],
  cells: [
    cell("direct", "small", 1, 12000, 0.07), cell("haproxy", "small", 1, 2500, 0.2, 110), cell("passthrough", "small", 1, 2000, 0.3, 180), cell("llmroute", "small", 1, 900, 0.6, 490),
    cell("direct", "small", 64, 14000, 4), cell("haproxy", "small", 64, 10000, 6, 60), cell("passthrough", "small", 64, 8000, 8, 80), cell("llmroute", "small", 64, 4000, 16, 200),
    cell("direct", "large", 1, 3000, 0.3), cell("haproxy", "large", 1, 1500, 0.5, 200), cell("passthrough", "large", 1, 1000, 0.8, 500), cell("llmroute", "large", 1, 250, 3.8, 2800),
    cell("direct", "large", 64, 2000, 30), cell("haproxy", "large", 64, 1000, 60, 400), cell("passthrough", "large", 64, 1200, 50, 550), cell("llmroute", "large", 64, 500, 120, 2000),
  ],
  streams: {
    chunks: 40, gapMs: 5, streams: 48, concurrency: 16,
    cells: [
      { arm: "direct", runs: 3, gapP50Ms: 5.1, gapP99Ms: 8, reads: 41, expectedReads: 41, coalesced: 0 },
      { arm: "llmroute", runs: 3, gapP50Ms: 5.2, gapP99Ms: 8.3, reads: 41, expectedReads: 41, coalesced: 0 },
    ],
  },
  memory: {
    conversation: "three-turn chats",
    replicas: 8,
    bound: 1_000_000,
    sizes: [
      { entries: 100_000, conversations: 16_000, rssMB: 70, baseRssMB: 40, indexBytes: 9_800_000, fillSeconds: 4 },
      { entries: 1_000_000, conversations: 160_000, rssMB: 210, baseRssMB: 40, indexBytes: 60_000_000, fillSeconds: 40 },
    ],
    capacity: { medianMs: 0.004, p90Ms: 1.1, rebuildMs: 90, samples: 200 },
    router: { entries: 1_000_000, rssMB: 180, statusMs: 0.5, metricsMs: 1.2, firstStatusMs: 300, samples: 20 },
  },
  decision: {
    replicas: 8,
    indexEntries: 1_000_000,
    rows: [
      { policy: "hybrid", tokens: 8_000, bodyKiB: 32, links: 34, indexEntries: 1_000_000, medianMs: 0.06, p90Ms: 0.1 },
      { policy: "hybrid", tokens: 90_000, bodyKiB: 354, links: 362, indexEntries: 1_000_000, medianMs: 0.8, p90Ms: 1.2 },
      { policy: "hybrid", tokens: 90_000, bodyKiB: 354, links: 362, indexEntries: 0, medianMs: 0.1, p90Ms: 0.2 },
    ],
  },
  ...over,
});

describe("targetsOf", () => {
  const byText = (r: OverheadResults) => new Map(targetsOf(r).map((t) => [t.text, t]));

  it("computes each ratio from the cells of the same run", () => {
    const t = byText(results());
    expect(t.get("small bodies, concurrency 64: req/s ÷ Bun pass-through")!.measured).toBeCloseTo(0.5, 9);
    expect(t.get("small bodies, concurrency 64: req/s ÷ HAProxy")!.measured).toBeCloseTo(0.4, 9);
    expect(t.get("small bodies, concurrency 64: CPU per request ÷ Bun pass-through's")!.measured).toBeCloseTo(2.5, 9);
    // (3.8 − 0.3) ÷ (0.8 − 0.3)
    expect(t.get("339 KB bodies, concurrency 1: added p50 ÷ Bun pass-through's added p50")!.measured).toBeCloseTo(7, 9);
    expect(t.get("streams: added inter-chunk gap p99 (llmroute − direct)")!.measured).toBeCloseTo(0.3, 9);
  });

  it("memory and decision figures come from the bound and the full index", () => {
    const t = byText(results());
    expect(t.get("index: bytes per entry (index.memoryBytes() ÷ entries at the bound)")!.measured).toBe(60);
    expect(t.get("three-turn conversations the default bound holds")!.measured).toBe(160_000);
    expect(t.get("routing decision, 90k-token chat over 8 replicas (hybrid, full index)")!.measured).toBe(0.8);
    expect(t.get("/status and /metrics scrape at the bound (the slower one's median)")!.measured).toBe(1.2);
  });

  it("an arm that was not run leaves its target not measured, with the reason", () => {
    const r = results({ arms: [{ id: "direct" }, { id: "passthrough" }, { id: "llmroute" }], missing: [{ id: "haproxy", why: "haproxy not installed: `apt-get install haproxy`" }] });
    r.cells = r.cells.filter((c) => c.arm !== "haproxy");
    const t = byText(r).get("small bodies, concurrency 64: req/s ÷ HAProxy")!;
    expect(judge(t)).toEqual({ status: "not measured", text: "not measured (haproxy not installed: `apt-get install haproxy`)" });
  });
});

describe("addedMs", () => {
  it("is the arm's p50 minus direct's at concurrency 1", () => {
    expect(addedMs(results().cells, "llmroute", "large")).toBeCloseTo(3.5, 9);
    expect(addedMs(results().cells, "nginx", "large")).toBeNaN();
  });
});

describe("renderReport", () => {
  const text = renderReport(results());

  it("opens with the date, the machine, how busy it was and how processes were pinned", () => {
    expect(text.split("\n")[0]).toContain("**2026-11-30**, AMD EPYC, 2 cores, load 1.00 / 2.00 / 3.00");
    expect(text).toContain("other processes used 0.60 of 2 cores on average while the arms ran — a busy machine");
    expect(text).toContain("Proxy under test pinned to CPU 1; client (wrk) and engine on CPU 0.");
    expect(text).toContain("Not run: nginx (nginx not installed: `apt-get install nginx-light`).");
  });

  it("shows the targets table: p50 at concurrency 1, req/s above, router CPU per request, arms as columns", () => {
    expect(text).toContain("|  | direct | HAProxy | Bun pass-through | llmroute |");
    expect(text).toContain("| small (1.0 KB), concurrency 1: p50 ms | 0.07 | 0.20 | 0.30 | 0.60 |");
    expect(text).toContain("| small (1.0 KB), concurrency 64: req/s | 14,000 | 10,000 | 8,000 | 4,000 |");
    expect(text).toContain("| router CPU per small (1.0 KB) request (concurrency 64): µs | — | 60 | 80 | 200 |");
  });

  it("says what the client and the engine do alone, so a reader can tell the load side is not the limit", () => {
    expect(text).toContain("The load side alone (direct, small (1.0 KB), concurrency 64): 14,000 req/s, with 20 µs of client and 40 µs of engine CPU per request on CPU 0.");
  });

  it("prints the ratios against every other proxy", () => {
    expect(text).toContain("| small (1.0 KB), concurrency 64 | 0.50× | 0.40× | 2.50× |");
  });

  it("lists every target with limit, figure and verdict", () => {
    expect(text).toContain("| small bodies, concurrency 64: req/s ÷ Bun pass-through | ≥ 0.80× | 0.50× | missed by 0.30× (38 % of the limit) |");
    expect(text).toContain("| streams: added inter-chunk gap p99 (llmroute − direct) | ≤ 0.50 ms | 0.30 ms | met |");
    expect(text).toContain("| three-turn conversations the default bound holds | ≥ 300,000 | 160,000 | missed by 140,000 (47 % of the limit) |");
  });

  it("without pinning, says so", () => {
    const { pinning: _p, ...rest } = results();
    expect(renderReport(rest)).toContain("Not pinned: every process on every core.");
  });
});
