import { describe, expect, it } from "bun:test";
import { CapacityWatch } from "../../src/fleet/capacity.ts";
import { Replica } from "../../src/fleet/replica.ts";
import { memoryLog } from "../../src/log.ts";
import { POLICY_NAMES } from "../../src/route/options.ts";

const replica = (name: string, kv: number) => new Replica({ name, url: "http://x", kv_tokens: kv, models: [] });

describe("capacity wall: warn once per episode, with the numbers and the levers", () => {
  it("warns when the working set passes kv_tokens, once, and clears below 90 %", () => {
    const log = memoryLog();
    const watch = new CapacityWatch(log);
    const gpu0 = replica("gpu0", 1000); // 4 chars per token until calibrated
    const at = (chars: number, now: number) => watch.update([gpu0], { perReplica: new Map([["gpu0", chars]]), fleet: chars }, now)[0]!;

    expect(at(3600, 1)).toMatchObject({ workingSetTokens: 900, over: false });
    expect(at(4400, 2)).toMatchObject({ workingSetTokens: 1100, over: true, since: 2 });
    expect(at(6000, 3)).toMatchObject({ over: true, since: 2 });
    const warns = log.records.filter((r) => r.level === "warn");
    expect(warns).toHaveLength(1);
    expect(warns[0]!.msg).toContain("gpu0 working set ~1,100 tokens, 110% of kv_tokens 1,000");
    expect(warns[0]!.msg).toContain("routing cannot fix this");
    expect(warns[0]!.fields?.advice).toContain("exceeds all its KV (1,000): no placement fits it. Add a card, compact context client-side, or run fewer large contexts at once.");

    expect(at(3800, 4).over).toBe(true); // 95 %: still the same episode
    expect(at(3500, 5).over).toBe(false); // 87.5 %: over
    expect(log.records.at(-1)).toMatchObject({ level: "info", msg: "capacity: gpu0 back under its KV budget" });
    at(5000, 6);
    expect(log.records.filter((r) => r.level === "warn")).toHaveLength(2);
    expect(watch.warnings.get("gpu0")).toBe(2);
  });

  it("uses each replica's calibrated characters per token", () => {
    const watch = new CapacityWatch(memoryLog());
    const gpu0 = replica("gpu0", 1000);
    for (let i = 0; i < 50; i++) gpu0.calibration.observe(2000, 1000); // this engine: 2 chars per token
    expect(watch.update([gpu0], { perReplica: new Map([["gpu0", 2400]]), fleet: 2400 }, 1)[0]).toMatchObject({ workingSetTokens: 1200, over: true });
  });

  it("calibration is led by large prompts: short ones with template overhead barely move it", () => {
    const gpu0 = replica("gpu0", 1000);
    for (let i = 0; i < 5; i++) gpu0.calibration.observe(320_000, 80_000);
    for (let i = 0; i < 10; i++) gpu0.calibration.observe(240, 80); // 20 of the 80 tokens are template
    expect(gpu0.charsPerToken).toBeGreaterThan(3.99);
    expect(gpu0.charsPerToken).toBeLessThan(4);
  });

  it("keeps the default until 1,000 prompt tokens were seen, and never learns from one-line prompts", () => {
    const gpu1 = replica("gpu1", 1000);
    gpu1.calibration.observe(7, 13); // {"role":"user","content":"hi"}: the chat template is most of it
    expect(gpu1.charsPerToken).toBe(4);
    for (let i = 0; i < 200; i++) gpu1.calibration.observe(7, 13); // 2,600 tokens of "hi"s: still nothing to learn from
    expect(gpu1.charsPerToken).toBe(4);
    gpu1.calibration.observe(1500, 500);
    expect(gpu1.charsPerToken).toBe(4); // 500 tokens: not enough yet
    gpu1.calibration.observe(1500, 500);
    expect(gpu1.charsPerToken).toBeCloseTo(3, 5); // 1,000: this engine's own ratio
  });

  it("a real agent turn calibrates at once", () => {
    const gpu0 = replica("gpu0", 1000);
    gpu0.calibration.observe(9000, 3000);
    expect(gpu0.charsPerToken).toBe(3);
  });

  it("the fleet's tokens use the ratio of what is held: a replica holding nothing does not sway it", () => {
    const watch = new CapacityWatch(memoryLog());
    const gpu0 = replica("gpu0", 100_000);
    const gpu1 = replica("gpu1", 100_000);
    gpu0.calibration.observe(26_000, 8_693); // two agent conversations: ~3 chars per token
    gpu1.calibration.observe(2, 13); // one "hi"
    gpu1.calibration.charsPerToken = 0.54; // even if a replica's ratio is way off
    const readings = watch.update([gpu0, gpu1], { perReplica: new Map([["gpu0", 26_000], ["gpu1", 0]]), fleet: 26_000 }, 1);
    expect(readings.map((r) => r.workingSetTokens)).toEqual([8693, 0]);
    expect(watch.fleet.workingSetTokens).toBe(8693);
  });

  it("distinct prefixes on replicas of different ratios sum exactly; shared ones count once", () => {
    const watch = new CapacityWatch(memoryLog());
    const gpu0 = replica("gpu0", 100_000);
    const gpu1 = replica("gpu1", 100_000);
    gpu0.calibration.observe(20_000, 10_000); // 2 chars per token
    gpu1.calibration.observe(40_000, 10_000); // 4 chars per token
    const distinct = watch.update([gpu0, gpu1], { perReplica: new Map([["gpu0", 6000], ["gpu1", 2000]]), fleet: 8000 }, 1);
    expect(distinct.map((r) => r.workingSetTokens)).toEqual([3000, 500]);
    expect(watch.fleet.workingSetTokens).toBe(3500);
    // the 2,000 characters on gpu1 are also on gpu0: 6,000 distinct
    watch.update([gpu0, gpu1], { perReplica: new Map([["gpu0", 6000], ["gpu1", 2000]]), fleet: 6000 }, 2);
    expect(watch.fleet.workingSetTokens).toBeLessThan(3500);
    expect(watch.fleet.workingSetTokens).toBeGreaterThanOrEqual(2625);
  });

  it("a replica without kv_tokens is never over budget", () => {
    const log = memoryLog();
    const watch = new CapacityWatch(log);
    expect(watch.update([replica("gpu0", 0)], { perReplica: new Map([["gpu0", 1e9]]), fleet: 1e9 }, 1)[0]).toMatchObject({ over: false, ratio: 0 });
    expect(log.records).toEqual([]);
  });

  it("when the fleet as a whole fits, the advice is placement, not another card", () => {
    const log = memoryLog();
    const watch = new CapacityWatch(log);
    const cards = [replica("gpu0", 1000), replica("gpu1", 1000)];
    // the same shared documents on both cards: 1,200 tokens each, 1,300 distinct in all
    const [a] = watch.update(cards, { perReplica: new Map([["gpu0", 4800], ["gpu1", 4800]]), fleet: 5200 }, 1);
    expect(a).toMatchObject({ over: true });
    expect(a!.finding).toContain("placement can help");
    expect(a!.advice).toContain("fits, so the cards are unevenly loaded or hold the same prefixes twice.");
    expect(watch.fleet).toEqual({ workingSetTokens: 1300, kvTokens: 2000 });
    expect(log.records.filter((r) => r.level === "warn")).toHaveLength(2);
  });
});

