/**
 * An engine with slots (llama.cpp's, Ollama's one): how long a new request waits for a slot,
 * from what the router has in flight there and the generation time it measured.
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import type { EngineFacts } from "../../src/engines/discover.ts";
import type { Capacity, EngineFamily } from "../../src/engines/profile.ts";
import { Replica } from "../../src/fleet/replica.ts";
import { SlotQueue } from "../../src/fleet/slot-queue.ts";

/** A streamed request that took `prefillMs` to its first byte and `decodeMs` after it, ending at `t + prefillMs + decodeMs`. */
function served(q: SlotQueue, t: number, prefillMs: number, decodeMs: number): number {
  const id = q.begin(prefillMs, t);
  q.firstByte(id, t + prefillMs);
  q.end(id, t + prefillMs + decodeMs, true);
  return t + prefillMs + decodeMs;
}

describe("SlotQueue", () => {
  it("what is left of one request, by its commit: its prefill, then the generation time measured", () => {
    const q = new SlotQueue();
    const a = q.begin(1_000, 0, 7);
    expect(q.leftMs(7, 0)).toBeUndefined(); // no generation timed yet
    served(q, 0, 500, 6_000);
    expect(q.leftMs(7, 400)).toBe(600 + 6_000); // 600 ms of prefill left, then a 6 s generation
    q.firstByte(a, 1_000);
    expect(q.leftMs(7, 3_000)).toBe(4_000);
    expect(q.leftMs(7, 9_000)).toBe(0); // overdue: ends any moment
    expect(q.leftMs(8, 3_000)).toBeUndefined(); // no such request here
    q.end(a, 9_500, true);
    expect(q.leftMs(7, 9_500)).toBeUndefined();
  });

  it("no wait while a slot is free, nor before a generation was timed", () => {
    const q = new SlotQueue();
    const a = q.begin(1_000, 0);
    q.firstByte(a, 1_000);
    expect(q.decodeMs).toBeUndefined();
    expect(q.waitSeconds(1, 2_000)).toBe(0); // the only slot is taken, but no generation was timed
    served(q, 0, 500, 6_000);
    expect(q.waitSeconds(2, 2_000)).toBe(0); // one of two slots taken
    expect(q.waitSeconds(1, 2_000)).toBeGreaterThan(0);
  });

  it("one slot: the rest of the running generation, then each request queued ahead in full", () => {
    const q = new SlotQueue();
    served(q, 0, 500, 6_000); // generations here take 6 s after the first byte
    const t = 10_000;
    const running = q.begin(1_000, t);
    q.firstByte(running, t + 1_000);
    // 2 s into its generation: 4 s left.
    expect(q.waitSeconds(1, t + 3_000)).toBeCloseTo(4, 6);
    // One more queued behind it (its prefill 2 s at the rate then, and a 6 s generation): 12 s.
    q.begin(2_000, t + 3_000);
    expect(q.waitSeconds(1, t + 3_000)).toBeCloseTo(12, 6);
  });

  it("several slots: the first one freed, after the queue ahead has taken its turns", () => {
    const q = new SlotQueue();
    served(q, 0, 0, 4_000);
    const t = 10_000;
    const a = q.begin(0, t);
    q.firstByte(a, t); // ends at t + 4 s
    const b = q.begin(0, t + 3_000);
    q.firstByte(b, t + 3_000); // ends at t + 7 s
    expect(q.waitSeconds(2, t + 3_000)).toBeCloseTo(1, 6);
    q.begin(1_000, t + 3_000); // queued: takes a's slot at t + 4 s, until t + 9 s
    expect(q.waitSeconds(2, t + 3_000)).toBeCloseTo(4, 6); // b's slot, at t + 7 s
  });

  it("a generation past its expected end waits 0, not less", () => {
    const q = new SlotQueue();
    served(q, 0, 0, 1_000);
    const a = q.begin(0, 5_000);
    q.firstByte(a, 5_000);
    expect(q.waitSeconds(1, 9_000)).toBe(0);
  });

  it("learns the generation time from complete streamed answers only, recent ones most", () => {
    const q = new SlotQueue();
    served(q, 0, 0, 10_000);
    const failed = q.begin(0, 20_000);
    q.firstByte(failed, 20_000);
    q.end(failed, 20_100, false); // cut short: not a sample
    const whole = q.begin(0, 30_000);
    q.end(whole, 31_000, true); // never streamed: says nothing of its generation
    expect(q.decodeMs).toBe(10_000);
    served(q, 40_000, 0, 1_000);
    expect(q.decodeMs!).toBeGreaterThan(1_000);
    expect(q.decodeMs!).toBeLessThan(10_000);
    expect(q.size).toBe(0);
  });

  it("counts the most streams seen at once (an engine started with more slots than its family's default)", () => {
    const q = new SlotQueue();
    const ids = [q.begin(0, 0), q.begin(0, 0), q.begin(0, 0)];
    q.firstByte(ids[0]!, 10);
    q.firstByte(ids[1]!, 20);
    q.end(ids[0]!, 30, true);
    q.firstByte(ids[2]!, 40);
    expect(q.concurrentSeen).toBe(2);
  });
});

describe("a replica's view", () => {
  const config = (name: string): ReplicaConfig => ({ name, url: `http://127.0.0.1:1/${name}`, kv_tokens: 0, models: ["m"] });
  const facts = (family: EngineFamily, capacity?: Capacity): EngineFacts => ({
    family,
    ...(capacity ? { capacity } : {}),
    metrics: { state: "off" },
    found: [],
    missing: [],
    cacheCounters: false,
    cachedTokensSeen: false,
  });
  const busy = (r: Replica) => {
    const t = Date.now();
    served(r.slotQueue, t - 60_000, 100, 8_000); // its generations take 8 s
    r.slotQueue.firstByte(r.slotQueue.begin(100, t - 2_000), t - 1_000); // one running, 7 s left
  };

  it("Ollama (one slot, OLLAMA_NUM_PARALLEL's default): the wait for its slot", () => {
    const r = new Replica(config("ollama0"));
    r.facts = facts("ollama");
    busy(r);
    expect(r.servingSlots).toBe(1);
    expect(r.view().slotWait?.()).toBeCloseTo(7, 0);
  });

  it("llama.cpp: its slots from /props; one of four taken is no wait", () => {
    const r = new Replica(config("llama0"));
    r.facts = facts("llamacpp", { kvTokens: 32_768, slots: 4, source: "/props" });
    busy(r);
    expect(r.servingSlots).toBe(4);
    expect(r.view().slotWait).toBeUndefined();
  });

  it("vLLM (continuous batching): never a slot wait", () => {
    const r = new Replica(config("vllm0"));
    r.facts = facts("vllm");
    busy(r);
    expect(r.servingSlots).toBeUndefined();
    expect(r.view().slotWait).toBeUndefined();
  });
});
