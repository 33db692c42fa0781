import { describe, expect, it } from "bun:test";
import { CapacityWatch } from "../../src/fleet/capacity.ts";
import { Replica } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";

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
    expect(warns[0]!.msg).toContain("gpu0 holds ~1,100 tokens");
    expect(warns[0]!.msg).toContain("KV budget of 1,000 (110%)");
    expect(warns[0]!.msg).toContain("exceeds all its KV (1,000), so routing cannot fix this: add a card, compact context client-side, or run fewer large contexts at once");

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
    for (let i = 0; i < 50; i++) gpu0.observeTokens(2000, 1000); // this engine: 2 chars per token
    expect(watch.update([gpu0], { perReplica: new Map([["gpu0", 2400]]), fleet: 2400 }, 1)[0]).toMatchObject({ workingSetTokens: 1200, over: true });
  });

  it("calibration is led by large prompts: short ones with template overhead barely move it", () => {
    const gpu0 = replica("gpu0", 1000);
    for (let i = 0; i < 5; i++) gpu0.observeTokens(320_000, 80_000);
    for (let i = 0; i < 10; i++) gpu0.observeTokens(12, 13);
    expect(gpu0.charsPerToken).toBeGreaterThan(3.99);
    expect(gpu0.charsPerToken).toBeLessThan(4);
  });

  it("a replica without kv_tokens is never over budget", () => {
    const log = memoryLog();
    const watch = new CapacityWatch(log);
    expect(watch.update([replica("gpu0", 0)], { perReplica: new Map([["gpu0", 1e9]]), fleet: 1e9 }, 1)[0]).toMatchObject({ over: false, ratio: 0 });
    expect(log.records).toEqual([]);
  });
});

  it("when the fleet as a whole fits, the advice is placement, not another card", () => {
    const log = memoryLog();
    const watch = new CapacityWatch(log);
    const cards = [replica("gpu0", 1000), replica("gpu1", 1000)];
    // the same shared documents on both cards: 1,200 tokens each, 1,300 distinct in all
    const [a] = watch.update(cards, { perReplica: new Map([["gpu0", 4800], ["gpu1", 4800]]), fleet: 5200 }, 1);
    expect(a).toMatchObject({ over: true });
    expect(a!.advice).toContain("fits, so the cards are unevenly loaded or hold the same prefixes twice: placement can help");
    expect(watch.fleet).toEqual({ workingSetTokens: 1300, kvTokens: 2000 });
    expect(log.records.filter((r) => r.level === "warn")).toHaveLength(2);
  });
