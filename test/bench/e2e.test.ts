/**
 * The bench end to end on two in-process sims at a tiny time scale and small sizes. It
 * asserts the shapes that hold by construction — who went where, with which reason, how
 * many samples — never timings, which at this scale are timer noise.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { bench, type BenchOutput } from "../../src/bench/command.ts";
import { silentProgress, type Sample } from "../../src/bench/run.ts";
import { simTarget, type Target } from "../../src/bench/targets.ts";
import { runCli } from "../helpers/proc.ts";
import { TEST_TIMEOUT_MS } from "../helpers/wait.ts";

let target: Target;
beforeAll(async () => {
  target = await simTarget({ replicas: 2, timeScale: 0.002 });
});
afterAll(async () => {
  await target.stop();
});

const TURNS = 6;
const small = {
  "context-tokens": "3000",
  turns: String(TURNS),
  "turn-tokens": "200",
  "reply-tokens": "8",
  "burst-reply-tokens": "8",
  "system-tokens": "100",
  "burst-size": "16",
  bursts: "2",
  "task-tokens": "300",
};

async function run(raw: Record<string, string | boolean>): Promise<BenchOutput> {
  const lines: string[] = [];
  return bench(parseBenchArgs({ ...small, ...raw }), { out: (t) => lines.push(t), progress: silentProgress }, target);
}

const samplesOf = (out: BenchOutput, workload: string, arm: string): Sample[] =>
  out.blocks[0]!.result.workloads.find((w) => w.workload === workload)!.arms.find((a) => a.arm === arm)!.samples;

describe("agent and burst on two sims", () => {
  let out: BenchOutput;
  beforeAll(async () => {
    out = await run({ workload: "agent,burst", policies: "roundrobin,affinity,hybrid" });
  });

  it("every request succeeded, and every arm has its sample count", () => {
    expect(out.errors).toBe(0);
    for (const w of out.blocks[0]!.summaries) expect(w.arms.map((a) => a.arm)).toEqual(["roundrobin", "affinity", "hybrid", "oracle"]);
    const agent = out.blocks[0]!.summaries.find((w) => w.workload === "agent")!;
    for (const a of agent.arms) expect([a.warm?.n, a.first?.n]).toEqual([TURNS - 1, 1]);
    const burst = out.blocks[0]!.summaries.find((w) => w.workload === "burst")!;
    for (const a of burst.arms) expect([a.burstWall?.n, a.ttft?.n]).toEqual([2, 32]);
  });

  it("hybrid pins every continuation turn to turn one's replica, which holds the previous turn", () => {
    const turns = samplesOf(out, "agent", "hybrid");
    expect(turns.map((s) => s.route)).toEqual(["spread", ...Array(TURNS - 1).fill("pin")]);
    expect(new Set(turns.map((s) => s.replica)).size).toBe(1);
    // The sim's cache confirms it: each turn finds the previous turn's prompt (to a 16-token block).
    for (let i = 1; i < turns.length; i++) expect(turns[i]!.cachedTokens).toBeGreaterThanOrEqual(turns[i - 1]!.promptTokens - 16);
  });

  it("roundrobin alternates replicas turn by turn", () => {
    const turns = samplesOf(out, "agent", "roundrobin");
    expect(turns.every((s) => s.route === "spread")).toBe(true);
    for (let i = 1; i < turns.length; i++) expect(turns[i]!.replica).not.toBe(turns[i - 1]!.replica);
  });

  it("affinity keeps the conversation on one replica; so does the oracle, by the cache alone", () => {
    const affinity = samplesOf(out, "agent", "affinity");
    expect(affinity.map((s) => s.route)).toEqual(["hash", ...Array(TURNS - 1).fill("pin")]);
    expect(new Set(affinity.map((s) => s.replica)).size).toBe(1);
    const oracle = samplesOf(out, "agent", "oracle");
    expect(oracle.every((s) => s.route === "oracle")).toBe(true);
    expect(new Set(oracle.map((s) => s.replica)).size).toBe(1);
  });

  it("a burst is spread evenly by roundrobin and hybrid, and piled onto one card by affinity", () => {
    for (const arm of ["roundrobin", "hybrid"]) {
      const members = samplesOf(out, "burst", arm);
      for (const g of [0, 1]) {
        const burst = members.filter((s) => s.group === g);
        expect(burst.filter((s) => s.replica === "gpu0").length).toBe(8);
        expect(burst.every((s) => s.route === "spread")).toBe(true);
      }
    }
    const affinity = samplesOf(out, "burst", "affinity");
    for (const g of [0, 1]) expect(new Set(affinity.filter((s) => s.group === g).map((s) => s.replica)).size).toBe(1);
  });

  it("each arm is salted apart: the first turn is cold everywhere", () => {
    for (const arm of ["roundrobin", "affinity", "hybrid", "oracle"]) expect(samplesOf(out, "agent", arm)[0]!.cachedTokens).toBeLessThanOrEqual(16);
  });
});

describe("mixed, shared and capacity on two sims", () => {
  let out: BenchOutput;
  beforeAll(async () => {
    out = await run({
      workload: "mixed,shared,capacity",
      policies: "hybrid",
      "mixed-agents": "2",
      "mixed-context-tokens": "2000",
      "mixed-turns": "4",
      "mixed-bursts": "2",
      "burst-every": "0",
      "tool-time": "0,0.2",
      docs: "3",
      "doc-tokens": "500",
      requests: "30",
      rate: "50",
      families: "80000,70000,60000",
      "family-turns": "2",
    });
  });

  it("mixed: two agents on different replicas, later turns pinned (or priced away), and at least one burst while they ran", () => {
    const s = samplesOf(out, "mixed", "hybrid");
    const agents = s.filter((x) => x.kind === "turn");
    expect(agents.length).toBe(8);
    // Later turns stay with their owner, unless a burst queued there made re-prefilling elsewhere faster.
    for (const a of [0, 1]) expect(agents.filter((x) => x.group === a && x.index > 1).every((x) => x.route === "pin" || x.route === "cost")).toBe(true);
    expect(agents.filter((x) => x.index > 1 && x.route === "pin").length).toBeGreaterThan(0);
    expect(new Set(agents.filter((x) => x.index === 1).map((x) => x.replica)).size).toBe(2);
    const summary = out.blocks[0]!.summaries.find((w) => w.workload === "mixed")!.arms[0]!;
    expect(summary.burstWall!.n).toBeGreaterThanOrEqual(1);
    expect(s.filter((x) => x.kind === "burst").length).toBe(16 * summary.burstWall!.n);
  });

  it("shared: every request measured, with its cache truth and the replicas' shares", () => {
    const summary = out.blocks[0]!.summaries.find((w) => w.workload === "shared")!.arms.find((a) => a.arm === "hybrid")!;
    expect(summary.ttft?.n).toBe(30);
    expect(summary.cachedShare).toBeGreaterThan(0);
    expect(summary.replicaShare.gpu0! + summary.replicaShare.gpu1!).toBeCloseTo(1, 10);
  });

  it("capacity: three families on two cards put two on one card, over its KV, and the router says so (the KV the engine publishes: no kv_tokens by default)", () => {
    const summary = out.blocks[0]!.summaries.find((w) => w.workload === "capacity")!.arms.find((a) => a.arm === "hybrid")!;
    expect(summary.perGroup?.length).toBe(3);
    expect(summary.warm?.n).toBe(3);
    expect(summary.capacityWarnings?.length).toBeGreaterThanOrEqual(1);
    // vLLM's cache_config_info: 7,664 blocks of 16 tokens (src/sim/profiles/vllm.ts).
    expect(summary.capacityWarnings![0]).toMatch(/% of the engine's KV 122,624: the engine evicts and re-prefills/);
    const oracle = out.blocks[0]!.summaries.find((w) => w.workload === "capacity")!.arms.find((a) => a.arm === "oracle")!;
    expect(oracle.capacityWarnings).toBeUndefined();
  });
});

describe("shared, pressured and llmd, two runs: ceilings, the decomposition, the matrix", () => {
  let out: BenchOutput;
  let json: {
    engines: { engine: string; template: string; runs: { run: string; summaries: unknown[] }[]; summaries: unknown[] }[];
    matrix: { runs: number; rows: { workload: string }[] };
    corrections: { judged: number; false: number };
  };
  const ladder = { groups: 2, prompts: 3, rungRequests: 6, rates: [20, 80] };
  beforeAll(async () => {
    const dir = await mkdtemp(`${tmpdir()}/llmroute-bench-`);
    out = await run({
      workload: "shared,pressured,llmd",
      policies: "roundrobin,hybrid",
      runs: "2",
      docs: "3",
      "doc-tokens": "400",
      requests: "12",
      rate: "50",
      "pressured-docs": "4",
      "pressured-doc-tokens": "400",
      "pressured-requests": "12",
      "pressured-rate": "50",
      "llmd-groups": String(ladder.groups),
      "llmd-prompts": String(ladder.prompts),
      "llmd-system-tokens": "400",
      "llmd-question-tokens": "50",
      "llmd-reply-tokens": "4",
      "llmd-rates": ladder.rates.join(","),
      "llmd-rung-requests": String(ladder.rungRequests),
      "llmd-warmup-rate": "20",
      json: `${dir}/bench.json`,
    });
    json = await Bun.file(`${dir}/bench.json`).json();
    await rm(dir, { recursive: true });
  });

  it("two runs, each with its own salt, every request answered", () => {
    expect(out.errors).toBe(0);
    expect(out.blocks[0]!.results.length).toBe(2);
    expect(out.blocks[0]!.results[0]!.run).not.toBe(out.blocks[0]!.results[1]!.run);
    // Each run's arms start cold: every document's first prefill is a miss (at most a block
    // of template cached). Which request of a document comes first at the engine is a race
    // at these rates, so look for the cold one among them.
    for (const r of out.blocks[0]!.results) {
      for (const arm of r.workloads[0]!.arms) {
        const docs = new Set(arm.samples.map((s) => s.index));
        for (const doc of docs) expect(Math.min(...arm.samples.filter((s) => s.index === doc).map((s) => s.cachedTokens))).toBeLessThanOrEqual(16);
      }
    }
  });

  it("llmd: the warm-up sends every prompt once, then each rung its requests; the tables count them per run and pooled", () => {
    for (const r of out.blocks[0]!.results) {
      for (const arm of r.workloads.find((w) => w.workload === "llmd")!.arms) {
        const perRung = [0, 1, 2].map((rung) => arm.samples.filter((s) => s.rung === rung).length);
        expect(perRung).toEqual([ladder.groups * ladder.prompts, ladder.rungRequests, ladder.rungRequests]);
      }
    }
    const llmd = out.blocks[0]!.summaries.find((w) => w.workload === "llmd")!;
    for (const a of llmd.arms) expect(a.rungs!.map((r) => r.ttft.n)).toEqual([12, 12, 12]);
    expect(out.text).toContain(`warm-up 20/s (n=12)`);
  });

  it("no arm beats the plan's ceiling by more than one 16-token block a request (template and salt bytes the plan leaves out)", () => {
    for (const r of out.blocks[0]!.results) {
      for (const w of r.workloads) {
        expect(w.ceiling).toBeGreaterThan(0);
        expect(w.ceiling).toBeLessThan(1);
        for (const arm of w.arms) {
          const prompt = arm.samples.reduce((a, s) => a + s.promptTokens, 0);
          const cached = arm.samples.reduce((a, s) => a + s.cachedTokens, 0);
          expect(cached / prompt).toBeLessThanOrEqual(w.ceiling! + (16 * arm.samples.length) / prompt);
        }
      }
    }
  });

  it("the oracle reports available and captured from the sims for every request; a router reports them for all or none", () => {
    for (const w of out.blocks[0]!.result.workloads) {
      for (const arm of w.arms) {
        const reported = arm.samples.filter((s) => s.availableTokens !== undefined && s.capturedTokens !== undefined).length;
        if (arm.arm === "oracle") {
          expect(reported).toBe(arm.samples.length);
          for (const s of arm.samples) expect(s.availableTokens!).toBeGreaterThanOrEqual(s.capturedTokens!);
        } else expect([0, arm.samples.length]).toContain(reported);
      }
      const oracle = out.blocks[0]!.summaries.find((x) => x.workload === w.workload)!.arms.find((a) => a.arm === "oracle")!;
      expect(oracle.hits.available).toBeGreaterThanOrEqual(oracle.hits.captured!);
      expect(Object.keys(oracle.hits.perReplica)).toEqual(["gpu0", "gpu1"]);
    }
  });

  it("the report opens with the matrix: a row per workload, a column per arm, each run's figure and n behind each cell", () => {
    expect(out.matrix.runs).toBe(2);
    expect(out.matrix.arms).toEqual(["roundrobin", "hybrid", "oracle"]);
    expect(out.matrix.rows.map((r) => r.workload)).toEqual(["shared", "pressured", "llmd"]);
    for (const row of out.matrix.rows) {
      expect(Math.min(...row.cells.map((c) => c.relative))).toBe(1);
      for (const c of row.cells) expect(c.runs.length).toBe(2);
    }
    expect(out.matrix.rows[0]!.cells[0]!.n).toEqual([12, 12]);
    const lines = out.text.split("\n");
    expect(lines[0]).toMatch(/^llmroute bench · 2 runs /);
    expect(lines.slice(2, 4).join(" ")).toContain("median of 2 runs");
    expect(lines[4]).toMatch(/^workload\s+headline\s+n\s+roundrobin\s+hybrid\s+oracle\s+best$/);
  });

  it("--json carries the matrix, the corrections summary, and per engine setup every run (samples and summaries) and the pooled summaries", () => {
    expect(json.engines.length).toBe(1);
    const [block] = json.engines;
    expect([block!.engine, block!.template]).toEqual(["vllm-details", "chatml"]);
    expect(block!.runs.map((r) => r.run)).toEqual(out.blocks[0]!.results.map((r) => r.run));
    expect(block!.runs[0]!.summaries.length).toBe(3);
    expect(block!.summaries.length).toBe(3);
    expect(json.matrix.runs).toBe(2);
    expect(json.matrix.rows.length).toBe(3);
    expect(json.corrections.judged).toBeGreaterThan(0);
  });
});

describe("llmroute demo", () => {
  it("runs from the CLI, prints the comparison and where the HTML report is, and exits 0", async () => {
    const report = `${tmpdir()}/llmroute-demo-test-${process.pid}.html`;
    // Full demo sizes at a tiny time scale: the wiring, not the timings.
    const { code, stdout, stderr } = await runCli(["demo", "--time-scale", "0.002", "--report", report]);
    expect({ code, stderr: code === 0 ? "" : stderr }).toEqual({ code: 0, stderr: "" });
    for (const title of ["agent —", "burst —", "mixed —", "headline"]) expect(stdout).toContain(title);
    for (const policy of ["roundrobin", "affinity", "hybrid"]) expect(stdout).toMatch(new RegExp(`^${policy}\\s+15\\s`, "m"));
    expect(stdout).not.toMatch(/^oracle/m);
    expect(stdout).toContain(`HTML report (charts): ${report}`);
    expect((await Bun.file(report).text()).startsWith("<!doctype html>")).toBe(true);
    await rm(report);
    // The one genuinely long test: the whole demo is ~5.5 s of CPU, ten times any other
    // test's; beside four busy loops at load 19 it took 52 s, near half the default.
  }, 2.5 * TEST_TIMEOUT_MS);
});

describe("--config: the user's own replicas", () => {
  it("benches the replicas of a router.toml through each policy, without the oracle (it cannot see a real cache)", async () => {
    const dir = await mkdtemp(`${tmpdir()}/llmroute-bench-`);
    const config = `${dir}/router.toml`;
    // Any OpenAI-compatible replicas will do; these happen to be the sims of this file.
    await Bun.write(config, target.replicas.map((r) => `[[replica]]\nname = "${r.name}"\nurl = "${r.url}"\n`).join("\n"));
    const options = parseBenchArgs({ ...small, config, workload: "agent", policies: "hybrid" });
    const out = await bench(options, { out: () => {}, progress: silentProgress });
    expect(out.blocks[0]!.result.target).toMatchObject({ kind: "config", timeScale: 1, model: "sim-model" });
    expect(out.blocks[0]!.result.workloads[0]!.arms.map((a) => a.arm)).toEqual(["hybrid"]);
    expect(out.errors).toBe(0);
    expect(samplesOf(out, "agent", "hybrid").map((s) => s.route)).toEqual(["spread", ...Array(TURNS - 1).fill("pin")]);
    await rm(dir, { recursive: true });
  });
});

describe("--engine, --template, --kv-tokens: the bench on each engine setup, each with its own fresh sims", () => {
  let out: BenchOutput;
  const lines: string[] = [];
  let json: { engines: { label: string; engine: string; template: string; kvTokens: string; target: { replicas: unknown[] } }[]; corrections: { judged: number } };
  beforeAll(async () => {
    const dir = await mkdtemp(`${tmpdir()}/llmroute-bench-`);
    const options = parseBenchArgs({
      ...small,
      sim: "2",
      "time-scale": "0.002",
      engine: "vllm,llamacpp",
      template: "mistral3-tools",
      "kv-tokens": "6x",
      workload: "agent",
      policies: "hybrid",
      turns: "4",
      json: `${dir}/bench.json`,
    });
    out = await bench(options, { out: () => {}, progress: { status: () => {}, line: (t) => lines.push(t) } });
    json = await Bun.file(`${dir}/bench.json`).json();
    await rm(dir, { recursive: true });
  });
  const turns = (block: number, arm: string) => out.blocks[block]!.result.workloads[0]!.arms.find((a) => a.arm === arm)!.samples;

  it("one row block per engine setup, in order, each named, every request answered", () => {
    expect(out.errors).toBe(0);
    expect(out.blocks.map((b) => [b.label, b.result.target.sim])).toEqual([
      // The sims run on threads of their own: the bench's default.
      ["vllm · mistral3-tools", { engine: "vllm", template: "mistral3-tools", kvTokens: "6x", card: "3090", threads: true }],
      ["llamacpp · mistral3-tools", { engine: "llamacpp", template: "mistral3-tools", kvTokens: "6x", card: "3090", threads: true }],
    ]);
    expect(out.matrix.rows.map((r) => [r.engine, r.workload, r.cells.map((c) => c.n[0])])).toEqual([
      ["vllm · mistral3-tools", "agent", [3, 3]],
      ["llamacpp · mistral3-tools", "agent", [3, 3]],
    ]);
    expect(out.text).toMatch(/^engine\s+workload\s+headline\s+n\s+hybrid\s+oracle\s+best$/m);
    expect(out.text.split("\n")[0]).toContain("router.toml kv_tokens: 6× the sims' real KV (735,816)");
  });

  it("--json lists each setup under engines[] with its profile, template and kv_tokens, and sums the corrections", () => {
    expect(json.engines.map((e) => [e.label, e.engine, e.template, e.kvTokens, e.target.replicas.length])).toEqual([
      ["vllm · mistral3-tools", "vllm", "mistral3-tools", "6x", 2],
      ["llamacpp · mistral3-tools", "llamacpp", "mistral3-tools", "6x", 2],
    ]);
    expect(json.corrections.judged).toBe(out.blocks[1]!.summaries[0]!.arms.find((a) => a.arm === "hybrid")!.corrections!.judged);
  });

  it("progress lines name the engine setup", () => {
    expect(lines.filter((l) => / · agent · (hybrid|oracle): /.test(l))).toEqual([
      expect.stringMatching(/^vllm · mistral3-tools · agent · hybrid: warm-turn TTFT p50 /),
      expect.stringMatching(/^vllm · mistral3-tools · agent · oracle: /),
      expect.stringMatching(/^llamacpp · mistral3-tools · agent · hybrid: /),
      expect.stringMatching(/^llamacpp · mistral3-tools · agent · oracle: /),
    ]);
  });

  it("delivered comes from the sim on every profile: vLLM's usage reports no cached tokens, llama.cpp's does and agrees", () => {
    for (const arm of ["hybrid", "oracle"]) {
      const vllm = turns(0, arm);
      expect(vllm.every((s) => s.reportedCachedTokens === undefined && s.simStop !== undefined)).toBe(true);
      expect(vllm.filter((s) => s.index > 1).every((s) => s.cachedTokens > 0)).toBe(true);
      const llamacpp = turns(1, arm);
      expect(llamacpp.map((s) => [s.reportedCachedTokens, s.simStop !== undefined])).toEqual(llamacpp.map((s) => [s.cachedTokens, true]));
    }
    // Only llama.cpp's responses give the router a figure to judge.
    expect(turns(0, "hybrid").some((s) => s.verdict !== undefined)).toBe(false);
    expect(turns(1, "hybrid").filter((s) => s.index > 1).every((s) => s.verdict !== undefined)).toBe(true);
    expect(out.blocks[1]!.summaries[0]!.arms.find((a) => a.arm === "hybrid")!.corrections!.judged).toBeGreaterThanOrEqual(3);
  });

  it("the conversation sends the agent's tools, so Mistral 3 moves them to each new last user message: turn 2 finds only the system prompt cached", () => {
    for (const block of [0, 1]) {
      const [first, second, third] = turns(block, "oracle");
      expect(second!.simStop).toBe("new");
      // Turn 1 put the tools before the first user message; turn 2 moved them past it.
      expect(second!.cachedTokens).toBeLessThan(first!.promptTokens / 4);
      // From turn 3 on, the previous last user message keeps its place: most of the prompt is cached.
      expect(third!.cachedTokens).toBeGreaterThan(second!.promptTokens / 2);
    }
  });

  it("the hit table reports the warm turns kept on the previous turn's replica and delivered against the oracle's", () => {
    for (const b of out.blocks) {
      const arms = b.summaries[0]!.arms;
      const oracle = arms.find((a) => a.arm === "oracle")!;
      expect(oracle.turns).toMatchObject({ warm: 3, vsOracle: 1 });
      const hybrid = arms.find((a) => a.arm === "hybrid")!;
      expect(hybrid.turns!.warm).toBe(3);
      expect(hybrid.turns!.vsOracle).toBeGreaterThan(0);
      expect(hybrid.kvBelieved && Object.keys(hybrid.kvBelieved)).toEqual(["gpu0", "gpu1"]);
    }
    expect(out.text).toMatch(/warm pinned\s+turns delivered\s+÷ oracle/);
    expect(out.text).toMatch(/^Index corrections: |^FALSE INDEX CORRECTIONS: /m);
  });
});
