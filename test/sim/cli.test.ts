/**
 * `llmroute sim` as a real process, the way the router's integration tests use it.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parseConfig } from "../../src/config.ts";
import { simOptionsFromArgs } from "../../src/sim/command.ts";
import { killAll, runCli, spawnCli } from "../helpers/proc.ts";

afterAll(killAll);

const READY = /sim (\S+) listening on (http:\/\/\S+)/;

describe("llmroute sim (process)", () => {
  it("starts on --port 0, prints the readiness line, serves, and exits 0 on SIGTERM", async () => {
    const proc = spawnCli(["sim", "--port", "0", "--name", "edge1", "--profile", "tiny", "--model", "m1", "--no-prefix-cache"]);
    const [line, name, url] = await proc.waitFor(READY);
    expect(name).toBe("edge1");
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(proc.lines.filter((l) => READY.test(l))).toEqual([line]);
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
    expect((await client.models.list()).data[0]!.id).toBe("m1");
    const state = (await (await fetch(`${url}/sim/state`)).json()) as Record<string, unknown>;
    expect(state).toMatchObject({ name: "edge1", model: "m1", prefix_cache: false, kv_tokens: 4096 });
    expect(await proc.kill("SIGTERM")).toBe(0);
  });

  it("starts a fleet and prints a router.toml fragment the config loader accepts", async () => {
    const proc = spawnCli(["sim", "--replicas", "2", "--base-port", "0", "--profile", "tiny", "--kv-tokens", "8192"]);
    await proc.waitFor(/sim gpu1 listening on/);
    const ready = proc.lines.map((l) => l.match(READY)).filter((m) => m !== null);
    expect(ready.map((m) => m[1])).toEqual(["gpu0", "gpu1"]);
    // The fragment is one small write (atomic on a pipe), so once gpu1's url line is in, all of it is.
    await proc.waitFor(new RegExp(`^url = "${ready[1]![2]}"$`));
    const toml = proc.lines.filter((l) => !READY.test(l)).join("\n");
    const config = parseConfig(toml, "<sim>");
    expect(config.replicas.map((r) => [r.name, r.url, r.kv_tokens, r.models, r.metrics])).toEqual([
      ["gpu0", ready[0]![2], 8192, ["sim-model"], "/metrics"],
      ["gpu1", ready[1]![2], 8192, ["sim-model"], "/metrics"],
    ]);
    for (const m of ready) expect((await fetch(`${m[2]}/health`)).status).toBe(200);
    expect(await proc.kill("SIGINT")).toBe(0);
  });

  it("--engine ollama: the fragment checks /api/version and scrapes nothing, and the config loader accepts it", async () => {
    const proc = spawnCli(["sim", "--replicas", "2", "--base-port", "0", "--profile", "tiny", "--engine", "ollama", "--template", "qwen3-reasoning"]);
    await proc.waitFor(/sim gpu1 listening on/);
    const ready = proc.lines.map((l) => l.match(READY)).filter((m) => m !== null);
    await proc.waitFor(new RegExp(`^url = "${ready[1]![2]}"$`));
    await proc.waitFor(/^metrics = false$/);
    const toml = proc.lines.filter((l) => !READY.test(l)).join("\n");
    const config = parseConfig(toml, "<sim>");
    expect(config.replicas.map((r) => [r.name, r.health_path, r.metrics])).toEqual([
      ["gpu0", "/api/version", false],
      ["gpu1", "/api/version", false],
    ]);
    for (const m of ready) {
      expect(await (await fetch(`${m[2]}/api/version`)).json()).toMatchObject({ version: expect.any(String) });
      expect((await fetch(`${m[2]}/metrics`)).status).toBe(404);
      expect(await (await fetch(`${m[2]}/sim/state`)).json()).toMatchObject({ engine: "ollama", template: "qwen3-reasoning" });
    }
    expect(await proc.kill("SIGINT")).toBe(0);
  });

  it("answers /health with 503 during --startup-delay-ms", async () => {
    const proc = spawnCli(["sim", "--port", "0", "--profile", "tiny", "--startup-delay-ms", "600000"]);
    const [, , url] = await proc.waitFor(READY);
    expect((await fetch(`${url}/health`)).status).toBe(503);
    expect(await proc.kill()).toBe(0);
  });

  it("exits 2 with a message naming a bad flag", async () => {
    const bad = await runCli(["sim", "--port", "0", "--time-scale", "fast"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--time-scale");
    const badEngine = await runCli(["sim", "--port", "0", "--engine", "tgi"]);
    expect(badEngine.code).toBe(2);
    expect(badEngine.stderr).toContain("--engine (tgi). Expected one of: vllm, vllm-details, sglang, llamacpp, ollama");
    const badProfile = await runCli(["sim", "--port", "0", "--kv-tokens", "100", "--max-model-len", "4096"]);
    expect(badProfile.code).toBe(2);
    expect(badProfile.stderr).toContain("max_model_len 4096 exceeds the KV pool");
  });
});

describe("simOptionsFromArgs", () => {
  it.each<[Record<string, string | boolean>, Record<string, unknown>]>([
    [{}, { options: { model: "sim-model", profile: "3090", engine: "vllm-details", template: "chatml", prefixCache: true }, replicas: 1, port: 8001, basePort: undefined }],
    [{ engine: "llamacpp", template: "deepseek-r1", "block-tokens": "1" }, { options: { engine: "llamacpp", template: "deepseek-r1", blockTokens: 1 } }],
    [{ "prefix-cache": false, "time-scale": "0.01", "kv-tokens": "2048" }, { options: { prefixCache: false, timeScale: 0.01, kvTokens: 2048 } }],
    [{ replicas: "3", "base-port": "9000" }, { replicas: 3, basePort: 9000 }],
    [{ "prefill-order": "shared", "prefill-chunk-tokens": "8192" }, { options: { prefillOrder: "shared", prefillChunkTokens: 8192 } }],
    [{ "decode-while-prefilling": "none", "prefix-lookup": "batch" }, { options: { decodeWhilePrefilling: "none", prefixLookup: "batch" } }],
    [{ "close-after-chunks": "0", "fail-next": "2", "stall-ms": "250" }, { options: { closeAfterChunks: 0, failNext: 2, stallMs: 250 } }],
    [
      { engine: "llamacpp", parallel: "2", "cache-ram": "0", "slot-prompt-similarity": "0.5", "cache-prompt": false, "kv-unified": true },
      { options: { engine: "llamacpp", parallel: 2, cacheRam: 0, slotPromptSimilarity: 0.5, prefixCache: false, kvUnified: true, cacheIdleSlots: true } },
    ],
  ])("%j", (args, expected) => {
    expect(simOptionsFromArgs(args)).toMatchObject(expected);
  });

  it.each<[Record<string, string | boolean>, RegExp]>([
    [{ "decode-tps": "fast" }, /--decode-tps "fast": not a number/],
    [{ port: "70000" }, /--port 70000: not a port/],
    [{ replicas: "2", name: "x" }, /--name names a single replica/],
  ])("rejects %j", (args, message) => {
    expect(() => simOptionsFromArgs(args)).toThrow(message);
  });
});
