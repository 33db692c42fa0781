/**
 * The dashboard's memory of the last minutes, as plain calls with an explicit clock:
 * the last requests newest first, windowed sums that forget what left the window, routes
 * by reason, the three hit figures, TTFT percentiles per replica.
 */
import { describe, expect, it } from "bun:test";
import { RecentRequests, type RecentRecord } from "../../src/ops/recent.ts";

const T0 = 1_700_000_000_000; // a bucket boundary (a multiple of 10 s)

function rec(overrides: Partial<RecentRecord> = {}): RecentRecord {
  return { endpoint: "chat", model: "m", replica: "gpu0", route: "spread", status: 200, stream: true, outcome: "ok", totalMs: 50, failovers: 0, ...overrides };
}

describe("RecentRequests", () => {
  it("lists the last requests newest first, bounded, with only the fields the page shows", () => {
    const recent = new RecentRequests({ keep: 3 });
    for (let i = 0; i < 5; i++) recent.record(rec({ promptTokens: 100 + i, cachedTokens: i, ttftMs: 12.345, model: i === 4 ? "x".repeat(500) : "m" }), T0 + i);
    const { last } = recent.snapshot(T0 + 10);
    expect(last.map((r) => r.prompt_tokens)).toEqual([104, 103, 102]);
    expect(last[1]).toEqual({
      at: T0 + 3,
      endpoint: "chat",
      model: "m",
      replica: "gpu0",
      route: "spread",
      status: 200,
      outcome: "ok",
      stream: true,
      prompt_tokens: 103,
      cached_tokens: 3,
      ttft_ms: 12.3,
      total_ms: 50,
    });
    expect(last[0]!.model).toHaveLength(120);
    expect(new RecentRequests().snapshot(T0).last).toEqual([]);
  });

  it("sums the hit rate and routes over the window, and forgets what left it", () => {
    const recent = new RecentRequests({ bucketMs: 10_000, windowMs: 60_000 });
    recent.record(rec({ route: "spread", promptTokens: 1000, cachedTokens: 0 }), T0);
    recent.record(rec({ route: "pin", promptTokens: 1000, cachedTokens: 900 }), T0 + 15_000);
    recent.record(rec({ route: "pin,failover", promptTokens: 1000, cachedTokens: 0 }), T0 + 25_000);
    recent.record(rec({ route: undefined, replica: undefined, status: 404, outcome: "rejected" }), T0 + 25_000);

    const s = recent.snapshot(T0 + 30_000);
    expect(s.requests).toBe(4);
    expect(s.hits).toEqual({ prompt_tokens: 3000, cached_tokens: 900, delivered: 0.3, available: null, captured: null, estimated_requests: 0 });
    expect(s.routes).toEqual([
      { route: "pin", requests: 1 },
      { route: "pin,failover", requests: 1 },
      { route: "rejected", requests: 1 },
      { route: "spread", requests: 1 },
    ]);
    expect(s.series).toHaveLength(6);
    expect(s.series.at(-1)!.start).toBe(T0 + 30_000);
    expect(s.series.map((b) => b.cached_tokens)).toEqual([0, 0, 0, 900, 0, 0]);

    // 55 s later the first bucket has left the window; its slot is reused, not summed twice.
    recent.record(rec({ route: "spread", promptTokens: 500, cachedTokens: 500 }), T0 + 60_000);
    const later = recent.snapshot(T0 + 60_000);
    expect(later.requests).toBe(4);
    expect(later.hits).toMatchObject({ prompt_tokens: 2500, cached_tokens: 1400, delivered: 0.56 });
    expect(recent.snapshot(T0 + 200_000).requests).toBe(0);
    expect(recent.snapshot(T0 + 200_000).hits.delivered).toBeNull();
  });

  it("available and captured come from the requests that carry the router's estimates", () => {
    const recent = new RecentRequests();
    recent.record(rec({ promptTokens: 1000, cachedTokens: 500, availableTokens: 900, capturedTokens: 600 }), T0);
    recent.record(rec({ promptTokens: 1000, cachedTokens: 500, availableTokens: 100, capturedTokens: 0 }), T0);
    recent.record(rec({ promptTokens: 2000, cachedTokens: 0 }), T0);
    expect(recent.snapshot(T0).hits).toEqual({ prompt_tokens: 4000, cached_tokens: 1000, delivered: 0.25, available: 0.5, captured: 0.3, estimated_requests: 2 });
  });

  it("TTFT p50/p90 per replica from streamed requests inside the window", () => {
    const recent = new RecentRequests({ ttftSamples: 10, windowMs: 60_000 });
    for (let i = 1; i <= 10; i++) recent.record(rec({ replica: "gpu1", ttftMs: i * 10 }), T0);
    recent.record(rec({ replica: "gpu0", ttftMs: 500 }), T0);
    recent.record(rec({ replica: "gpu0", ttftMs: undefined, stream: false }), T0);
    expect(recent.snapshot(T0).ttft).toEqual([
      { replica: "gpu0", n: 1, p50_ms: 500, p90_ms: 500 },
      { replica: "gpu1", n: 10, p50_ms: 55, p90_ms: 91 },
    ]);
    // The ring keeps the last 10 samples per replica; older ones are overwritten.
    for (let i = 0; i < 5; i++) recent.record(rec({ replica: "gpu1", ttftMs: 1000 }), T0 + 30_000);
    expect(recent.snapshot(T0 + 30_000).ttft[1]).toEqual({ replica: "gpu1", n: 10, p50_ms: 550, p90_ms: 1000 });
    // Outside the window only the recent samples count; a replica with none is left out.
    expect(recent.snapshot(T0 + 80_000).ttft).toEqual([{ replica: "gpu1", n: 5, p50_ms: 1000, p90_ms: 1000 }]);
  });
});
