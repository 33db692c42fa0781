import { describe, expect, it } from "bun:test";
import { DEFAULT_POLICIES, DEFAULT_WORKLOADS, DEFAULTS, kvTokensLabel, parseBenchArgs, runOptions, SEEDED_WORKLOADS, TRACE_TIME_SCALE, WORKLOAD_NAMES } from "../../src/bench/args.ts";
import { ENGINE_PROFILES, TEMPLATES } from "../../src/sim/index.ts";
import { POLICY_NAMES } from "../../src/route/options.ts";
import { agentFirstTokens, sharedRequests } from "../../src/bench/workloads.ts";

describe("parseBenchArgs", () => {
  it("defaults: two sims, five policies (the seed's hybrid-plain beside hybrid) plus the oracle, every workload but a trace, one run, the seed's sizes", () => {
    const o = parseBenchArgs({});
    expect(o.sim).toBe(2);
    expect(o.policies).toEqual(DEFAULT_POLICIES);
    expect(o.policies).toEqual(["roundrobin", "affinity", "hybrid-plain", "cache-aware", "hybrid"]);
    expect(o.workloads).toEqual(["agent", "burst", "mixed", "shared", "pressured", "llmd", "capacity"]);
    expect(o.runs).toBe(1);
    expect(o.oracle).toBe(true);
    expect(o.workloads).toEqual([...DEFAULT_WORKLOADS]);
    expect([...WORKLOAD_NAMES]).toEqual([...DEFAULT_WORKLOADS, "trace"]);
    expect(o.agent.contextTokens).toBe(90_000);
    expect(o.burst.size).toBe(16);
    expect(o.shared.docTokens).toBe(8_000);
    expect(o.capacity.families.every((f) => f >= 50_000 && f <= 80_000)).toBe(true);
  });

  it("defaults on sims: today's engine profile (vllm-details) and template (chatml), no kv_tokens in the routers' config", () => {
    const o = parseBenchArgs({});
    expect(o.engines).toEqual(["vllm-details"]);
    expect(o.templates).toEqual(["chatml"]);
    expect(o.kvTokens).toEqual({ kind: "none" });
  });

  it("sims run on threads of their own unless --no-sim-threads; --config without the flag is no mistake", () => {
    expect(parseBenchArgs({}).simThreads).toBe(true);
    expect(parseBenchArgs({ "sim-threads": true }).simThreads).toBe(true);
    expect(parseBenchArgs({ "sim-threads": false }).simThreads).toBe(false);
    expect(() => parseBenchArgs({ config: "router.toml" })).not.toThrow();
  });

  it("--engine and --template take lists of the sim's profiles and modes", () => {
    const o = parseBenchArgs({ engine: "vllm, llamacpp,ollama,vllm", template: "chatml,qwen3-reasoning" });
    expect(o.engines).toEqual(["vllm", "llamacpp", "ollama"]);
    expect(o.templates).toEqual(["chatml", "qwen3-reasoning"]);
    expect(parseBenchArgs({ engine: ENGINE_PROFILES.join(","), template: TEMPLATES.join(",") })).toMatchObject({ engines: [...ENGINE_PROFILES], templates: [...TEMPLATES] });
  });

  it.each([
    ["none", { kind: "none" }, "none"],
    ["true", { kind: "factor", factor: 1 }, "true"],
    ["6x", { kind: "factor", factor: 6 }, "6x"],
    ["0.5x", { kind: "factor", factor: 0.5 }, "0.5x"],
  ] as const)("--kv-tokens %s", (flag, setting, label) => {
    const o = parseBenchArgs({ "kv-tokens": flag });
    expect(o.kvTokens).toEqual(setting);
    expect(kvTokensLabel(o.kvTokens)).toBe(label);
  });

  it("mixed: a fixed count of bursts on a fixed schedule, and the agents' tool times", () => {
    const o = parseBenchArgs({ "mixed-bursts": "3", "burst-every": "20", "tool-time": "0, 1.5" });
    expect([o.mixed.bursts, o.mixed.everyS, o.mixed.toolS]).toEqual([3, 20, [0, 1.5]]);
    expect(parseBenchArgs({}).mixed).toMatchObject({ bursts: 4, everyS: 25, toolS: [0.5, 2.5] });
  });

  it("the default agent and mixed conversations fit their context", () => {
    expect(agentFirstTokens(DEFAULTS.agent)).toBeGreaterThan(10_000);
    expect(agentFirstTokens(DEFAULTS.mixed.agent)).toBeGreaterThan(1_000);
  });

  it("the default capacity families overflow one 3090 in every pair (the wall) but each fits alone", () => {
    const kv = 122_636;
    const f = [...DEFAULTS.capacity.families].sort((a, b) => a - b);
    expect(f[0]! + f[1]!).toBeGreaterThan(kv);
    expect(f.at(-1)!).toBeLessThan(kv);
  });

  it("parses lists, numbers and files", () => {
    const o = parseBenchArgs({
      sim: "3",
      "time-scale": "0.01",
      policies: "hybrid, roundrobin,hybrid",
      workload: "burst,agent",
      turns: "4",
      "context-tokens": "20_000",
      families: "60000,70000",
      oracle: false,
      json: "out.json",
      report: "r.html",
    });
    expect(o).toMatchObject({ sim: 3, timeScale: 0.01, policies: ["hybrid", "roundrobin"], workloads: ["burst", "agent"], oracle: false, json: "out.json", report: "r.html" });
    expect(o.agent).toMatchObject({ turns: 4, contextTokens: 20_000 });
    expect(o.capacity.families).toEqual([60_000, 70_000]);
  });

  it("every policy of the routing core is accepted", () => {
    expect(parseBenchArgs({ policies: POLICY_NAMES.join(",") }).policies).toEqual([...POLICY_NAMES]);
  });

  it("parses the pressured and llmd shapes, --seed for all three arrival plans, and --runs", () => {
    const o = parseBenchArgs({
      "pressured-docs": "30",
      "pressured-doc-tokens": "4000",
      "pressured-requests": "90",
      "pressured-rate": "0.5",
      "llmd-groups": "4",
      "llmd-prompts": "3",
      "llmd-system-tokens": "2000",
      "llmd-question-tokens": "100",
      "llmd-reply-tokens": "16",
      "llmd-rates": "0.5, 3,9",
      "llmd-rung-requests": "12",
      "llmd-warmup-rate": "2",
      seed: "9",
      runs: "2",
    });
    expect(o.pressured).toMatchObject({ docs: 30, docTokens: 4_000, requests: 90, rate: 0.5, seed: 9 });
    expect(o.llmd).toEqual({ groups: 4, promptsPerGroup: 3, systemTokens: 2_000, questionTokens: 100, replyTokens: 16, warmupRate: 2, rates: [0.5, 3, 9], rungRequests: 12, seed: 9 });
    expect(o.shared.seed).toBe(9);
    expect(o.runs).toBe(2);
  });

  it("each run draws its arrivals from the next seed: run 1 from --seed, run 2 from --seed + 1; nothing else changes", () => {
    const o = parseBenchArgs({ seed: "9", runs: "2" });
    expect(runOptions(o, 1)).toBe(o);
    const second = runOptions(o, 2);
    expect([second.shared.seed, second.pressured.seed, second.llmd.seed]).toEqual([10, 10, 10]);
    expect({ ...second, shared: o.shared, pressured: o.pressured, llmd: o.llmd }).toEqual(o);
    expect({ ...second.llmd, seed: 9 }).toEqual(o.llmd);
    expect({ ...second.shared, seed: 9 }).toEqual(o.shared);
    expect({ ...second.pressured, seed: 9 }).toEqual(o.pressured);
    // The seeded workloads are exactly those whose options carry a seed: one added later is reseeded too.
    expect(WORKLOAD_NAMES.filter((w) => "seed" in DEFAULTS[w])).toEqual([...SEEDED_WORKLOADS]);
    // And the arrivals do differ: a workload drawn from seed 10 is not seed 9's.
    expect(sharedRequests(second.shared, "").map((r) => r.doc)).not.toEqual(sharedRequests(o.shared, "").map((r) => r.doc));
  });

  it.each([
    [{ policies: "hybrid,fastest" }, /--policies "hybrid,fastest": unknown "fastest"; choose from roundrobin/],
    [{ workload: "agent,chat" }, /--workload "agent,chat": unknown "chat"/],
    [{ sim: "0" }, /--sim "0": must be an integer >= 1/],
    [{ "time-scale": "-1" }, /--time-scale "-1": must be a number > 0/],
    [{ turns: "1" }, /--turns "1": must be an integer >= 2/],
    [{ families: "80000,abc" }, /--families "80000,abc"/],
    [{ "llmd-rates": "1,0" }, /--llmd-rates "1,0": must be comma-separated rates > 0/],
    [{ runs: "0" }, /--runs "0": must be an integer >= 1/],
    [{ "mixed-bursts": "0" }, /--mixed-bursts "0": must be an integer >= 1/],
    [{ "tool-time": "2,1" }, /--tool-time "2,1": must be MIN,MAX model seconds with 0 <= MIN <= MAX/],
    [{ "tool-time": "1" }, /--tool-time "1": must be MIN,MAX/],
    [{ "pressured-rate": "fast" }, /--pressured-rate "fast": must be a number > 0/],
    [{ engine: "vllm,trtllm" }, /--engine "vllm,trtllm": unknown "trtllm"; choose from vllm, vllm-details, sglang, llamacpp, ollama/],
    [{ template: "llama3" }, /--template "llama3": unknown "llama3"; choose from chatml, mistral3-tools, deepseek-r1, qwen3-reasoning/],
    [{ "kv-tokens": "6" }, /--kv-tokens "6": must be none .*, true .* or a factor such as 6x/],
    [{ "kv-tokens": "0x" }, /--kv-tokens "0x": must be none/],
    [{ "kv-tokens": "false" }, /--kv-tokens "false": must be none/],
    [{ config: "router.toml", engine: "sglang" }, /--engine: only with simulated replicas/],
    [{ config: "router.toml", template: "deepseek-r1" }, /--template: only with simulated replicas/],
    [{ config: "router.toml", "kv-tokens": "6x" }, /--kv-tokens: only with simulated replicas \(--config benches the replicas as they are, with its own kv_tokens\)/],
    [{ config: "router.toml", "sim-threads": true }, /--sim-threads: only with simulated replicas/],
    [{ workload: "trace" }, /--workload trace: needs --trace FILE/],
    [{ trace: "t.jsonl", "trace-sample": "0.5" }, /--trace-sample 0\.5: must be >= 1/],
    [{ trace: "t.jsonl", "trace-shape": "chat,flat" }, /--trace-shape "chat,flat": one shape a run/],
    [{ trace: "t.jsonl", "trace-shape": "prompt" }, /--trace-shape "prompt": unknown "prompt"; choose from chat, flat/],
    [{ trace: "t.jsonl", "trace-minutes": "0" }, /--trace-minutes "0": must be a number > 0/],
    [{ trace: "t.jsonl", "trace-block-tokens": "0" }, /--trace-block-tokens "0": must be an integer >= 1/],
    [{ "trace-minutes": "5", "trace-shape": "flat" }, /--trace-minutes, --trace-shape: only with --workload trace/],
  ])("%j is a usage error naming the flag", (raw, message) => {
    expect(() => parseBenchArgs(raw as never)).toThrow(message);
  });

  it("--trace alone runs the trace workload, with its flags; every run replays the same sample", () => {
    const o = parseBenchArgs({
      trace: "t.jsonl",
      "trace-block-tokens": "64",
      "trace-sample": "4",
      "trace-seed": "3",
      "trace-speed": "2",
      "trace-start": "10",
      "trace-warmup-minutes": "2",
      "trace-minutes": "5",
      "trace-shape": "flat",
      "trace-max-output": "128",
    });
    expect(o.workloads).toEqual(["trace"]);
    expect(o.trace).toEqual({ file: "t.jsonl", blockTokens: 64, sample: 4, sampleSeed: 3, speed: 2, startMinutes: 10, warmupMinutes: 2, minutes: 5, shape: "flat", maxOutput: 128 });
    expect(runOptions(o, 2).trace).toEqual(o.trace);
    expect(parseBenchArgs({ trace: "t.jsonl" }).trace).toMatchObject({ blockTokens: 512, sample: 1, shape: "chat", maxOutput: 512, minutes: Infinity });
    expect(parseBenchArgs({ trace: "t.jsonl", workload: "agent,trace" }).workloads).toEqual(["agent", "trace"]);
    expect(parseBenchArgs({ trace: "t.jsonl" }).pooled).toBe(true);
    expect(parseBenchArgs({ trace: "t.jsonl", pooled: false }).pooled).toBe(false);
  });

  it("a trace alone runs at time scale 0.2 (its short requests: the hops, ×1/F, would match the cards' own time at 0.1); with other workloads, or told, as told", () => {
    expect(TRACE_TIME_SCALE).toBe(0.2);
    expect(DEFAULTS.timeScale).toBe(0.1);
    expect(parseBenchArgs({ trace: "t.jsonl" }).timeScale).toBe(TRACE_TIME_SCALE);
    expect(parseBenchArgs({ trace: "t.jsonl", workload: "trace" }).timeScale).toBe(TRACE_TIME_SCALE);
    expect(parseBenchArgs({ trace: "t.jsonl", workload: "agent,trace" }).timeScale).toBe(DEFAULTS.timeScale);
    expect(parseBenchArgs({ trace: "t.jsonl", "time-scale": "0.1" }).timeScale).toBe(0.1);
    expect(parseBenchArgs({}).timeScale).toBe(DEFAULTS.timeScale);
  });

  it("a conversation that cannot fit its context is a usage error before anything runs", () => {
    expect(() => parseBenchArgs({ "context-tokens": "3000" })).toThrow(/agent: 16 turns of 2000\+64 tokens after a 2000-token system prompt do not fit in 3000 tokens/);
    expect(() => parseBenchArgs({ "context-tokens": "3000", workload: "burst" })).not.toThrow();
    expect(() => parseBenchArgs({ "context-tokens": "3000", turns: "3", "turn-tokens": "200", "system-tokens": "100", workload: "agent" })).not.toThrow();
  });

  it("reports every bad flag at once", () => {
    expect(() => parseBenchArgs({ sim: "x", rate: "0" })).toThrow(/--sim "x".*; --rate "0"/);
  });
});
