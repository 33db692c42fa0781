import { describe, expect, it } from "bun:test";
import { changedKeys, DEFAULTS, KNOWN, loadConfigFile, needsRestart, parseConfig, type Config } from "../src/config.ts";
import { ConfigError, formatIssue } from "../src/errors.ts";
import { POLICY_NAMES } from "../src/route/options.ts";
import { runCli } from "./helpers/proc.ts";
import { tempDir } from "./helpers/tmp.ts";

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
    // the example shows the documented defaults, not a smaller bound
    expect(config.routing.index_max_entries).toBe(2_000_000);
  });

  it("the example router.toml states the index's bytes per entry as the docs do (measured: perf/memory.ts)", async () => {
    const perEntry = (text: string, re: RegExp) => re.exec(text)?.[1];
    const toml = perEntry(await Bun.file(new URL("../router.toml", import.meta.url)).text(), /index_max_entries.*?(\d+) bytes each/);
    const configuration = perEntry(await Bun.file(new URL("../docs/configuration.md", import.meta.url)).text(), /`index_max_entries`.*?(\d+) bytes each/);
    const routing = perEntry(await Bun.file(new URL("../docs/routing.md", import.meta.url)).text(), /typed arrays, (\d+) bytes an entry/);
    expect(toml).toBe("68");
    expect([configuration, routing]).toEqual([toml, toml]);
  });

  it("the example router.toml lists every policy", async () => {
    const text = await Bun.file(new URL("../router.toml", import.meta.url)).text();
    const listed = text.match(/^policy = "[^"]+"\s+# (.+)$/m)![1]!.split(" | ");
    expect(listed.sort()).toEqual([...POLICY_NAMES].sort());
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
    expect(parseConfig(`[routing]\nconnect_timeout = "${text}"\n${MIN}`, "r.toml", { env: {} }).routing.connect_timeout_ms).toBe(ms);
  });

  it.each([
    ["drain_timeout 0 (stop at once)", `[server]\ndrain_timeout = "0s"\n`, (c: Config) => c.server.drain_timeout_ms, 0],
    ["cluster.catch_up_timeout 0 (serve at once)", `[cluster]\nredis = "redis://127.0.0.1:6379"\ncatch_up_timeout = "0s"\n`, (c: Config) => c.cluster!.catch_up_timeout_ms, 0],
    ["the smallest health interval and timeout", `[health]\ninterval = "200ms"\ntimeout = "100ms"\n`, (c: Config) => c.health.timeout_ms, 100],
    ["an interval under the default timeout: the timeout follows it (half)", `[health]\ninterval = "2s"\n`, (c: Config) => c.health.timeout_ms, 1000],
    ["max_body of 1KiB", `[server]\nmax_body = "1KiB"\n`, (c: Config) => c.server.max_body_bytes, 1024],
    ["a routing timeout of 1ms", `[routing]\nstream_idle_timeout = "1ms"\n`, (c: Config) => c.routing.stream_idle_timeout_ms, 1],
    ["state_interval of 1s", `[routing]\nstate_interval = "1s"\n`, (c: Config) => c.routing.state_interval_ms, 1000],
  ])("at the bounds: %s", (_name, text, read, expected) => {
    expect(read(parseConfig(`${text}${MIN}`, "r.toml", { env: {} }))).toBe(expected);
  });
});

