/**
 * `probe --via` talks to an llmroute, so it reads the router's client key from
 * LLMROUTE_API_KEY as `llmroute status` does; --api-key still wins, and an engine probed
 * with --url never gets the router's key.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { parseProbeArgs } from "../../src/probe/args.ts";
import { startRouterInProcess, startSimInProcess } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";

afterAll(killAll);

describe("which key the probe sends", () => {
  it.each([
    ["--via takes LLMROUTE_API_KEY", { via: "http://r:8080" }, { LLMROUTE_API_KEY: "client-key" }, "client-key"],
    ["--api-key wins over it", { via: "http://r:8080", "api-key": "explicit" }, { LLMROUTE_API_KEY: "client-key" }, "explicit"],
    ["--url (an engine) does not take the router's key", { url: "http://gpu:8000" }, { LLMROUTE_API_KEY: "client-key" }, undefined],
    ["an empty LLMROUTE_API_KEY is no key", { via: "http://r:8080" }, { LLMROUTE_API_KEY: "" }, undefined],
  ])("%s", (_name, raw, env, expected) => {
    expect(parseProbeArgs(raw, env).apiKey).toBe(expected);
  });
});

it("through a router with client keys: refused without the key, let through with LLMROUTE_API_KEY", async () => {
  const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
  const router = await startRouterInProcess([gpu0, gpu1], { toml: `[server]\napi_keys = ["env:PROBE_TEST_KEY"]\n`, env: { PROBE_TEST_KEY: "k-123" } });
  const without = await runCli(["probe", "--via", router.url, "--tokens", "500"], { env: { LLMROUTE_API_KEY: "" } });
  expect(without.code).toBe(2);
  expect(without.stderr).toMatch(/401/);
  const withKey = await runCli(["probe", "--via", router.url, "--tokens", "500", "--json"], { env: { LLMROUTE_API_KEY: "k-123" } });
  const report = JSON.parse(withKey.stdout) as { mode: string; conversations: { turns: { replica: string }[] }[] };
  expect(report.mode).toBe("via");
  const turns = report.conversations.flatMap((c) => c.turns);
  expect(turns.length).toBe(8); // two conversations of 4 turns, each answered by a replica
  expect(turns.every((t) => t.replica === "gpu0" || t.replica === "gpu1")).toBe(true);
});
