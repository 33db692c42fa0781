/** `llmroute bench --routers N [--redis URL]`: the options (the runs themselves are in the system suite). */
import { describe, expect, it } from "bun:test";
import { parseBenchArgs } from "../../src/bench/args.ts";

describe("bench --routers and --redis", () => {
  it("one router per arm by default; --routers N; --redis with it", () => {
    expect(parseBenchArgs({}).routers).toBe(1);
    expect(parseBenchArgs({}).redis).toBeUndefined();
    expect(parseBenchArgs({ routers: "4" })).toMatchObject({ routers: 4 });
    expect(parseBenchArgs({ routers: "4", redis: "rediss://:pw@cache:6380/2" })).toMatchObject({ routers: 4, redis: "rediss://:pw@cache:6380/2" });
  });

  it.each([
    [{ routers: "0" }, /--routers "0": must be an integer >= 1/],
    [{ routers: "two" }, /--routers "two": must be an integer >= 1/],
    [{ routers: "4", redis: "http://x:6379" }, /--redis "http:\/\/x:6379": must be a redis:\/\/ or rediss:\/\/ URL/],
    [{ redis: "redis://x:6379" }, /--redis: only used with --routers 2 or more/],
  ])("%o is a usage error", (raw, message) => {
    expect(() => parseBenchArgs(raw)).toThrow(message);
  });
});
