/**
 * `llmroute status`: what it prints (stale engine figures, KV per model) and where it
 * looks (the config's address without its secrets; the admin listener named on a 404).
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { formatStatus } from "../../src/commands/status.ts";
import type { ClusterStatus } from "../../src/cluster/cluster.ts";
import type { ReplicaStatus, StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouterInProcess, startSimInProcess } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

afterEach(killAll);
afterAll(killAll);

const NOW = Date.parse("2026-01-01T12:00:00Z");
const ago = (s: number) => new Date(NOW - s * 1000).toISOString();

function replica(name: string, over: Partial<ReplicaStatus> = {}): ReplicaStatus {
  return {
    name,
    url: `http://${name}:8000`,
    healthy: true,
    state: "up",
    health_path: "/health",
    consecutive_failures: 0,
    timeouts: { connect: 0, first_byte: 0, stream_idle: 0 },
    cache_losses: 0,
    last_error: null,
    inflight: 0,
    served: 10,
    failovers: 0,
    kv_full: 0,
    kv_wall: null,
    busy: 0,
    over_context: 0,
    models: ["m"],
    conversations: 2,
    index_entries: 20,
    working_set_tokens: 1000,
    kv_tokens: 10_000,
    kv: { configured: 10_000, published: null, evidence: { lower_tokens: null, upper_tokens: null }, believed: 10_000 },
    working_set_ratio: 0.1,
    chars_per_token: 4,
    prompt_tokens: 100,
    cached_tokens: 50,
    cached_ratio: 0.5,
    hit: { available_tokens: 80, captured_tokens: 60, delivered_tokens: 50, predictions: { hit: 3, miss: 0, template: 0, unexpected_hit: 0 }, corrected_entries: 0 },
    prefill: { queued_tokens: 0, rate_tokens_per_s: 4000 },
    engine: null,
    facts: null,
    warnings: [],
    capacity_advice: null,
    ...over,
  };
}

function doc(replicas: ReplicaStatus[], over: Partial<StatusDocument> = {}): StatusDocument {
  return {
    version: "0.1.0",
    policy: "hybrid",
    uptime_s: 60,
    healthy: replicas.filter((r) => r.healthy).length,
    panic: false,
    cluster: null,
    index: { entries: 40, max_entries: 1000, memory_bytes: 52_224 },
    capacity_window_s: 300,
    health_interval_s: 10,
    fleet: { working_set_tokens: 0, kv_tokens: 0 },
    replicas,
    warnings: [],
    ...over,
  };
}

describe("formatStatus: the engine column", () => {
  const scraped = (at: string) => ({ family: "vllm", running: 2, waiting: 1, kv_usage: 0.42, missing: [], error: null, at });
  it.each([
    ["a fresh scrape shows run/wait/kv", scraped(ago(5)), 10, "2/1/42%"],
    ["just inside two intervals", scraped(ago(20)), 10, "2/1/42%"],
    ["older than two intervals: the age, not the stale figures", scraped(ago(35)), 10, "- (last scrape 35s ago)"],
    ["with a short interval, 5 s is already stale", scraped(ago(5)), 1, "- (last scrape 5s ago)"],
    ["a failed scrape says why", { ...scraped(ago(1)), error: "HTTP 404" }, 10, "error: HTTP 404"],
  ])("%s", (_name, engine, interval, expected) => {
    const text = formatStatus(doc([replica("gpu0", { engine })], { health_interval_s: interval }), NOW);
    expect(text.split("\n").find((l) => l.startsWith("gpu0 "))!.trimEnd()).toEndWith(expected);
  });

  it("a replica that is not scraped shows -", () => {
    expect(formatStatus(doc([replica("gpu0")]), NOW).split("\n").find((l) => l.startsWith("gpu0 "))!).toMatch(/\s-$/);
  });
});

describe("formatStatus: health and the hit rate explained", () => {
  it.each([
    ["up", true, "up"],
    ["half-open", false, "half-open"],
    ["down", false, "DOWN"],
  ] as const)("a replica %s shows %s", (state, healthy, shown) => {
    const line = formatStatus(doc([replica("gpu0", { state, healthy })]), NOW).split("\n").find((l) => l.startsWith("gpu0 "))!;
    expect(line.split(/\s+/)[1]).toBe(shown);
  });

  it("available / captured / delivered as shares of the prompt tokens routed there", () => {
    const text = formatStatus(doc([replica("gpu0"), replica("gpu1", { prompt_tokens: 0 })]), NOW);
    expect(text).toContain("HIT avail/capt/deliv");
    expect(text.split("\n").find((l) => l.startsWith("gpu0 "))).toContain(" 80%/60%/50% ");
    expect(text.split("\n").find((l) => l.startsWith("gpu1 "))).toMatch(/\s-\s/);
  });
});

describe("formatStatus: KV per model", () => {
  it("sums each model's own replicas, not the fleet's", () => {
    const text = formatStatus(
      doc([
        replica("a0", { models: ["llama"], working_set_tokens: 60_000, kv_tokens: 100_000 }),
        replica("a1", { models: ["llama"], working_set_tokens: 20_000, kv_tokens: 100_000 }),
        replica("b0", { models: ["qwen", "qwen-small"], working_set_tokens: 90_000, kv_tokens: 100_000 }),
      ]),
      NOW,
    );
    const rows = text.split("\n").slice(text.split("\n").findIndex((l) => l.startsWith("MODEL")));
    expect(rows[0]).toMatch(/^MODEL\s+REPLICAS\s+WORKING SET \(5m\) \/ KV \(its replicas, summed\)$/);
    expect(rows[1]).toMatch(/^llama\s+a0,a1\s+80,000 \/ 200,000 40%$/);
    expect(rows[2]).toMatch(/^qwen\s+b0\s+90,000 \/ 100,000 90%$/);
    expect(rows[3]).toMatch(/^qwen-small\s+b0\s+90,000 \/ 100,000 90%$/);
  });

  it("a model with a replica of unknown KV has no budget to compare with", () => {
    const text = formatStatus(doc([replica("a0", { kv_tokens: 0 }), replica("a1")]), NOW);
    expect(text).toMatch(/^m\s+a0,a1\s+2,000 \/ \?$/m);
  });

  it("replicas whose models are not known yet are left out", () => {
    expect(formatStatus(doc([replica("a0", { models: [] })]), NOW)).not.toContain("MODEL");
  });
});

describe("formatStatus: capacity findings", () => {
  it("one line per finding, and the advice once below the warnings, however many replicas share it", () => {
    const finding = "working set ~5,000 tokens, 125% of kv_tokens 4,000: the engine evicts and re-prefills; the fleet has room, so placement can help";
    const advice = "The fleet's distinct working set (~9,000 of 12,000 KV tokens) fits, so the cards are unevenly loaded or hold the same prefixes twice. cache-aware, the running policy, …";
    const over = { warnings: [finding], capacity_advice: advice };
    const text = formatStatus(doc([replica("gpu0", over), replica("gpu1", over), replica("gpu2")], { warnings: [`gpu0: ${finding}`, `gpu1: ${finding}`] }), NOW);
    const lines = text.split("\n");
    const start = lines.indexOf("warnings:");
    expect(lines.slice(start)).toEqual(["warnings:", `  gpu0: ${finding}`, `  gpu1: ${finding}`, `  what helps (gpu0, gpu1): ${advice}`]);
  });
});

describe("formatStatus: the cluster", () => {
  function cluster(over: Partial<ClusterStatus>): ClusterStatus {
    return {
      name: "r0",
      redis: "redis://127.0.0.1:6379",
      namespace: "llmroute",
      state: "up",
      since: ago(60),
      last_error: null,
      instances: [
        { name: "r0", self: true, last_heartbeat_ms: 0, lag_ms: 0.4, inflight: 1 },
        { name: "r1", self: false, last_heartbeat_ms: 400, lag_ms: 0.6, inflight: 2 },
      ],
      lag_ms: 0.4,
      applied_id: "1-0",
      backlog_events: 0,
      events: { sent: 1, applied: 1, dropped: 0, malformed: 0, other_version: 0, unencodable: 0 },
      disconnects: 0,
      snapshot: null,
      catch_up: null,
      warnings: [],
      ...over,
    };
  }
  const head = (c: ClusterStatus) => formatStatus(doc([replica("gpu0")], { cluster: c }), NOW).split("\n").find((l) => l.startsWith("cluster "));

  it("connected: the instances it hears", () => {
    expect(head(cluster({}))).toBe("cluster llmroute on redis://127.0.0.1:6379 · connected · 2 instances · backlog 0 events");
  });

  it("Redis away: it hears no instance, so it says Redis is away instead of counting itself alone", () => {
    const away = cluster({ state: "down", instances: [{ name: "r0", self: true, last_heartbeat_ms: 0, lag_ms: 0, inflight: 1 }], backlog_events: 12 });
    expect(head(away)).toBe("cluster llmroute on redis://127.0.0.1:6379 · Redis away for 1m00s · other instances unknown until it is back · backlog 12 events");
  });
});

describe("where status looks", () => {
  it("--config needs only the address: env: secrets that are not exported do not stop it", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0]);
    const dir = await tempDir("llmroute-status-");
    const listen = router.url.replace("http://", "");
    await Bun.write(
      `${dir}/router.toml`,
      `[server]\nlisten = "${listen}"\napi_keys = ["env:LLMROUTE_TEST_UNSET_CLIENT_KEY"]\n[[replica]]\nname = "gpu0"\nurl = "${gpu0.url}"\napi_key = "env:LLMROUTE_TEST_UNSET_KEY"\n`,
    );
    // check, which needs the secrets, refuses the same file
    expect((await runCli(["check", "--config", `${dir}/router.toml`])).code).toBe(2);
    const { code, stdout, stderr } = await runCli(["status", "--config", `${dir}/router.toml`]);
    expect(stderr).toBe("");
    expect(code).toBe(0);
    expect(stdout).toMatch(/^gpu0\s+up\s/m);
  });

  it("a router with server.api_keys: the error names --api-key and LLMROUTE_API_KEY, a refused key is never echoed", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0], { toml: `[server]\napi_keys = ["env:STATUS_KEY"]\n`, env: { STATUS_KEY: "right-key-7f3a" } });
    const env = { LLMROUTE_API_KEY: "" };
    const none = await runCli(["status", "--url", router.url], { env });
    expect(none.code).toBe(2);
    expect(none.stderr.trim()).toBe(`status: ${router.url}/status needs a client key (server.api_keys): pass --api-key KEY or set LLMROUTE_API_KEY`);
    const wrong = await runCli(["status", "--url", router.url, "--api-key", "wrong-key-91c2"], { env });
    expect(wrong.code).toBe(2);
    expect(wrong.stderr.trim()).toBe(`status: ${router.url}/status refused the key given with --api-key (server.api_keys): pass one of the router's client keys`);
    expect(wrong.stderr + wrong.stdout).not.toContain("wrong-key-91c2");
    const fromEnv = await runCli(["status", "--url", router.url], { env: { LLMROUTE_API_KEY: "wrong-key-91c2" } });
    expect(fromEnv.stderr.trim()).toBe(`status: ${router.url}/status refused the key given in LLMROUTE_API_KEY (server.api_keys): pass one of the router's client keys`);
    const right = await runCli(["status", "--url", router.url], { env: { LLMROUTE_API_KEY: "right-key-7f3a" } });
    expect({ code: right.code, stderr: right.stderr }).toEqual({ code: 0, stderr: "" });
    expect(right.stdout).not.toContain("right-key-7f3a");
  }, 30_000);

  it.each(["nothttp", "127.0.0.1:8080", "ftp://h/x"])("--url %s: a clear message naming the flag and what to give, exit 2", async (url) => {
    const { code, stdout, stderr } = await runCli(["status", "--url", url]);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toContain(`status: --url "${url}": not an http:// or https:// URL; give the router's (or its admin listener's) address, like http://127.0.0.1:8080`);
    expect(stderr).not.toContain("ERR_");
  });

  it("an explicit --config that does not exist is an error, not the default address", async () => {
    const { code, stderr } = await runCli(["status", "--config", "/nonexistent/router.toml"]);
    expect(code).toBe(2);
    expect(stderr).toContain("/nonexistent/router.toml: (file): no such file");
  });

  it("pointed at the API port while admin_listen is set, it says where the admin surface is", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0], { toml: `[server]\nadmin_listen = "127.0.0.1:0"\n` });
    const [, admin] = await router.waitFor(/"admin":"(http:\/\/[^"]+)"/);
    const { code, stderr } = await runCli(["status", "--url", router.url]);
    expect(code).toBe(2);
    expect(stderr).toContain(`status: cannot read ${router.url}/status: HTTP 404: /status is served on the admin listener, ${admin}/status (server.admin_listen), not on this one`);
    expect((await runCli(["status", "--url", admin!])).code).toBe(0);
  });
});
