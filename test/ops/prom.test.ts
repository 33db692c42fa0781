import { expect, it } from "bun:test";
import { parsePrometheus, readEngine } from "../../src/engines/metrics.ts";
import { Registry } from "../../src/ops/prom.ts";

it("renders counters, histograms and collected gauges that a Prometheus parser reads back", () => {
  const reg = new Registry();
  const c = reg.counter("x_requests_total", "requests");
  c.inc({ replica: "gpu0", route: "pin" });
  c.inc({ replica: "gpu0", route: "pin" }, 2);
  c.inc({ replica: 'we"ird', route: "spread,failover" });
  const h = reg.histogram("x_ttft_seconds", "ttft", [0.5, 1]);
  h.observe({ replica: "gpu0" }, 0.2);
  h.observe({ replica: "gpu0" }, 3);
  reg.gauge("x_up", "up", () => [[{ replica: "gpu0" }, 1]]);
  const text = reg.render();
  expect(text).toContain("# TYPE x_requests_total counter");
  expect(text).toContain("# TYPE x_ttft_seconds histogram");
  const parsed = parsePrometheus(text);
  expect(parsed.get("x_requests_total")).toEqual([
    { labels: { replica: "gpu0", route: "pin" }, value: 3 },
    { labels: { replica: 'we"ird', route: "spread,failover" }, value: 1 },
  ]);
  expect(parsed.get("x_ttft_seconds_bucket")!.map((s) => [s.labels.le, s.value])).toEqual([["0.5", 1], ["1", 1], ["+Inf", 2]]);
  expect(parsed.get("x_ttft_seconds_sum")![0]!.value).toBeCloseTo(3.2);
  expect(parsed.get("x_up")![0]!.value).toBe(1);
});

it("reads engine load signals by family and reports names it did not find", () => {
  const vllm = parsePrometheus(
    [
      '# HELP vllm:num_requests_running x',
      'vllm:num_requests_running{engine="0",model_name="m"} 2',
      'vllm:num_requests_running{engine="1",model_name="m"} 1',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 4',
      'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5',
      'vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.7',
    ].join("\n"),
  );
  const r = readEngine(vllm);
  expect(r.family).toBe("vllm");
  expect(r.values).toMatchObject({ running: 3, waiting: 4 });
  expect(r.values.kv_usage).toBeCloseTo(0.6);
  expect(r.found.kv_usage).toBe("vllm:gpu_cache_usage_perc");
  expect(r.missing).toContain("prefix_hits");

  const llama = readEngine(parsePrometheus("llamacpp:requests_processing 1\nllamacpp:requests_deferred 2\n"));
  expect(llama).toMatchObject({ family: "llamacpp", values: { running: 1, waiting: 2 }, missing: ["prompt_tokens", "cached_tokens", "prompt_seconds", "generation_tokens"] });
  // n_tokens_max is the largest sequence seen (its HELP says so), not the KV capacity: never read as one.
  expect(readEngine(parsePrometheus("llamacpp:n_tokens_max 13148\n")).values).toEqual({});
  // only the signals asked for are read and reported
  expect(readEngine(vllm, ["running", "waiting"]).missing).toEqual([]);
  expect(readEngine(parsePrometheus("go_goroutines 12\n")).family).toBeUndefined();
});
