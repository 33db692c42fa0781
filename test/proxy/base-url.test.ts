/**
 * A replica URL written as OpenAI clients and vLLM's docs write a base URL, ending in /v1
 *: the router appends /v1/… itself, so config takes the /v1 off and the
 * health check, requests and probe all reach the engine. Real sim and router processes.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterProc, startSimProc, type RouterProc, type SimProc } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";

let gpu0: SimProc;
let router: RouterProc;

beforeAll(async () => {
  gpu0 = await startSimProc("gpu0");
  router = await startRouterProc([{ name: "gpu0", url: `${gpu0.url}/v1` }]);
});
afterAll(killAll);

describe('url = "http://host:port/v1"', () => {
  it("passes its health check (GET /health at the base) and its models are discovered; serve logs that it took /v1 off", async () => {
    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    expect(status.replicas[0]).toMatchObject({ name: "gpu0", url: gpu0.url, state: "up", last_error: null, models: ["sim-model"] });
    expect(logRecords(router).find((r) => String(r.msg).startsWith("config:"))).toMatchObject({ key: "replica[0].url", msg: expect.stringContaining("appends /v1/") });
  });

  it("serves requests: the router sends them to /v1/chat/completions, not /v1/v1/…", async () => {
    const { data, response } = await router
      .client()
      .chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hello" }], max_tokens: 2 })
      .withResponse();
    expect([response.status, response.headers.get("x-llmroute-replica")]).toEqual([200, "gpu0"]);
    expect(data.choices).toHaveLength(1);
  });

  it("probe --replica reaches the engine and discovers its model", async () => {
    const probe = await runCli(["probe", "--replica", "gpu0", "--config", router.configPath, "--tokens", "1000", "--json"]);
    const report = JSON.parse(probe.stdout) as { mode: string; model?: string; target: { url: string } };
    expect(report).toMatchObject({ mode: "engine", model: "sim-model", target: { url: gpu0.url } });
  }, 60_000);
});
