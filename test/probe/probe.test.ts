/**
 * `llmroute probe` as users run it: the CLI as a real process against `llmroute sim`
 * replicas (3090 profile, time-scaled) and in-process routers on ephemeral ports.
 *
 * What these tests judge is what the machine cannot change: the cached tokens the engine
 * reports, the counters, the replicas and routes, the exit codes and the report's shape.
 * The probe's TTFTs are wall-clock times, which a loaded machine stretches as it likes, so
 * no test here compares them (the verdict's arithmetic on given times is verdict.test.ts's).
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { parseConfig } from "../../src/config.ts";
import { memoryLog } from "../../src/log.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { startSim, type SimServer } from "../../src/sim/index.ts";
import { runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

// 8k tokens on the 3090 profile is a 2 s cold prefill; at 0.05 that is ~100 ms, warm ~5 ms.
const TIME_SCALE = 0.05;
const TOKENS = "8000";
// The --via replicas share the scale (a sim race at tiny prefills, fixed in 2a85e82, once
// forced these slower).
const VIA_TIME_SCALE = TIME_SCALE;
const VIA_TOKENS = "8000";
// The replica without a prefix cache must not look cached by time either (its verdict is 1
// only if warm is not <= 0.5x cold): a 1 s prefill each, which no stall of a loaded machine
// makes look twice as fast once.
const UNCACHED_TIME_SCALE = 0.5;

let cached: SimServer;
let uncached: SimServer;
let busy: SimServer;
let fleet: SimServer[];
let hybrid: RouterServer;
let roundrobin: RouterServer;
let dir: string;

const routerConfig = (policy: string, replicas: SimServer[]) =>
  parseConfig(
    [
      `[server]\nlisten = "127.0.0.1:0"\n[routing]\npolicy = "${policy}"`,
      ...replicas.map((s) => `[[replica]]\nname = "${s.name}"\nurl = "${s.url}"\nkv_tokens = 122636`),
    ].join("\n"),
    `<${policy} test router>`,
    { env: {} },
  );

beforeAll(async () => {
  [cached, uncached, busy, ...fleet] = await Promise.all([
    startSim({ name: "cached", timeScale: TIME_SCALE }),
    startSim({ name: "uncached", timeScale: UNCACHED_TIME_SCALE, prefixCache: false }),
    startSim({ name: "busy", timeScale: TIME_SCALE }),
    startSim({ name: "gpu0", timeScale: VIA_TIME_SCALE }),
    startSim({ name: "gpu1", timeScale: VIA_TIME_SCALE }),
  ]);
  [hybrid, roundrobin] = await Promise.all([
    startRouter(routerConfig("hybrid", fleet), { log: memoryLog() }),
    startRouter(routerConfig("roundrobin", fleet), { log: memoryLog() }),
  ]);
  dir = await tempDir("llmroute-probe-test-");
});

afterAll(async () => {
  await Promise.all([hybrid?.stop(), roundrobin?.stop()]);
  await Promise.all([cached, uncached, busy, ...fleet].map((s) => s?.stop()));
});

const probe = (...args: string[]) => runCli(["probe", ...args]);
const json = (stdout: string) => JSON.parse(stdout) as Record<string, any>;

describe("against one engine", () => {
  it("a working prefix cache: exit 0 with cold/warm TTFT, cached tokens, metric names and the sample size", async () => {
    const { code, stdout, stderr } = await probe("--url", cached.url, "--tokens", TOKENS, "--repeat", "2", "--json");
    expect(code).toBe(0);
    const r = json(stdout);
    expect(r.exit_code).toBe(0);
    expect(r.model).toBe("sim-model");
    expect(r.tokens.source).toBe("tokenize");
    expect(Math.abs(r.tokens.prefix - 8000)).toBeLessThan(400);
    expect(r.summary.n).toBe(2);
    expect(r.pairs).toHaveLength(2);
    expect(new Set(r.pairs.map((p: any) => p.salt)).size).toBe(2);
    for (const p of r.pairs) {
      expect(p.cold.ttftMs).toBeGreaterThan(0);
      expect(p.warm.ttftMs).toBeGreaterThan(0);
      expect(p.warm.cachedTokens).toBeGreaterThanOrEqual(0.9 * p.prefixTokens);
      expect(p.cold.cachedTokens).toBe(0);
      expect(p.warmCounters.hits).toBeGreaterThanOrEqual(0.9 * p.prefixTokens);
      expect(p.coldCounters.hits).toBe(0);
    }
    expect(r.idle).toEqual({ checked: true, load: { running: 0, waiting: 0, family: "vllm" } });
    const vllm = r.metrics.families.find((f: any) => f.family === "vllm");
    expect(vllm.found).toEqual(expect.arrayContaining(["vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:num_requests_running"]));
    expect(vllm.missing).toContain("vllm:gpu_prefix_cache_hits_total");
    expect(r.metrics.families.find((f: any) => f.family === "sglang").found).toEqual([]);
    expect(r.verdict.summary).toContain("n=2");
    expect(stderr).toContain("pair 2/2: warm request");
  });

  it("prints a human report: figures per pair, the median with n, names found, the verdict", async () => {
    const { code, stdout, stderr } = await probe("--url", cached.url, "--tokens", TOKENS);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^pair\s+cold TTFT\s+warm TTFT\s+warm\/cold/m);
    expect(stdout).toMatch(/^median\s+.*n=1$/m);
    expect(stdout).toContain("vllm:prefix_cache_hits_total");
    // "prefix cache works: [warm TTFT 0.05x cold (<= 0.5x), ]100% of the shared prefix cached":
    // the timing part is there only when the machine let warm be fast enough
    expect(stdout).toMatch(/^verdict {2}0: prefix cache works: .*\d+% of the shared prefix cached/m);
    expect(stderr).toMatch(/cold request \([\d,]+ tokens, salt probe-\d{8}T\d{6}Z-[0-9a-f]{8}\): TTFT/);
  });

  it("prefix caching disabled (sim --no-prefix-cache): exit 1 with the likely cause", async () => {
    const { code, stdout, stderr } = await probe("--url", uncached.url, "--tokens", TOKENS);
    expect(code).toBe(1);
    expect(stdout).toContain("verdict  1: no cache effect");
    expect(stdout).toMatch(/likely causes \(from this run\):\n {2}- the engine reports 0% of the prefix cached.*prefix caching disabled/);
    expect(stdout).toContain("vllm:prefix_cache_hits_total rose by 0 of");
    expect(stderr).toContain("probe: no cache effect");
  });

  it("warns when the replica is not idle, says so in the report, and still judges", async () => {
    const stop = new AbortController();
    // Its own replica, so the decoding request cannot disturb other tests.
    const other = await fetch(`${busy.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: "keep decoding ".repeat(200) }], max_tokens: 5_000, stream: true }),
      signal: stop.signal,
    });
    expect(other.status).toBe(200);
    const reader = other.body!.getReader();
    await reader.read(); // the first chunk: the request is running now
    try {
      const { code, stdout, stderr } = await probe("--url", busy.url, "--tokens", TOKENS, "--json");
      expect(stderr).toContain("is not idle (running 1, waiting 0)");
      const r = json(stdout);
      expect(r.idle.load.running).toBe(1);
      expect(r.verdict.notes.join(" ")).toContain("not idle");
      expect(code).toBe(0);
    } finally {
      stop.abort();
      await reader.cancel().catch(() => {});
    }
  });
});

describe("an engine shaped like llama-server without --metrics, that refuses to stream", () => {
  it("falls back to whole-request timing, counts with llama.cpp's /tokenize and judges by timings.cache_n", async () => {
    let previous = "";
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const path = new URL(req.url).pathname;
        if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "llama" }] });
        if (path === "/metrics") return Response.json({ error: { code: 501, message: "This server does not support metrics endpoint." } }, { status: 501 });
        const body = (await req.json()) as Record<string, any>;
        if (path === "/tokenize") {
          if (typeof body.content !== "string") return Response.json({ error: { message: '"content" must be provided' } }, { status: 400 });
          return Response.json({ tokens: Array.from({ length: Math.ceil(body.content.length / 4) }, (_, i) => i) });
        }
        if (body.stream) return Response.json({ error: { code: 400, message: "streaming is not supported by this build" } }, { status: 400 });
        const prompt = (body.messages as { content: string }[]).map((m) => m.content).join("");
        let common = 0;
        while (common < prompt.length && prompt[common] === previous[common]) common++;
        previous = prompt;
        const cacheN = Math.floor(common / 4);
        return Response.json({
          choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "length" }],
          usage: { prompt_tokens: Math.ceil(prompt.length / 4), completion_tokens: 1 },
          timings: { cache_n: cacheN, prompt_n: Math.ceil(prompt.length / 4) - cacheN },
        });
      },
    });
    try {
      const { code, stdout, stderr } = await probe("--url", `http://127.0.0.1:${server.port}`, "--tokens", "3000", "--json");
      const r = json(stdout);
      expect(stderr).toContain("streaming was rejected (");
      expect(r.tokens.source).toBe("tokenize");
      expect(r.pairs[0].cold.streamed).toBe(false);
      expect(r.pairs[0].warm.cachedSource).toBe("timings");
      expect(r.pairs[0].cachedFraction).toBeGreaterThanOrEqual(0.9);
      expect(r.metrics.available).toBe(false);
      expect(r.idle.checked).toBe(false);
      expect(r.verdict.notes.join(" ")).toContain("did not stream");
      expect(code).toBe(0);
      const human = await probe("--url", `http://127.0.0.1:${server.port}`, "--tokens", "3000");
      expect(human.stdout).toContain("/metrics: not available");
      expect(human.stdout).toContain("timings.cache_n");
    } finally {
      await server.stop(true);
    }
  });
});

describe("could not probe: exit 2 with a clear message", () => {
  it("a closed port: connection refused", async () => {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
    const url = `http://127.0.0.1:${server.port}`;
    await server.stop(true);
    const { code, stdout, stderr } = await probe("--url", url);
    expect(code).toBe(2);
    expect(stderr).toContain(`could not connect to ${url}/v1/models (connection refused)`);
    expect(stdout).toContain("verdict  2: could not probe");
  });

  it("a URL's credentials are kept to be sent, and shown as *** in every line", async () => {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
    const port = server.port;
    await server.stop(true);
    const { code, stdout, stderr } = await probe("--url", `http://u:hunter2@127.0.0.1:${port}/v1`);
    expect(code).toBe(2);
    expect(stderr).toContain(`could not connect to http://***@127.0.0.1:${port}/v1/models (connection refused)`);
    expect(stdout).toContain(`llmroute probe  http://***@127.0.0.1:${port}\n`);
    expect(stdout + stderr).not.toContain("hunter2");
  });

  it("an engine that wants a key: 401 names --api-key", async () => {
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: (req) =>
        req.headers.get("authorization") === "Bearer right"
          ? Response.json({ object: "list", data: [] })
          : Response.json({ error: { message: "invalid api key", type: "AuthenticationError", code: 401 } }, { status: 401 }),
    });
    try {
      const { code, stderr } = await probe("--url", `http://127.0.0.1:${server.port}`, "--api-key", "wrong");
      expect(code).toBe(2);
      expect(stderr).toContain("answered 401 (invalid api key)");
      expect(stderr).toContain("--api-key");
      // With the right key it gets past auth, to the next honest problem: no model listed.
      const ok = await runCli(["probe", "--url", `http://127.0.0.1:${server.port}`, "--api-key", "env:PROBE_KEY", "--json"], { env: { PROBE_KEY: "right" } });
      expect(ok.code).toBe(2);
      expect(json(ok.stdout).error).toContain("lists no model");
    } finally {
      await server.stop(true);
    }
  });

  it("an unknown model: lists the served ones", async () => {
    const { code, stderr } = await probe("--url", cached.url, "--model", "gpt-9");
    expect(code).toBe(2);
    expect(stderr).toContain('model "gpt-9" is not served');
    expect(stderr).toContain("it serves: sim-model");
  });

  it("a prompt larger than the model's context", async () => {
    const { code, stderr } = await probe("--url", cached.url, "--tokens", "500000");
    expect(code).toBe(2);
    expect(stderr).toMatch(/does not fit model sim-model \(max_model_len \d+\); use --tokens \d+ or less/);
  });

  it("no target at all is a usage error", async () => {
    const { code, stderr } = await probe("--tokens", "100");
    expect(code).toBe(2);
    expect(stderr).toContain("say what to probe");
  });
});

describe("--replica / --all from router.toml", () => {
  it("--all probes each replica with its URL and exits with the worst code", async () => {
    const config = `${dir}/router.toml`;
    await Bun.write(
      config,
      `[[replica]]\nname = "good"\nurl = "${cached.url}"\nkv_tokens = 122636\n\n[[replica]]\nname = "nocache"\nurl = "${uncached.url}"\nkv_tokens = 122636\n`,
    );
    const all = await probe("--all", "--config", config, "--tokens", "4000", "--json");
    expect(all.code).toBe(1);
    const doc = json(all.stdout);
    expect(doc.reports.map((r: any) => [r.target.label, r.verdict.code])).toEqual([
      ["good", 0],
      ["nocache", 1],
    ]);
    const one = await probe("--replica", "good", "--config", config, "--tokens", "4000");
    expect(one.code).toBe(0);
    expect(one.stdout).toContain(`good ${cached.url}`);
    const unknown = await probe("--replica", "gpu7", "--config", config);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('no replica named "gpu7"');
  });
});

describe("--all: each replica named once", () => {
  it("a replica that cannot be probed: its name, then what failed, once", async () => {
    const closed = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
    const url = `http://127.0.0.1:${closed.port}`;
    await closed.stop(true);
    const config = `${dir}/dead.toml`;
    // Two engines behind one (closed) gateway, under two path prefixes.
    await Bun.write(config, `[[replica]]\nname = "gpu0"\nurl = "${url}"\n\n[[replica]]\nname = "gpu1"\nurl = "${url}/b"\n`);
    const { code, stdout, stderr } = await probe("--all", "--config", config);
    expect(code).toBe(2);
    const whyAt = (base: string) => `could not connect to ${base}/v1/models (connection refused); is the engine running, and is the URL right?`;
    const why = whyAt(url);
    expect(stderr.trim().split("\n").at(-1)).toBe(`llmroute probe: gpu0: could not probe: ${why}; gpu1: could not probe: ${whyAt(`${url}/b`)}`);
    expect(stdout).toContain(`llmroute probe  gpu0 ${url}\nverdict  2: could not probe: ${why}\n`);
    expect(stdout + stderr).not.toMatch(/gpu\d: could not probe: gpu\d/);
  });
});

describe("--via a running llmroute", () => {
  it("hybrid pins the conversation (long and short shared prefix) and warm turns hit the cache: exit 0", async () => {
    const { code, stdout, stderr } = await probe("--via", hybrid.url, "--tokens", VIA_TOKENS, "--json");
    expect({ code, stderr }).toEqual({ code: 0, stderr: expect.any(String) });
    const r = json(stdout);
    const [long, short] = r.figures;
    expect(long.pinned).toBe(true);
    expect(short.pinned).toBe(true);
    expect(long.routes).toEqual(["spread", "pin", "pin", "pin"]);
    expect(long.warm).toBe(true);
    expect(long.cachedFraction).toBeGreaterThanOrEqual(0.9);
    expect(r.conversations[1].prefixBytes).toBeLessThan(1024);
    expect(r.conversations[0].turns).toHaveLength(4);
  });

  it("roundrobin is reported as not pinned, naming the replica of every turn: exit 1", async () => {
    const { code, stdout } = await probe("--via", roundrobin.url, "--tokens", VIA_TOKENS);
    expect(code).toBe(1);
    expect(stdout).toMatch(/verdict {2}1: not pinned: gpu(0|1) -> gpu(0|1) -> gpu(0|1) -> gpu(0|1) \(n=4 turns\)/);
    expect(stdout).toMatch(/pinned: NO \((gpu0 -> gpu1|gpu1 -> gpu0) -> /);
    expect(stdout).toContain("long conversation not pinned: turns went to gpu");
  });

  it("an engine instead of a router: no x-llmroute-replica header, exit 2", async () => {
    const { code, stderr } = await probe("--via", cached.url, "--tokens", "2000");
    expect(code).toBe(2);
    expect(stderr).toContain("no x-llmroute-replica header");
  });
});
