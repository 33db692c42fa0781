/**
 * The prefill queue hybrid prices replicas with: queued tokens until the first byte, the
 * rate measured from how long they took, and the rate each replica is priced at: shrunk
 * towards its pool's, the more the fewer and older its own samples (a replica not measured
 * yet at its pool's, never at a fixed guess that could starve it of the traffic that measures it).
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { DEFAULT_PREFILL_RATE, fittedOverhead, PrefillQueue, pricedRates } from "../../src/fleet/prefill.ts";
import { memoryLog } from "../../src/log.ts";

describe("PrefillQueue", () => {
  it("queues tokens until the first byte, and measures the rate from work ahead plus its own", () => {
    const q = new PrefillQueue();
    expect(q.measured).toBe(false);
    const a = q.begin(8_000, 1);
    const b = q.begin(4_000, 2);
    expect(q.queuedTokens).toBe(12_000);
    expect(q.oldestCommit()).toBe(1);
    q.end(a, 1_000); // 8,000 tokens in 1 s
    expect(q.rate).toBe(8_000);
    expect(q.measured).toBe(true);
    q.end(b); // no first-byte time: released without a sample
    expect(q.queuedTokens).toBe(0);
    expect(q.rate).toBe(8_000);
  });

  it("the oldest commit still prefilling, as requests end in any order", () => {
    const q = new PrefillQueue();
    const [a, b, c] = [q.begin(1000, 100), q.begin(1000, 200), q.begin(1000, 300)];
    expect(q.oldestCommit()).toBe(100);
    q.end(b);
    expect(q.oldestCommit()).toBe(100);
    q.end(a);
    expect(q.oldestCommit()).toBe(300);
    q.end(c);
    expect(q.oldestCommit()).toBeUndefined();
  });

  it("the engine's own queue counts beyond what this router sent", () => {
    const q = new PrefillQueue();
    q.begin(1_000, 1);
    expect(q.withEngineQueue(0)).toBe(1_000);
    expect(q.withEngineQueue(3)).toBe(1_000 + 2 * 1_000);
  });
});

describe("Fleet.views: prefill rates", () => {
  const config = (name: string): ReplicaConfig => ({ name, url: `http://127.0.0.1:1/${name}`, kv_tokens: 0, models: ["m"] });

  it("a replica not measured yet is priced at the pool's rate (the geometric mean of the measured), not the default", () => {
    const fleet = new Fleet(["a", "b", "c"].map(config), { log: memoryLog(), healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
    for (const r of fleet.replicas) r.state = "up";
    const [a, b, c] = fleet.replicas;
    const none = fleet.views(fleet.replicas, new Set()).views.map((v) => v.prefillRate);
    expect(none).toEqual([DEFAULT_PREFILL_RATE, DEFAULT_PREFILL_RATE, DEFAULT_PREFILL_RATE]);
    a!.prefill.end(a!.prefill.begin(40_000, 1), 1_000);
    b!.prefill.end(b!.prefill.begin(10_000, 1), 1_000);
    const [ra, rb, rc] = fleet.views(fleet.replicas, new Set()).views.map((v) => v.prefillRate);
    expect(rc).toBeCloseTo(20_000, 6);
    // One sample each: priced near the pool, each on its own side of it.
    expect(ra).toBeGreaterThan(20_000);
    expect(ra).toBeLessThan(25_000);
    expect(rb).toBeLessThan(20_000);
    expect(rb).toBeGreaterThan(16_000);
    expect(c!.prefill.measured).toBe(false);
  });
});

describe("pricedRates: a replica's rate shrunk towards its pool's", () => {
  /** A queue on a clock the test moves, timed `n` times at `rate` tokens/s. */
  const timed = (clock: { now: number }, rate: number, n: number) => {
    const q = new PrefillQueue(() => clock.now);
    for (let i = 0; i < n; i++) q.end(q.begin(rate, i), 1_000);
    return q;
  };

  it("timed slow on a few prefills among peers timed often: priced within 25 % of them, not 10× slower", () => {
    const clock = { now: 0 };
    const peers = [timed(clock, 500_000, 40), timed(clock, 500_000, 40), timed(clock, 500_000, 40)];
    const slow = timed(clock, 50_000, 3);
    const rates = pricedRates([...peers, slow].map((q) => q.measurement()));
    expect(rates[3]!).toBeGreaterThan(0.75 * rates[0]!);
    expect(rates[0]!).toBeGreaterThan(450_000);
  });

  it("a card really slower, timed as often as its peers: priced near its own rate", () => {
    const clock = { now: 0 };
    const qs = [timed(clock, 500_000, 200), timed(clock, 250_000, 200)];
    const rates = pricedRates(qs.map((q) => q.measurement()));
    expect(rates[1]! / rates[0]!).toBeLessThan(0.65);
  });

  it("samples fade with time: a replica timed long ago is priced at the pool's rate again", () => {
    const clock = { now: 0 };
    const old = timed(clock, 100_000, 60);
    clock.now = 30 * 60_000;
    const fresh = [timed(clock, 400_000, 10), timed(clock, 400_000, 10)];
    const rates = pricedRates([old, ...fresh].map((q) => q.measurement()));
    expect(rates[0]! / rates[1]!).toBeGreaterThan(0.99);
  });

  it("a first byte's fixed overhead is fitted over the pool: a card sent mostly cache hits (small prefills) is not read as slow", () => {
    const clock = { now: 0 };
    // Every first byte: 4 ms of overhead (the engine's step, the round trip) + tokens ÷ 500k/s.
    const ttftMs = (tokens: number) => 4 + (tokens / 500_000) * 1000;
    const mixed = new PrefillQueue(() => clock.now);
    for (let i = 0; i < 50; i++) {
      const tokens = 1_000 + ((i * 7_919) % 30_000);
      mixed.end(mixed.begin(tokens, i), ttftMs(tokens));
    }
    const hits = new PrefillQueue(() => clock.now);
    for (let i = 0; i < 50; i++) hits.end(hits.begin(800, i), ttftMs(800));
    expect(hits.rate).toBeLessThan(150_000); // 800 tokens in 5.6 ms: the raw ratio reads 3.5× slow
    const measured = [mixed, hits].map((q) => q.measurement());
    expect(fittedOverhead(measured)).toBeCloseTo(0.004, 6);
    const [a, b] = pricedRates(measured);
    expect(a!).toBeCloseTo(500_000, -3);
    expect(b!).toBeCloseTo(500_000, -3);
  });

  it("no overhead is fitted before enough first bytes, or from prefills all of one size", () => {
    const clock = { now: 0 };
    const q = new PrefillQueue(() => clock.now);
    for (let i = 0; i < 7; i++) q.end(q.begin(1_000 * (i + 1), i), 10 + i);
    expect(fittedOverhead([q.measurement()])).toBe(0);
    const same = new PrefillQueue(() => clock.now);
    for (let i = 0; i < 20; i++) same.end(same.begin(5_000, i), 20);
    expect(fittedOverhead([same.measurement()])).toBe(0);
  });

  it("nothing measured: each keeps its own (the default, or other router instances' figure)", () => {
    expect(pricedRates([{ rate: 4_000, weight: 0 }, { rate: 9_000, weight: 0 }])).toEqual([4_000, 9_000]);
  });
});
