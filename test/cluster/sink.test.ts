/**
 * What an instance shares with the others must never fail the request it learned from: a
 * client's long session key, an event that cannot be encoded. An in-process router with
 * `[cluster]` pointing at a Redis that is not there (what it learns waits in the backlog),
 * in front of an in-process sim, driven by the official openai client.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { Cluster } from "../../src/cluster/cluster.ts";
import { parseConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import type { PrefixChain } from "../../src/route/chain.ts";
import { startSim, type SimServer } from "../../src/sim/index.ts";
import { router as pureRouter } from "../route/_fixtures.ts";

let sim: SimServer;
let router: RouterServer;
const log = memoryLog();

beforeAll(async () => {
  sim = await startSim({ name: "gpu0", profile: "tiny" });
  const config = parseConfig(
    [
      `[server]\nlisten = "127.0.0.1:0"\n[health]\ninterval = "60s"`,
      // Port 1: nothing listens; the cluster keeps what it learns in its backlog.
      `[cluster]\nredis = "redis://127.0.0.1:1"\nname = "solo"\ncatch_up_timeout = "0s"`,
      `[[replica]]\nname = "gpu0"\nurl = "${sim.url}"`,
    ].join("\n"),
    "sink.toml",
    { env: {} },
  );
  router = await startRouter(config, { log });
});
afterAll(async () => {
  await router?.stop();
  await sim?.stop();
});

describe("sharing never fails a request", () => {
  it("a 70,000-character prompt_cache_key is served (not a 500), and its commit waits in the backlog", async () => {
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const before = router.cluster!.backlogEvents();
    const done = await client.chat.completions.create({
      model: "sim-model",
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 2,
      prompt_cache_key: "k".repeat(70_000),
    });
    expect(done.choices[0]!.finish_reason).toBe("length");
    expect(router.cluster!.backlogEvents()).toBeGreaterThan(before);
    expect(log.records.filter((r) => r.msg === "unhandled error")).toEqual([]);
  });

  it("Responses ids learnt while Redis is away wait for it in a bounded list, the oldest dropped first", async () => {
    const cluster = router.cluster!;
    expect(cluster.state).not.toBe("up");
    for (let i = 0; i < 100_500; i++) cluster.sink.response(`resp_${i}`, "gpu0");
    expect(cluster.pendingResponseKeys).toBeLessThanOrEqual(100_000);
    expect(cluster.pendingResponseKeys).toBeGreaterThanOrEqual(90_000);
    // The events themselves wait in the backlog (bounded by its bytes), as before.
    expect(cluster.backlogEvents()).toBeGreaterThan(100_000);
  });

  it("an event that cannot be encoded is logged and counted; the call returns, and the batch's other events stay", () => {
    const log = memoryLog();
    const pure = pureRouter("hybrid");
    const fleet = new Fleet([], { log, healthPath: "/health", healthTimeoutMs: 1000, failures: 3 });
    const cluster = new Cluster({ redis: "redis://127.0.0.1:1", name: "t", namespace: "t", catchUpTimeoutMs: 0, responseTtlMs: 60_000 }, { router: pure, fleet, log });
    const good: PrefixChain = { lo: Uint32Array.of(1), hi: Uint32Array.of(2), ends: Uint32Array.of(3), length: 1 };
    // A chain whose hashes cannot be read: a bug elsewhere must not reach the request path.
    const broken = {
      ...good,
      get lo(): Uint32Array {
        throw new Error("no hashes");
      },
    };
    cluster.sink.commit([good], "gpu0", 1, 1, false);
    expect(() => cluster.sink.commit([broken], "gpu0", 2, 2, false)).not.toThrow();
    cluster.sink.commit([good], "gpu0", 3, 3, false);
    expect(cluster.backlogEvents()).toBe(2);
    expect(cluster.status().events).toMatchObject({ unencodable: 1 });
    expect(cluster.status().warnings.join("\n")).toMatch(/1 event could not be encoded.*no hashes/);
    expect(log.records.filter((r) => r.level === "warn" && r.msg.startsWith("cluster: an event could not be encoded"))).toHaveLength(1);
  });
});