describe("a replica URL written the way OpenAI clients write a base URL, ending in /v1", () => {
  it.each([
    ["/v1", "http://127.0.0.1:8001/v1", "http://127.0.0.1:8001"],
    ["/v1/", "http://127.0.0.1:8001/v1/", "http://127.0.0.1:8001"],
    ["behind a path prefix", "https://gw.example/team-a/v1", "https://gw.example/team-a"],
  ])("%s: the router appends /v1/… itself, so /v1 is taken off, with a note saying so at the value", (_name, written, base) => {
    const c = parseConfig(`[[replica]]\nname = "gpu0"\nurl = "${written}"\n`, "r.toml", { env: {} });
    expect(c.replicas[0]!.url).toBe(base);
    expect(c.notes).toHaveLength(1);
    expect(c.notes[0]).toMatchObject({ file: "r.toml", line: 3, column: 7, key: "replica[0].url", value: written });
    expect(c.notes[0]!.reason).toContain(`using "${base}"`);
    expect(c.notes[0]!.reason).toContain("appends /v1/");
  });

  it("a URL without /v1 has no note; a path that only ends in v1 is kept", () => {
    const c = parseConfig(`${MIN}\n[[replica]]\nname = "gpu1"\nurl = "http://h/apiv1"\n`, "r.toml", { env: {} });
    expect(c.replicas.map((r) => r.url)).toEqual(["http://127.0.0.1:8001", "http://h/apiv1"]);
    expect(c.notes).toEqual([]);
  });

  it("llmroute check prints the note with file:line:column and exits 0", async () => {
    const dir = await tempDir("llmroute-cfg-");
    const path = `${dir}/router.toml`;
    await Bun.write(path, `[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:8001/v1"\n`);
    const { code, stdout } = await runCli(["check", "--config", path]);
    expect(code).toBe(0);
    expect(stdout).toContain('url = "http://127.0.0.1:8001"\n');
    expect(stdout).toMatch(new RegExp(`^# note: ${path.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}:3:7: replica\\[0\\]\\.url = "http://127\\.0\\.0\\.1:8001/v1": .*appends /v1/`, "m"));
  });
});