describe("the finding is one short line; the advice fits the running policy", () => {
  // The same shared documents on both cards: 1,200 tokens each, 1,300 distinct in all (the fleet fits).
  const fits = { perReplica: new Map([["gpu0", 4800], ["gpu1", 4800]]), fleet: 5200 };
  // Distinct conversations: 2,400 tokens against 2,000 of KV in all (the fleet is full).
  const full = { perReplica: new Map([["gpu0", 4800], ["gpu1", 4800]]), fleet: 9600 };
  const cards = () => [replica("gpu0", 1000), replica("gpu1", 1000)];

  it.each([...POLICY_NAMES])("under %s: the advice names the running policy, not the default's behaviour as if it ran", (policy) => {
    const log = memoryLog();
    const watch = new CapacityWatch(log, () => policy);
    const [a] = watch.update(cards(), fits, 1);
    expect(a!.finding).toBe("working set ~1,200 tokens, 120% of kv_tokens 1,000: the engine evicts and re-prefills; the fleet has room, so placement can help");
    expect(a!.advice).toStartWith("The fleet's distinct working set (~1,300 of 2,000 KV tokens) fits, so the cards are unevenly loaded or hold the same prefixes twice. ");
    expect(a!.advice).toContain(`The running policy, ${policy}, `);
    expect(a!.advice).not.toContain("the default policy, hybrid, puts");
    if (policy !== "hybrid") expect(a!.advice).toContain('routing.policy = "hybrid"');
    // The log line is the finding; the advice rides along as a field.
    const warn = log.records.find((r) => r.level === "warn")!;
    expect(warn.msg).toBe(`capacity: gpu0 ${a!.finding}`);
    expect(warn.fields).toMatchObject({ replica: "gpu0", advice: a!.advice });
  });

  it("a full fleet: routing cannot fix it, whatever the policy; the levers are the advice", () => {
    const watch = new CapacityWatch(memoryLog(), () => "cache-aware");
    const [a] = watch.update(cards(), full, 1);
    expect(a!.finding).toBe("working set ~1,200 tokens, 120% of kv_tokens 1,000: the engine evicts and re-prefills; the fleet is full too, so routing cannot fix this");
    expect(a!.advice).toBe("The fleet's distinct working set (~2,400 tokens) exceeds all its KV (2,000): no placement fits it. Add a card, compact context client-side, or run fewer large contexts at once.");
  });

  it("the finding is one line of at most 160 characters, even for large numbers", () => {
    const watch = new CapacityWatch(memoryLog(), () => "hybrid");
    const [a] = watch.update([replica("gpu0", 122_636)], { perReplica: new Map([["gpu0", 4 * 1_149_428]]), fleet: 4 * 1_149_428 }, 1);
    expect(a!.finding).not.toContain("\n");
    expect(a!.finding!.length).toBeLessThanOrEqual(160);
  });
});
