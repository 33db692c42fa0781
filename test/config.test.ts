import { describe, expect, it } from "bun:test";
import { keyLines, loadConfigFile, parseConfig } from "../src/config.ts";
import { ConfigError } from "../src/errors.ts";
import { runCli } from "./helpers/proc.ts";

const MIN = `[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:8001"\n`;

function issues(text: string, env: Record<string, string> = {}) {
  try {
    parseConfig(text, "r.toml", { env });
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
  throw new Error("expected a ConfigError");
}

describe("valid configs", () => {
  it("the example router.toml at the top level is valid", async () => {
    const config = await loadConfigFile(new URL("../router.toml", import.meta.url).pathname, { env: {} });
    expect(config.replicas.map((r) => r.name)).toEqual(["gpu0", "gpu1"]);
    expect(config.routing.policy).toBe("hybrid");
  });

  it("defaults fill everything but the replicas", () => {
    const c = parseConfig(MIN, "r.toml", { env: {} });
    expect(c.server.listen).toEqual({ host: "127.0.0.1", port: 8080 });
    expect(c.routing).toMatchObject({ policy: "hybrid", max_inflight: 0, max_attempts: 3 });
    expect(c.health).toMatchObject({ interval_ms: 10_000, path: "/health" });
    expect(c.replicas[0]).toMatchObject({ name: "gpu0", url: "http://127.0.0.1:8001", kv_tokens: 0, models: [] });
  });

  it("LLMROUTE_POLICY overrides routing.policy", () => {
    expect(parseConfig(MIN, "r.toml", { env: { LLMROUTE_POLICY: "roundrobin" } }).routing.policy).toBe("roundrobin");
  });

  it("api_key = \"env:NAME\" is resolved from the environment", () => {
    const c = parseConfig(`${MIN}api_key = "env:K"\n`, "r.toml", { env: { K: "s3cret" } });
    expect(c.replicas[0]!.api_key).toBe("s3cret");
  });

  it.each([
    ["10s", 10_000],
    ["500ms", 500],
    ["2m", 120_000],
    ["1.5s", 1500],
  ])("duration %s = %d ms", (text, ms) => {
    expect(parseConfig(`[health]\ninterval = "${text}"\n${MIN}`, "r.toml", { env: {} }).health.interval_ms).toBe(ms);
  });
});

describe("every error names file, line, key, value and what is allowed", () => {
  it.each([
    ["unknown key with a suggestion", `[routing]\npolcy = "hybrid"\n${MIN}`, { line: 2, key: "routing.polcy", reason: /did you mean "policy"/ }],
    ["bad policy", `[routing]\npolicy = "hybird"\n${MIN}`, { line: 2, key: "routing.policy", value: "hybird", reason: /one of roundrobin \| random .*did you mean "hybrid"/ }],
    ["negative threshold", `[routing]\nmax_inflight = -1\n${MIN}`, { line: 2, key: "routing.max_inflight", value: -1, reason: /integer from 0/ }],
    ["bad duration", `[health]\ninterval = 10\n${MIN}`, { line: 2, key: "health.interval", value: 10, reason: /duration string like "500ms"/ }],
    ["bad listen", `[server]\nlisten = "localhost"\n${MIN}`, { line: 2, key: "server.listen", reason: /host:port/ }],
    ["bad url", `[[replica]]\nname = "a"\nurl = "ftp://x"\n`, { line: 3, key: "replica[0].url", value: "ftp://x", reason: /http:\/\/ or https:\/\// }],
    ["missing url", `[[replica]]\nname = "a"\n`, { line: 1, key: "replica[0].url", reason: /required/ }],
    ["no replicas", `[server]\nlisten = "127.0.0.1:1"\n`, { key: "replica", reason: /at least one \[\[replica\]\]/ }],
    ["unknown replica key", `${MIN}kv_token = 5\n`, { line: 4, key: "replica[0].kv_token", reason: /did you mean "kv_tokens"/ }],
    ["syntax error", `[server\nlisten = 1\n`, { line: 1, key: "(syntax)" }],
  ])("%s", (_name, text, expected) => {
    const found = issues(text);
    expect(found).toHaveLength(1);
    const { reason, ...rest } = expected as { reason?: RegExp };
    expect(found[0]).toMatchObject({ file: "r.toml", ...rest });
    if (reason) expect(found[0]!.reason).toMatch(reason);
  });

  it("duplicate replica names point at the second one", () => {
    const found = issues(`${MIN}\n${MIN}`);
    expect(found[0]).toMatchObject({ line: 6, key: "replica[1].name", value: "gpu0", reason: "duplicate name (also replica[0])" });
  });

  it("a missing env var for a key is an error, and a literal secret is never echoed", () => {
    expect(issues(`${MIN}api_key = "env:NOPE"\n`)[0]).toMatchObject({ key: "replica[0].api_key", value: "env:NOPE", reason: expect.stringMatching(/NOPE is not set/) });
    expect(issues(`[server]\napi_keys = "hunter2"\n${MIN}`)[0]!.value).toBe("<redacted>");
  });

  it("a bad LLMROUTE_POLICY is reported as the environment's", () => {
    expect(issues(MIN, { LLMROUTE_POLICY: "fastest" })[0]).toMatchObject({ file: "environment", key: "LLMROUTE_POLICY", value: "fastest" });
  });

  it("reports all problems at once", () => {
    expect(issues(`[routing]\npolicy = "x"\nmax_attempts = 0\n[[replica]]\nname = "bad name"\nurl = "nope"\n`)).toHaveLength(4);
  });
});

it("keyLines maps headers, keys and array tables to lines", () => {
  const lines = keyLines(`# c\n[server]\nlisten = "x" # c\n\n[[replica]]\nname = "a"\n[[replica]]\nname = "b"\n[routing.cache_aware]\nbalance_abs = 1\n`);
  expect(Object.fromEntries(lines)).toMatchObject({ server: 2, "server.listen": 3, "replica[0]": 5, "replica[0].name": 6, "replica[1].name": 8, "routing.cache_aware.balance_abs": 10 });
});

describe("llmroute check (the CLI edge)", () => {
  it("exits 2 and prints file:line: key for an invalid file", async () => {
    const dir = await import("node:fs/promises").then((fs) => fs.mkdtemp("/tmp/llmroute-cfg-"));
    const path = `${dir}/bad.toml`;
    await Bun.write(path, `[routing]\npolicy = "hybird"\n${MIN}`);
    const { code, stderr } = await runCli(["check", "--config", path]);
    expect(code).toBe(2);
    expect(stderr).toContain(`${path}:2: routing.policy = "hybird": must be one of`);
  });

  it("exits 0 and prints the resolved config for a valid one", async () => {
    const { code, stdout } = await runCli(["check", "--config", "router.toml"], { env: { LLMROUTE_POLICY: "affinity" } });
    expect(code).toBe(0);
    expect(stdout).toContain('policy = "affinity"');
    expect(stdout).toContain("# ok: 2 replica(s)");
  });

  it("exits 2 naming a missing file", async () => {
    const { code, stderr } = await runCli(["check", "--config", "/nonexistent/router.toml"]);
    expect(code).toBe(2);
    expect(stderr).toContain("/nonexistent/router.toml");
  });
});

describe("[cluster]", () => {
  const MIN = `[server]\nlisten = "127.0.0.1:8081"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:8001"\n`;

  it("absent: no cluster", () => {
    expect(parseConfig(MIN, "r.toml", { env: {} }).cluster).toBeUndefined();
  });

  it("defaults: name is hostname:port of server.listen, 5s catch-up, namespace llmroute, 30s snapshots", () => {
    const c = parseConfig(`${MIN}[cluster]\nredis = "redis://127.0.0.1:6379"\n`, "r.toml", { env: {} }).cluster!;
    expect(c).toMatchObject({ redis: "redis://127.0.0.1:6379", catch_up_timeout_ms: 5000, namespace: "llmroute", snapshot_interval_ms: 30_000 });
    expect(c.name).toMatch(/:8081$/);
  });

  it("rediss:// with a password from the environment, and every key set", () => {
    const c = parseConfig(
      `${MIN}[cluster]\nredis = "env:REDIS_URL"\nname = "edge-1"\ncatch_up_timeout = "2s"\nnamespace = "prod.eu"\nsnapshot_interval = "1m"\n`,
      "r.toml",
      { env: { REDIS_URL: "rediss://:s3cret@redis.internal:6380/0" } },
    ).cluster!;
    expect(c).toEqual({ redis: "rediss://:s3cret@redis.internal:6380/0", name: "edge-1", catch_up_timeout_ms: 2000, namespace: "prod.eu", snapshot_interval_ms: 60_000 });
  });

  it.each([
    ["missing redis", `[cluster]\nname = "a"\n`, { line: undefined, key: "cluster.redis", reason: /required/ }],
    ["an http URL", `[cluster]\nredis = "http://x:6379"\n`, { line: 7, key: "cluster.redis", reason: /redis:\/\/ or rediss:\/\// }],
    ["an unset variable", `[cluster]\nredis = "env:NOPE"\n`, { line: 7, key: "cluster.redis", reason: /NOPE is not set/ }],
    ["a name with spaces", `[cluster]\nredis = "redis://x:1"\nname = "a b"\n`, { line: 8, key: "cluster.name", reason: /letters, digits/ }],
    ["a namespace with a space", `[cluster]\nredis = "redis://x:1"\nnamespace = "a b"\n`, { line: 8, key: "cluster.namespace", reason: /key prefix/ }],
    ["snapshots more often than every second", `[cluster]\nredis = "redis://x:1"\nsnapshot_interval = "100ms"\n`, { line: 8, key: "cluster.snapshot_interval", reason: /at least 1000 ms/ }],
    ["a typo", `[cluster]\nredis = "redis://x:1"\nnamepsace = "a"\n`, { line: 8, key: "cluster.namepsace", reason: /did you mean "namespace"/ }],
  ])("rejects %s", (_label, extra, expected) => {
    const found = issues(`${MIN}${extra}`);
    expect(found).toHaveLength(1);
    expect(found[0]!.file).toBe("r.toml");
    expect(found[0]).toMatchObject({ key: expected.key, ...(expected.line ? { line: expected.line } : {}) });
    expect(found[0]!.reason).toMatch(expected.reason);
  });
});