describe("every error names file:line:column of the value, the key, the value and what is allowed", () => {
  it.each([
    ["unknown key with a suggestion", `[routing]\npolcy = "hybrid"\n${MIN}`, { line: 2, column: 1, key: "routing.polcy", reason: /did you mean "policy"/ }],
    ["bad policy", `[routing]\npolicy = "hybird"\n${MIN}`, { line: 2, column: 10, key: "routing.policy", value: "hybird", reason: /one of roundrobin \| random .*did you mean "hybrid"/ }],
    ["negative threshold", `[routing]\nmax_inflight = -1\n${MIN}`, { line: 2, column: 16, key: "routing.max_inflight", value: -1, reason: /integer from 0/ }],
    ["bad duration", `[health]\ninterval = 10\n${MIN}`, { line: 2, column: 12, key: "health.interval", value: 10, reason: /duration string like "500ms"/ }],
    ["bad listen", `[server]\nlisten = "localhost"\n${MIN}`, { line: 2, column: 10, key: "server.listen", reason: /host:port/ }],
    ["bad url", `[[replica]]\nname = "a"\nurl = "ftp://x"\n`, { line: 3, column: 7, key: "replica[0].url", value: "ftp://x", reason: /http:\/\/ or https:\/\// }],
    ["bad url in the second replica", `${MIN}\n[[replica]]\nname = "b"\n  url   =   "nope"\n`, { line: 7, column: 13, key: "replica[1].url", value: "nope" }],
    ["missing url: at the table's header", `[server]\n[[replica]]\nname = "a"\n`, { line: 2, column: 1, key: "replica[0].url", reason: /required/ }],
    ["no replicas", `[server]\nlisten = "127.0.0.1:1"\n`, { key: "replica", reason: /at least one \[\[replica\]\]/ }],
    ["unknown replica key", `${MIN}kv_token = 5\n`, { line: 4, column: 1, key: "replica[0].kv_token", reason: /did you mean "kv_tokens"/ }],
    ["a dotted key at the root", `routing.cache_aware.min_match_ratio = 5\n${MIN}`, { line: 1, column: 39, key: "routing.cache_aware.min_match_ratio", value: 5, reason: /from 0 to 1/ }],
    ["a dotted key in a table", `[routing]\ncache_aware.balance_abs = 0\n${MIN}`, { line: 2, column: 27, key: "routing.cache_aware.balance_abs", value: 0 }],
    ["an inline table", `[routing]\ncache_aware = { balance_rel = 1.5, min_match_ratio = 5 }\n${MIN}`, { line: 2, column: 54, key: "routing.cache_aware.min_match_ratio", value: 5 }],
    ["an unknown key in an inline table", `[routing]\ncache_aware = { min_mach_ratio = 1 }\n${MIN}`, { line: 2, column: 17, key: "routing.cache_aware.min_mach_ratio", reason: /did you mean "min_match_ratio"/ }],
    ["an unknown dotted key at the root", `routng.policy = "x"\n${MIN}`, { line: 1, column: 1, key: "routng", reason: /did you mean "routing"/ }],
    ["a quoted key", `[routing]\n"policy" = "nope"\n${MIN}`, { line: 2, column: 12, key: "routing.policy", value: "nope" }],
    ["a table written as a value", `routing = 5\n${MIN}`, { line: 1, column: 11, key: "routing", reason: /must be a table/ }],
    ["after a multi-line string holding TOML", `[server]\nlisten = "127.0.0.1:1"\n[[replica]]\nname = "a"\nurl = """\n[routing]\npolicy = 1\n"""\n`, { line: 5, column: 7, key: "replica[0].url" }],
    ["syntax error: line and column", `[server\nlisten = 1\n`, { line: 1, column: 8, key: "(syntax)" }],
    ["syntax error: a redefined key", `${MIN}name = "b"\n`, { line: 4, column: 1, key: "(syntax)", reason: /^name is set twice/ }],
  ])("%s", (_name, text, expected) => {
    const found = issues(text);
    expect(found).toHaveLength(1);
    const { reason, ...rest } = expected as { reason?: RegExp };
    expect(found[0]).toMatchObject({ file: "r.toml", ...rest });
    if (reason) expect(found[0]!.reason).toMatch(reason);
  });

  it("duplicate replica names point at the second one", () => {
    const found = issues(`${MIN}\n${MIN}`);
    expect(found[0]).toMatchObject({ line: 6, column: 8, key: "replica[1].name", value: "gpu0", reason: "duplicate name (also replica[0])" });
  });

  it.each([
    ["the /v1 form of the same URL", "http://127.0.0.1:8001", "http://127.0.0.1:8001/v1"],
    ["a trailing slash", "http://127.0.0.1:8001", "http://127.0.0.1:8001/"],
    ["another case of the host", "http://localhost:8001", "http://LOCALHOST:8001"],
    ["the default port written out", "http://gpu", "http://gpu:80"],
    ["credentials added", "http://127.0.0.1:8001", "http://u:p@127.0.0.1:8001"],
  ])("one engine listed twice (%s) is an error naming both entries, file and line", (_name, first, second) => {
    const found = issues(`[[replica]]\nname = "gpu0"\nurl = "${first}"\n\n[[replica]]\nname = "gpu1"\nurl = "${second}"\n`);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatchObject({ file: "r.toml", line: 7, column: 7, key: "replica[1].url" });
    expect(found[0]!.reason).toBe('reaches the same engine as replica[0] ("gpu0", line 3): two entries for one engine double its share of the traffic and split its cache; list it once');
    expect(JSON.stringify(found[0])).not.toContain(":p@");
  });

  it("two engines on one host (other ports, or other path prefixes behind a gateway) are two engines", () => {
    for (const [a, b] of [["http://h:8001", "http://h:8002"], ["https://gw/team-a/v1", "https://gw/team-b/v1"], ["http://h:8001", "https://h:8001"]]) {
      expect(parseConfig(`[[replica]]\nname = "a"\nurl = "${a}"\n[[replica]]\nname = "b"\nurl = "${b}"\n`, "r.toml", { env: {} }).replicas).toHaveLength(2);
    }
  });

  it.each([
    ["http://127.0.0.1:70000", "port 70000 is out of range: a port is 1–65535"],
    ["http://[::1]:99999/v1", "port 99999 is out of range: a port is 1–65535"],
    ["http://u:p@gpu:0", "port 0 is out of range: a port is 1–65535"],
  ])("a replica URL %s: the port is named as the problem", (url, reason) => {
    expect(issues(`[[replica]]\nname = "a"\nurl = "${url}"\n`)[0]).toMatchObject({ key: "replica[0].url", line: 3, reason });
  });

  it("a missing env var for a key is an error, and a literal secret is never echoed", () => {
    expect(issues(`${MIN}api_key = "env:NOPE"\n`)[0]).toMatchObject({ line: 4, column: 11, key: "replica[0].api_key", value: "env:NOPE", reason: expect.stringMatching(/NOPE is not set/) });
    expect(issues(`[server]\napi_keys = "hunter2"\n${MIN}`)[0]!.value).toBe("<redacted>");
  });

  it("a bad LLMROUTE_POLICY is reported as the environment's", () => {
    expect(issues(MIN, { LLMROUTE_POLICY: "fastest" })[0]).toMatchObject({ file: "environment", key: "LLMROUTE_POLICY", value: "fastest" });
  });

  it("reports all problems at once", () => {
    expect(issues(`[routing]\npolicy = "x"\nmax_attempts = 0\n[[replica]]\nname = "bad name"\nurl = "nope"\n`)).toHaveLength(4);
  });

  it("lists problems in file order, whatever order the validator met them", () => {
    const found = issues(`[[replica]]\nname = "a"\nurl = "nope"\n[server]\nmax_body = 1\n[routing]\npolcy = 1\n`);
    expect(found.map((i) => `${i.line}:${i.column} ${i.key}`)).toEqual(["3:7 replica[0].url", "5:12 server.max_body", "7:1 routing.polcy"]);
  });

  it("formats as file:line:column: key = value: reason", () => {
    expect(formatIssue(issues(`[routing]\npolicy = "hybird"\n${MIN}`)[0]!)).toStartWith('r.toml:2:10: routing.policy = "hybird": must be one of');
  });
});

describe("bounds: durations and sizes a running router can live with", () => {
  it.each([
    ["health.interval 0s (a busy loop)", `[health]\ninterval = "0s"\n`, { key: "health.interval", value: "0s", line: 2, column: 12, reason: /at least 100ms/ }],
    ["health.interval 50ms", `[health]\ninterval = "50ms"\n`, { key: "health.interval", reason: /at least 100ms/ }],
    ["health.timeout 0ms (every check fails)", `[health]\ntimeout = "0ms"\n`, { key: "health.timeout", line: 2, column: 11, reason: /at least 100ms/ }],
    ["health.timeout not shorter than the interval", `[health]\ninterval = "1s"\ntimeout = "1s"\n`, { key: "health.timeout", line: 3, column: 11, reason: /shorter than health.interval \(1s\)/ }],
    ["max_body 0.1B (rejects every body)", `[server]\nmax_body = "0.1B"\n`, { key: "server.max_body", line: 2, column: 12, reason: /at least 1KiB/ }],
    ["max_body 1000 bytes", `[server]\nmax_body = 1000\n`, { key: "server.max_body", reason: /at least 1KiB/ }],
    ["routing.connect_timeout 0s", `[routing]\nconnect_timeout = "0s"\n`, { key: "routing.connect_timeout", reason: /longer than 0/ }],
    ["routing.first_byte_timeout 0.1ms (rounds to 0)", `[routing]\nfirst_byte_timeout = "0.1ms"\n`, { key: "routing.first_byte_timeout", reason: /longer than 0/ }],
    ["routing.stream_idle_timeout 0s", `[routing]\nstream_idle_timeout = "0s"\n`, { key: "routing.stream_idle_timeout", reason: /longer than 0/ }],
    ["routing.state_interval 500ms", `[routing]\nstate_interval = "500ms"\n`, { key: "routing.state_interval", reason: /at least 1s/ }],
    ["routing.index_ttl 0s", `[routing]\nindex_ttl = "0s"\n`, { key: "routing.index_ttl", reason: /at least 1s/ }],
    ["routing.capacity_window 0s", `[routing]\ncapacity_window = "0s"\n`, { key: "routing.capacity_window", reason: /at least 1s/ }],
    ["a duration no timer can hold", `[routing]\nfirst_byte_timeout = "1000h"\n`, { key: "routing.first_byte_timeout", reason: /at most 596h/ }],
    ["server.drain_timeout over the timer limit", `[server]\ndrain_timeout = "700h"\n`, { key: "server.drain_timeout", reason: /at most 596h/ }],
    ["routing.index_ttl negative", `[routing]\nindex_ttl = "-5s"\n`, { key: "routing.index_ttl", value: "-5s", line: 2, column: 13, reason: /^must be positive: a duration like "10s" \(at least 1s\)$/ }],
    ["routing.first_byte_timeout negative", `[routing]\nfirst_byte_timeout = "-1m"\n`, { key: "routing.first_byte_timeout", reason: /^must be positive/ }],
    ["server.drain_timeout negative (0 is allowed)", `[server]\ndrain_timeout = "-30s"\n`, { key: "server.drain_timeout", reason: /^must not be negative/ }],
  ])("%s", (_name, text, expected) => {
    const found = issues(`${text}${MIN}`);
    expect(found).toHaveLength(1);
    const { reason, ...rest } = expected as { reason: RegExp };
    expect(found[0]).toMatchObject({ file: "r.toml", ...rest });
    expect(found[0]!.reason).toMatch(reason);
  });
});

describe("values from flags and secrets", () => {
  it("a flag's error names the flag as typed, not the file's line", () => {
    let error: unknown;
    try {
      parseConfig(`[server]\nlisten = "127.0.0.1:8080"\n${MIN}`, "r.toml", { env: {}, overrides: { "server.listen": { value: "8081", flag: "--listen" } } });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const [issue] = (error as ConfigError).issues;
    expect(issue).toMatchObject({ flag: "--listen", value: "8081" });
    expect(issue!.line).toBeUndefined();
    expect((error as ConfigError).message).toBe('--listen 8081: must be "host:port" like "127.0.0.1:8080" (port 0 picks a free port)');
  });

  it("a flag's valid value replaces the file's", () => {
    const c = parseConfig(`[server]\nlisten = "127.0.0.1:8080"\n${MIN}`, "r.toml", { env: {}, overrides: { "server.listen": { value: "127.0.0.1:0", flag: "--listen" } } });
    expect(c.server.listen).toEqual({ host: "127.0.0.1", port: 0 });
  });

  it("resolveSecrets: false leaves env: secrets unresolved and unchecked against the environment", () => {
    const text = `[server]\napi_keys = ["env:CLIENT_KEY"]\n[cluster]\nredis = "env:REDIS_URL"\n${MIN}api_key = "env:NOPE"\n`;
    const c = parseConfig(text, "r.toml", { env: {}, resolveSecrets: false });
    expect(c.replicas[0]!.api_key).toBe("env:NOPE");
    expect(c.server.api_keys).toEqual(["env:CLIENT_KEY"]);
    expect(c.cluster!.redis).toBe("env:REDIS_URL");
    expect(() => parseConfig(text, "r.toml", { env: {} })).toThrow(ConfigError);
  });
});

describe("reading the file", () => {
  it.each([
    ["a missing file", (dir: string) => `${dir}/nope.toml`, /^[^:]+nope\.toml: \(file\): no such file/],
    ["a directory", (dir: string) => dir, /: \(file\): is a directory; pass the file, e\.g\. --config .*\/router\.toml/],
    ["a path through a file", (dir: string) => `${dir}/router.toml/x.toml`, /: \(file\): no such file/],
  ])("%s", async (_name, pathOf, message) => {
    const dir = await tempDir("llmroute-cfg-");
    await Bun.write(`${dir}/router.toml`, MIN);
    const error = await loadConfigFile(pathOf(dir)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toMatch(message);
  });
});

describe("llmroute check (the CLI edge)", () => {
  it("exits 2 and prints file:line:column: key for an invalid file", async () => {
    const dir = await tempDir("llmroute-cfg-");
    const path = `${dir}/bad.toml`;
    await Bun.write(path, `[routing]\npolicy = "hybird"\n${MIN}`);
    const { code, stderr } = await runCli(["check", "--config", path]);
    expect(code).toBe(2);
    expect(stderr).toContain(`${path}:2:10: routing.policy = "hybird": must be one of`);
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
    ["snapshots more often than every second", `[cluster]\nredis = "redis://x:1"\nsnapshot_interval = "100ms"\n`, { line: 8, key: "cluster.snapshot_interval", reason: /at least 1s/ }],
    ["a typo", `[cluster]\nredis = "redis://x:1"\nnamepsace = "a"\n`, { line: 8, key: "cluster.namepsace", reason: /did you mean "namespace"/ }],
  ])("rejects %s", (_label, extra, expected) => {
    const found = issues(`${MIN}${extra}`);
    expect(found).toHaveLength(1);
    expect(found[0]!.file).toBe("r.toml");
    expect(found[0]).toMatchObject({ key: expected.key, ...(expected.line ? { line: expected.line } : {}) });
    expect(found[0]!.reason).toMatch(expected.reason);
  });
});

/**
 * docs/configuration.md is the one place a user looks a key up: one row per key, in the
 * section of its table (`[routing]`, `[[replica]]`, …). The key list comes from the schema
 * itself (KNOWN), so a key added to the validator without its row fails here.
 */
describe("docs/configuration.md against the config schema", async () => {
  const doc = await Bun.file(new URL("../docs/configuration.md", import.meta.url)).text();

  /** `table.key` → the row's cells after the key, from each section headed by a table name. */
  const rows = new Map<string, string[]>();
  let table: string | undefined;
  for (const line of doc.split("\n")) {
    const heading = /^#{2,3} (.*)$/.exec(line);
    if (heading) {
      table = /^`\[{1,2}([a-z_.]+)\]{1,2}`$/.exec(heading[1]!.trim())?.[1];
      continue;
    }
    const row = /^\| `([a-z_]+)` \|(.*)\|\s*$/.exec(line);
    if (row && table) rows.set(`${table}.${row[1]}`, row[2]!.split(" | ").map((c) => c.trim()));
  }

  /** Every leaf key of the schema, dotted (a key that is a table of its own is not a leaf). */
  const schemaKeys = Object.entries(KNOWN)
    .filter(([t]) => t !== "")
    .flatMap(([t, keys]) => keys.filter((k) => KNOWN[`${t}.${k}`] === undefined).map((k) => `${t}.${k}`));

  it("has a row for every key of the schema, in its table's section", () => {
    expect(schemaKeys.length).toBeGreaterThan(30);
    expect(schemaKeys.filter((k) => !rows.has(k))).toEqual([]);
  });

  it("has no row for a key the schema does not know (a renamed or removed key)", () => {
    expect([...rows.keys()].filter((k) => !schemaKeys.includes(k))).toEqual([]);
  });

  it("states each fixed default as the TOML value the schema uses", () => {
    const toml = (v: unknown) => (Array.isArray(v) ? "[]" : typeof v === "string" ? JSON.stringify(v) : String(v));
    const wrong: string[] = [];
    for (const key of schemaKeys) {
      const [t, k] = [key.slice(0, key.lastIndexOf(".")), key.slice(key.lastIndexOf(".") + 1)];
      const defaults = DEFAULTS as unknown as Record<string, Record<string, unknown> | undefined>;
      const tableDefaults = defaults[t === "routing.cache_aware" ? "cache_aware" : t];
      const value = tableDefaults?.[k];
      if (value === undefined) continue;
      const cell = rows.get(key)?.[0] ?? "";
      if (cell !== `\`${toml(value)}\``) wrong.push(`${key}: the page says ${cell}, the schema ${toml(value)}`);
    }
    expect(wrong).toEqual([]);
  });
});

describe("changedKeys: what a reload changed, by the keys of the file", () => {
  const base = `[server]\nlisten = "127.0.0.1:8080"\n[routing]\nfirst_byte_timeout = "10m"\n[[replica]]\nname = "gpu0"\nurl = "http://h:1"\n[[replica]]\nname = "gpu1"\nurl = "http://h:2"\napi_key = "sk-a"\n`;
  const config = (text: string) => parseConfig(text, "r.toml", { env: {} });
  it.each([
    ["nothing", base, []],
    ["a deadline", base.replace(`"10m"`, `"2m"`), ["routing.first_byte_timeout"]],
    ["a replica's URL and key (by name, never the value)", base.replace("http://h:2", "http://h:3").replace("sk-a", "sk-b"), ["replica[gpu1].url", "replica[gpu1].api_key"]],
    ["a nested table and a size", base.replace(`listen = "127.0.0.1:8080"\n`, `listen = "127.0.0.1:8080"\nmax_body = "1MiB"\n`).replace(`first_byte_timeout = "10m"\n`, `first_byte_timeout = "10m"\ncache_aware = { balance_abs = 7 }\n`), ["server.max_body", "routing.cache_aware.balance_abs"]],
    ["a replica added and one removed", base.replace(`name = "gpu0"`, `name = "gpu7"`), ["replica[gpu0]", "replica[gpu7]"]],
    ["the listen address and a cluster (a restart applies them)", `${base.replace("8080", "8081")}[cluster]\nredis = "redis://r:6379"\n`, ["server.listen", "cluster"]],
  ])("%s", (_name, text, keys) => {
    expect(changedKeys(config(base), config(text)).sort()).toEqual([...keys].sort());
  });

  it("needsRestart: the listeners, the log format and every [cluster] key", () => {
    expect(["server.listen", "server.admin_listen", "server.log_format", "cluster", "cluster.redis", "routing.policy", "server.api_keys"].filter(needsRestart)).toEqual([
      "server.listen",
      "server.admin_listen",
      "server.log_format",
      "cluster",
      "cluster.redis",
    ]);
  });
});
