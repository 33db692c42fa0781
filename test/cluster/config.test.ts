/** [cluster] in router.toml: absent changes nothing; every key validated with file, line and what is allowed. */
import { describe, expect, it } from "bun:test";
import { parseConfig } from "../../src/config.ts";
import { ConfigError } from "../../src/errors.ts";

const MIN = `[server]\nlisten = "127.0.0.1:8081"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:8001"\n`;

function issues(text: string, env: Record<string, string> = {}) {
  try {
    parseConfig(text, "r.toml", { env });
  } catch (error) {
    if (error instanceof ConfigError) return error.issues;
    throw error;
  }
  throw new Error("expected a ConfigError");
}

describe("[cluster]", () => {
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
