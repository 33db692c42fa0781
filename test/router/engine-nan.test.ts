/**
 * An engine whose /metrics reports a gauge as NaN (the text format allows it) must not
 * break routing: `least-loaded` reads the engine's waiting count. An in-process router in
 * front of two in-process sims; one is reached through a front that passes everything on
 * except its /metrics, whose waiting gauge it turns into NaN.
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
let front: ReturnType<typeof Bun.serve>;
let router: RouterServer;
const log = memoryLog();

beforeAll(async () => {
  sims = await Promise.all(["gpu0", "gpu1"].map((name) => startSim({ name, profile: "tiny" })));
  const behind = sims[1]!.url;
  front = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const res = await fetch(`${behind}${url.pathname}${url.search}`, { method: req.method, headers: req.headers, body: req.body });
      if (url.pathname !== "/metrics") return res;
      return new Response((await res.text()).replace(/^(vllm:num_requests_waiting(?:\{[^}]*\})?) .*$/m, "$1 NaN"), { headers: res.headers });
    },
  });
  const urls = [sims[0]!.url, `http://127.0.0.1:${front.port}`];
  const config = parseConfig(
    [
      `[server]\nlisten = "127.0.0.1:0"\n[routing]\npolicy = "least-loaded"\n[health]\ninterval = "200ms"`,
      ...urls.map((url, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${url}"\nmetrics = "/metrics"`),
    ].join("\n"),
    "engine-nan.toml",
    { env: {} },
  );
  router = await startRouter(config, { log });
});
afterAll(async () => {
  await router?.stop();
  front?.stop(true);
  await Promise.all(sims.map((s) => s.stop()));
});

describe("an engine's NaN gauge", () => {
  it("is a missing value: least-loaded serves every request, and /status shows no waiting count for that engine", async () => {
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    await until(async () => ((await status()).replicas[1]!.engine?.family === "vllm" ? true : undefined), "a scrape of gpu1's engine");
    const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const served = new Set<string>();
    for (let i = 0; i < 4; i++) {
      const { response } = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `question ${i}` }], max_tokens: 1 }).withResponse();
      served.add(response.headers.get("x-llmroute-replica")!);
    }
    expect(served).toEqual(new Set(["gpu0", "gpu1"]));
    const engine = (await status()).replicas[1]!.engine as Record<string, unknown>;
    expect(engine.waiting).toBeUndefined();
    expect(engine.running).toBe(0);
    expect(log.records.filter((r) => r.msg === "unhandled error")).toEqual([]);
  });
});
