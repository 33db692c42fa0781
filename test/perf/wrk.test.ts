import { describe, expect, it } from "bun:test";
import { parseWrk, RESULT_MARK, wrkArgs, wrkScript } from "../../perf/lib/wrk.ts";

describe("parseWrk", () => {
  const output = [
    "Running 3s test @ http://127.0.0.1:4000",
    "  1 threads and 64 connections",
    "  Thread Stats   Avg      Stdev     Max   +/- Stdev",
    `${RESULT_MARK}{"requests":30000,"duration_us":3000000,"p50_us":4200,"p90_us":6100,"p99_us":9800,"errors":3}`,
    "",
  ].join("\n");

  it("reads requests, rate, percentiles in ms and errors from the result line", () => {
    expect(parseWrk(output)).toEqual({ requests: 30_000, seconds: 3, rps: 10_000, p50Ms: 4.2, p90Ms: 6.1, p99Ms: 9.8, errors: 3 });
  });

  it("fails with wrk's own output when the result line is missing (a script error, a refused connection)", () => {
    expect(() => parseWrk("unable to connect to 127.0.0.1:4000 Connection refused\n")).toThrow(/no result line.*Connection refused/s);
  });
});

describe("wrkScript", () => {
  const lua = wrkScript(["/tmp/a b.json", "/tmp/c.json"], "/v1/chat/completions");

  it("pre-formats every body once, in init (where wrk knows the Host header), and rotates through them", () => {
    expect(lua).toContain('local files = { "/tmp/a b.json", "/tmp/c.json" }');
    expect(lua).toMatch(/init = function\(args\)[\s\S]*wrk\.format\("POST", "\/v1\/chat\/completions"/);
    expect(lua).toMatch(/request = function\(\)\s+n = n % #reqs \+ 1\s+return reqs\[n\]/);
  });

  it("prints the line parseWrk reads, with all error kinds summed", () => {
    expect(lua).toContain(RESULT_MARK);
    expect(lua).toContain("e.connect + e.read + e.write + e.status + e.timeout");
  });
});

describe("wrkArgs", () => {
  it("one thread, the connections asked for, a timeout long enough for a 339 KB body at concurrency 256", () => {
    expect(wrkArgs({ wrk: "/usr/bin/wrk", script: "/tmp/s.lua", url: "http://127.0.0.1:1", connections: 64, seconds: 3 })).toEqual([
      "/usr/bin/wrk", "-t1", "-c64", "-d3s", "--timeout", "60s", "-s", "/tmp/s.lua", "http://127.0.0.1:1",
    ]);
  });
});
