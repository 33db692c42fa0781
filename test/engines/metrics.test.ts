/**
 * Reading an engine's /metrics: a value the text format allows but that measures nothing
 * (NaN, ±Inf: Prometheus' text format accepts them, and client libraries write a gauge set
 * to one as such) is a missing value, never a number the router computes with.
 */
import { describe, expect, it } from "bun:test";
import { parsePrometheus, readEngine } from "../../src/engines/metrics.ts";

describe("readEngine", () => {
  it.each(["NaN", "+Inf", "-Inf"])("a %s gauge is a missing value; the name is still reported found", (value) => {
    const reading = readEngine(parsePrometheus(`vllm:num_requests_running 2\nvllm:num_requests_waiting ${value}\nvllm:kv_cache_usage_perc 0.5\n`));
    expect(reading.values).toEqual({ running: 2, kv_usage: 0.5 });
    expect(reading.found.waiting).toBe("vllm:num_requests_waiting");
    expect(reading.missing).not.toContain("waiting");
  });

  it("over data-parallel series, only the finite ones count: sums and averages", () => {
    const text = [
      `vllm:num_requests_waiting{engine="0"} 3`,
      `vllm:num_requests_waiting{engine="1"} NaN`,
      `vllm:kv_cache_usage_perc{engine="0"} 0.2`,
      `vllm:kv_cache_usage_perc{engine="1"} NaN`,
      `vllm:kv_cache_usage_perc{engine="2"} 0.4`,
    ].join("\n");
    const { values } = readEngine(parsePrometheus(text));
    expect(values.waiting).toBe(3);
    expect(values.kv_usage).toBeCloseTo(0.3, 10);
  });
});
