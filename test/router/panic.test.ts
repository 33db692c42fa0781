/**
 * Panic mode as /status reports it follows the replicas' health, not the requests: an
 * in-process router in front of two in-process sims that answer 503 "loading" (health and
 * API) until told otherwise.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parseConfig } from "../../src/config.ts";
import { memoryLog } from "../../src/log.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { startSim, type SimServer } from "../../src/sim/index.ts";
import { until } from "../helpers/fleet.ts";

let sims: SimServer[];
let router: RouterServer;
const log = memoryLog();

beforeAll(async () => {
  sims = await Promise.all(["gpu0", "gpu1"].map((name) => startSim({ name, profile: "tiny", startupDelayMs: 600_000 })));
  const config = parseConfig(
    [`[server]\nlisten = "127.0.0.1:0"\n[health]\ninterval = "200ms"`, ...sims.map((s) => `[[replica]]\nname = "${s.name}"\nurl = "${s.url}"`)].join("\n"),
    "panic.toml",
    { env: {} },
  );
  router = await startRouter(config, { log });
});
afterAll(async () => {
  await router?.stop();
  await Promise.all(sims.map((s) => s.stop()));
});

/** The sims answer; the router's checks have found both. */
async function ready() {
  for (const sim of sims) await fetch(`${sim.url}/sim/faults`, { method: "POST", body: JSON.stringify({ startup_delay_ms: 0 }) });
  await until(async () => ((await status()).replicas.every((r) => r.state !== "down") ? true : undefined), "the checks to find both replicas back", 20_000);
}

const status = async () => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;

describe("panic mode follows health", () => {
  it("every replica down: a request is routed to them all (panic); once their checks pass, /status says no panic with no request after", async () => {
    expect((await status()).replicas.map((r) => r.state)).toEqual(["down", "down"]);
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const failed = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 1 }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(OpenAI.APIError);
    expect((await status()).panic).toBe(true);

    await ready();
    expect((await status()).panic).toBe(false);
    expect(log.records.filter((r) => r.msg.startsWith("panic mode")).map((r) => r.msg)).toEqual([
      "panic mode: every replica is down; routing to all of them",
      "panic mode over: a replica is up",
    ]);
  });

  it("a 100,000-character model name: the API's 404, and no log line longer than a few hundred characters", async () => {
    await ready();
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const from = log.records.length;
    const model = "m".repeat(100_000);
    const missing = await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 1 }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const lines = log.records.slice(from);
    expect(lines.map((r) => r.msg)).toContain("request");
    expect(Math.max(...lines.map((r) => JSON.stringify(r).length))).toBeLessThan(500);
  });
});
