/**
 * The prefill queue hybrid prices replicas with: queued tokens until the first byte, the
 * rate measured from how long they took, and a replica not measured yet priced at its
 * peers' mean (never at a fixed guess that could starve it of the traffic that measures it).
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { DEFAULT_PREFILL_RATE, PrefillQueue } from "../../src/fleet/prefill.ts";
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

  it("a replica not measured yet is priced at the measured replicas' mean, not the default", () => {
    const fleet = new Fleet(["a", "b", "c"].map(config), { log: memoryLog(), healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
    for (const r of fleet.replicas) r.state = "up";
    const [a, b, c] = fleet.replicas;
    const none = fleet.views(fleet.replicas, new Set()).views.map((v) => v.prefillRate);
    expect(none).toEqual([DEFAULT_PREFILL_RATE, DEFAULT_PREFILL_RATE, DEFAULT_PREFILL_RATE]);
    a!.prefill.end(a!.prefill.begin(40_000, 1), 1_000);
    b!.prefill.end(b!.prefill.begin(20_000, 1), 1_000);
    const rates = fleet.views(fleet.replicas, new Set()).views.map((v) => v.prefillRate);
    expect(rates).toEqual([40_000, 20_000, 30_000]);
    expect(c!.prefill.measured).toBe(false);
  });
});
