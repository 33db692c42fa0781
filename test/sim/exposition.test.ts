/**
 * The sim's /metrics passes the Prometheus text-format rules `promtool check metrics`
 * enforces (as vLLM's does): counters named `…_total` in HELP, TYPE and samples, histograms
 * well formed. The checker is tested against the faults it must catch, so a clean result
 * means something. (Real promtool output is quoted in docs/sim.md.)
 */
import { afterAll, describe, expect, it } from "bun:test";
import { checkExposition } from "../helpers/exposition.ts";
import { openai, scrape, sim, stopAll } from "./_helpers.ts";

afterAll(stopAll);

it("the sim's /metrics, after streamed and plain requests, breaks no exposition rule", async () => {
  const s = await sim({ profile: "tiny", model: 'a "quoted" model\\name' });
  const client = openai(s);
  const messages = [{ role: "user" as const, content: "hello ".repeat(200) }];
  await client.chat.completions.create({ model: s.app.model, messages, max_tokens: 3 });
  const stream = await client.chat.completions.create({ model: s.app.model, messages, max_tokens: 3, stream: true });
  for await (const _ of stream);
  const text = await scrape(s);
  expect(checkExposition(text)).toEqual([]);
  // the families a dashboard reads, named as vLLM names them
  for (const name of ["vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:request_success_total"]) {
    expect(text).toContain(`# TYPE ${name} counter\n`);
  }
  expect(text).toMatch(/^vllm:time_to_first_token_seconds_count\{[^}]*\} 2\.0$/m);
});

it.each([
  ["vllm", []],
  ["sglang", []],
  // llama.cpp's own to_metrics types n_tokens_max as a counter without the suffix; the sim keeps it
  ["llamacpp", ['llamacpp:n_tokens_max: counter metrics should have "_total" suffix']],
] as const)("--engine %s: /metrics after traffic breaks no rule the engine itself does not break", async (engine, expected) => {
  const s = await sim({ profile: "tiny", engine, name: `x-${engine}` });
  const client = openai(s);
  await client.chat.completions.create({ model: s.app.model, messages: [{ role: "user", content: "hello ".repeat(200) }], max_tokens: 3 });
  expect(checkExposition(await scrape(s))).toEqual([...expected]);
});

describe("the checker catches what promtool rejects", () => {
  const HELP = (name: string, type: string) => `# HELP ${name} h\n# TYPE ${name} ${type}\n`;
  it.each([
    ["a counter without _total in TYPE (the sim's old format)", `# HELP x h\n# TYPE x counter\nx_total 1\n`, /x: counter metrics should have "_total" suffix/],
    ["no help text", `# TYPE x_total counter\nx_total 1\n`, /x_total: no help text/],
    ["no TYPE", `# HELP g h\ng 1\n`, /g: no TYPE line/],
    ["HELP after samples", `# TYPE g gauge\ng 1\n# HELP g h\n`, /HELP for g after its samples/],
    ["a family split in two", `${HELP("a", "gauge")}a{x="1"} 1\n${HELP("b", "gauge")}b 1\na{x="2"} 1\n`, /a: its lines are not together/],
    ["a series twice", `${HELP("g", "gauge")}g{x="1"} 1\ng{x="1"} 2\n`, /g series given twice/],
    ["a bad label name", `${HELP("g", "gauge")}g{__x="1"} 1\n`, /bad label name "__x"/],
    ["a bad escape", `${HELP("g", "gauge")}g{x="a\\tb"} 1\n`, /bad escape/],
    ["a value that is not a number", `${HELP("g", "gauge")}g one\n`, /not a number/],
    ["a histogram without +Inf", `${HELP("h", "histogram")}h_bucket{le="1"} 1\nh_sum 1\nh_count 1\n`, /no le="\+Inf" bucket/],
    ["buckets not cumulative", `${HELP("h", "histogram")}h_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n`, /not cumulative/],
    ["_count not the +Inf bucket", `${HELP("h", "histogram")}h_bucket{le="+Inf"} 2\nh_sum 1\nh_count 1\n`, /_count differs/],
    ["no final newline", `${HELP("g", "gauge")}g 1`, /end with a newline/],
  ])("%s", (_name, text, problem) => {
    const problems = checkExposition(text);
    expect(problems.some((p) => problem.test(p))).toBe(true);
  });

  it("accepts a clean exposition of every type", () => {
    const text = `${HELP("c_total", "counter")}c_total{a="x\\\\y\\"z\\n"} 1.5\n${HELP("g", "gauge")}g -Inf\ng{l="1"} NaN 1700000000000\n${HELP("h", "histogram")}h_bucket{le="0.5"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n`;
    expect(checkExposition(text)).toEqual([]);
  });
});
