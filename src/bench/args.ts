/**
 * `llmroute bench` options: the flags, their defaults (the shapes of the reference
 * measurements, docs/bench-design.md), and one pure parser from citty's raw strings to
 * typed, validated options. A bad value is a usage
 * error naming the flag, the value and what is allowed.
 */
import type { ArgsDef } from "citty";
import { POLICY_NAMES, type PolicyName } from "../route/options.ts";
import { LlmrouteError } from "../errors.ts";
import { DEFAULT_ENGINE, DEFAULT_PROFILE, ENGINE_PROFILES, PROFILES, TEMPLATES, type EngineProfileName, type ProfileName, type TemplateName } from "../sim/index.ts";
import { TRACE_DEFAULTS, TRACE_SHAPES, type TraceSpec } from "./trace.ts";
import { agentFirstTokens, type AgentSpec, type BurstSpec, type LadderSpec, type SharedSpec } from "./workloads.ts";

export const WORKLOAD_NAMES = ["agent", "burst", "mixed", "shared", "pressured", "llmd", "capacity", "trace"] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number];
/** What runs without --workload: every workload the bench writes itself (a trace needs its file: --trace). */
export const DEFAULT_WORKLOADS: readonly WorkloadName[] = WORKLOAD_NAMES.filter((w) => w !== "trace");

/**
 * What the bench routers' router.toml says of each sim's KV (`--kv-tokens`): nothing (the
 * router takes the engine's published capacity, or learns it from evidence), or the sims'
 * real KV times `factor` (1 = the truth; 6 = the issue's "six times larger than the card
 * really holds").
 */
export type KvTokensSetting = { kind: "none" } | { kind: "factor"; factor: number };

/** "none", "true", "6x": as the flag takes it. */
export function kvTokensLabel(k: KvTokensSetting): string {
  return k.kind === "none" ? "none" : k.factor === 1 ? "true" : `${k.factor}x`;
}

/** hybrid-plain (the rule the project started from) beside hybrid, so the bench shows what the cost model adds. */
export const DEFAULT_POLICIES: PolicyName[] = ["roundrobin", "affinity", "hybrid-plain", "cache-aware", "hybrid"];

export interface BenchOptions {
  /** Simulated replicas to start (ignored with `config`). */
  sim: number;
  timeScale: number;
  /** A router.toml whose replicas are benched instead of sims. */
  config?: string;
  /** Router instances per arm, sharing state through Redis; requests go round-robin. */
  routers: number;
  /** The Redis (or Valkey) they share; without it the bench starts a redis-server. */
  redis?: string;
  model?: string;
  policies: PolicyName[];
  /** Add the bench-only oracle arm (sims only). */
  oracle: boolean;
  /** Sim engine profiles: the whole bench runs on each, with its own fresh sims (sims only). */
  engines: EngineProfileName[];
  /** Sim chat template modes, crossed with `engines` (sims only). */
  templates: TemplateName[];
  /** The card (and model) every sim is sized as: KV, prefill and decode rates, sequences (sims only). */
  card: ProfileName;
  /** What the bench routers' router.toml says of each sim's kv_tokens (sims only). */
  kvTokens: KvTokensSetting;
  /** Each sim on its own thread (sims only; on unless --no-sim-threads). */
  simThreads: boolean;
  workloads: WorkloadName[];
  agent: AgentSpec;
  burst: BurstSpec & { count: number };
  mixed: MixedSpec;
  shared: SharedSpec;
  pressured: SharedSpec;
  llmd: LadderSpec;
  capacity: { families: number[]; turns: number; turnTokens: number; replyTokens: number; systemTokens: number };
  /** The trace to replay (`--trace`; file "" when none) and how. */
  trace: TraceSpec;
  /** Add the pooled arm to the trace workload (sims only): one sim with all N cards' KV, prefill and sequences. */
  pooled: boolean;
  /** Whole bench repetitions, each with a fresh salt; the matrix gives their median. */
  runs: number;
  json?: string;
  report?: string;
}

/**
 * mixed: agent loops with cold bursts arriving on a fixed schedule. The schedule is open
 * loop (burst k starts `everyS` × k after the agents' first turns are back, whatever the
 * earlier bursts took) and the count is fixed, so every arm is offered the same load: paced
 * by their own completion, bursts came more often in an arm that served them faster, and
 * that arm's agents met more of them (docs/bench-design.md#mixed). Between turns each agent runs its tools for a time drawn once per run
 * (`toolS`, model seconds, the same for every arm): identical agents with no pause come out
 * of a burst together and stay in lockstep, sharing each prefill for the rest of the arm.
 */
export interface MixedSpec {
  agents: number;
  agent: AgentSpec;
  burst: BurstSpec;
  /** Bursts per arm. */
  bursts: number;
  /** Model seconds from one burst's start to the next's. */
  everyS: number;
  /** Each tool run between two turns lasts between these model seconds. */
  toolS: readonly [number, number];
}

/** The workloads' sizes (what --small replaces). */
export type Sizes = { sim: number; timeScale: number } & Pick<BenchOptions, "agent" | "burst" | "mixed" | "shared" | "pressured" | "llmd" | "capacity"> & {
  trace: Omit<TraceSpec, "file">;
};

/**
 * Defaults, each workload shaped like the reference measurements
 * (docs/bench-design.md#the-reference-measurements). agent: a 90k-token conversation, a
 * tool result and a short reply per turn. burst: subagent requests sharing a system prompt,
 * sized like the sim's calibration of the measured burst. shared: 8k-token documents, more
 * of them than one card's KV holds but fewer than two cards' (the regime where placement
 * decides the hit rate), Poisson arrivals. capacity: three families, any two of which
 * overflow one card, which is the wall: with three families on two cards some card carries
 * two, whatever the placement.
 */
export const DEFAULTS: Sizes = {
  sim: 2,
  // The sim's advice: ~0.1 for 90k-token work, so the few real ms each request costs
  // (HTTP, parsing, timers) stay small once divided by the scale.
  timeScale: 0.1,
  agent: { contextTokens: 90_000, turns: 16, turnTokens: 2_000, replyTokens: 64, systemTokens: 2_000 },
  burst: { size: 16, systemTokens: 2_000, taskTokens: 2_841, replyTokens: 293, count: 3 },
  mixed: {
    // Three, not two: two identical agents in lockstep on two replicas, with even-sized
    // bursts between their turns, keep the round-robin counter's parity, so round-robin
    // pins them by accident (docs/bench-design.md#mixed). Three do not.
    agents: 3,
    agent: { contextTokens: 40_000, turns: 10, turnTokens: 2_000, replyTokens: 64, systemTokens: 2_000 },
    burst: { size: 16, systemTokens: 1_000, taskTokens: 1_500, replyTokens: 64 },
    // A burst every 25 s, four times: longer than the slowest engine profile takes to serve
    // one, so no profile is measured overloaded (docs/bench-design.md#mixed).
    bursts: 4,
    everyS: 25,
    toolS: [0.5, 2.5],
  },
  shared: { docs: 24, docTokens: 8_000, tailTokens: 200, requests: 120, rate: 1, replyTokens: 32, seed: 1 },
  // pressured: shared with the cache squeezed: only a placement that keeps each document
  // on one card, about half of them per card, holds them all; several requests per
  // document, so the steady state outweighs the compulsory misses; at 1 req/s TTFT shows
  // the hit rate, not a runaway queue (docs/bench-design.md#shared-and-pressured).
  pressured: { docs: 26, docTokens: 8_000, tailTokens: 200, requests: 156, rate: 1, replyTokens: 32, seed: 1 },
  // llmd: llm-d's shared_prefix scaled to the two sims, the same share of the fleet's KV,
  // so no card holds it and the fleet does; short replies (TTFT is the figure); a warm-up
  // that leaves a well-placed fleet half busy; a ladder from idle to past what a fleet
  // re-prefilling its prompts can serve (docs/bench-design.md#llmd).
  llmd: {
    groups: 15,
    promptsPerGroup: 5,
    systemTokens: 6_000,
    questionTokens: 1_200,
    replyTokens: 100,
    warmupRate: 1.5,
    rates: [1, 2, 4, 8],
    rungRequests: 40,
    seed: 1,
  },
  capacity: { families: [80_000, 70_000, 60_000], turns: 6, turnTokens: 1_000, replyTokens: 64, systemTokens: 2_000 },
  // trace: the whole file, as it came, every conversation, chat-shaped; replies capped, so
  // an hour of trace stays about an hour of decode (docs/traces.md#from-a-trace-to-requests).
  trace: TRACE_DEFAULTS,
};

const SEEDED = ["shared", "pressured", "llmd"] as const;
/** The workloads whose arrivals `--seed` draws (the agents' pauses come from the run's id). */
export const SEEDED_WORKLOADS: readonly WorkloadName[] = SEEDED;

/**
 * Run r's options: the shared, pressured and llmd arrivals are drawn from --seed + r − 1, so
 * each run is a fresh sample of the workload, as the agents' tool pauses already are (drawn
 * from the run's id), and the spread of the runs says how much a figure owes to one arrival
 * sequence. Every arm of a run gets the same arrivals. Replaying one sequence in every run
 * measured timing noise only (docs/bench-design.md#arrivals-per-run).
 */
export function runOptions(options: BenchOptions, r: number): BenchOptions {
  if (r === 1) return options;
  const next: BenchOptions = { ...options };
  const reseed = <W extends (typeof SEEDED)[number]>(w: W) => {
    next[w] = { ...options[w], seed: options[w].seed + r - 1 };
  };
  SEEDED.forEach(reseed);
  return next;
}

/**
 * `--small`: sizes for real replicas on a small machine, such as two CPU-only llama-servers
 * (docs/bench.md#on-your-own-replicas), where the 90k-token agent of the defaults would
 * take minutes a turn. Same shapes, a tenth of the tokens or less: the agent
 * grows to ~6k tokens over 6 turns, documents are 2k tokens, a burst is 4 requests. Explicit
 * flags still override each figure.
 */
export const SMALL: Sizes = {
  ...DEFAULTS,
  agent: { contextTokens: 6_000, turns: 6, turnTokens: 800, replyTokens: 16, systemTokens: 1_000 },
  burst: { size: 4, systemTokens: 500, taskTokens: 700, replyTokens: 16, count: 2 },
  mixed: {
    agents: 2,
    agent: { contextTokens: 4_000, turns: 4, turnTokens: 800, replyTokens: 16, systemTokens: 800 },
    burst: { size: 4, systemTokens: 400, taskTokens: 500, replyTokens: 16 },
    // Two agents of four turns take ~10–20 s on two CPU llama-servers: both bursts meet them.
    bursts: 2,
    everyS: 6,
    toolS: [0.5, 2.5],
  },
  shared: { docs: 6, docTokens: 2_000, tailTokens: 100, requests: 24, rate: 0.5, replyTokens: 8, seed: 1 },
  pressured: { docs: 8, docTokens: 2_000, tailTokens: 100, requests: 32, rate: 0.5, replyTokens: 8, seed: 1 },
  llmd: { groups: 4, promptsPerGroup: 3, systemTokens: 1_500, questionTokens: 300, replyTokens: 16, warmupRate: 0.5, rates: [0.5, 1], rungRequests: 8, seed: 1 },
  capacity: { families: [12_000, 10_000, 8_000], turns: 3, turnTokens: 500, replyTokens: 16, systemTokens: 500 },
};

/**
 * A trace replayed alone runs at time scale 0.2, not 0.1. Its requests are short next to the
 * agent's 90k tokens (on Mooncake's conversation trace a card's own p50 is 100–170 model ms),
 * and the real ms the client, the router and two HTTP hops take (~10 on a loaded 2-core
 * machine) count 1/F model ms each: at 0.1 and 2× load the median request's client TTFT sat
 * 100–125 model ms above its card's own, at 0.2 46–54 (docs/traces.md#time-scale). A replay
 * takes twice as long for it; --time-scale says otherwise.
 */
export const TRACE_TIME_SCALE = 0.2;

export const benchArgs = {
  sim: { type: "string", description: `Start N simulated 3090-class replicas (default ${DEFAULTS.sim})` },
  small: { type: "boolean", description: "Sizes for real replicas on a small machine (a tenth of the tokens: agent to 6k, 2k documents, bursts of 4); flags still override" },
  "time-scale": { type: "string", description: `Sim speed: real time = model time × F (default ${DEFAULTS.timeScale}; a trace alone ${TRACE_TIME_SCALE})` },
  config: { type: "string", description: "Bench the replicas of this router.toml instead of sims (no oracle)" },
  routers: { type: "string", description: "Router instances per arm sharing state through Redis, requests spread round-robin (default 1)" },
  redis: { type: "string", description: "Redis/Valkey URL the --routers instances share (default: start a redis-server on a free port)" },
  model: { type: "string", description: "Model to request (default: the sims' / the first replica's)" },
  policies: { type: "string", description: `Comma-separated policies (default ${DEFAULT_POLICIES.join(",")}; any of ${POLICY_NAMES.join(", ")})` },
  engine: {
    type: "string",
    description: `Sims: comma-separated engine profiles, the whole bench on each with fresh sims (default ${DEFAULT_ENGINE}; any of ${ENGINE_PROFILES.join(", ")})`,
  },
  template: {
    type: "string",
    description: `Sims: comma-separated chat template modes, crossed with --engine (default chatml; any of ${TEMPLATES.join(", ")})`,
  },
  card: {
    type: "string",
    description: `Sims: the card and model each sim is sized as (default ${DEFAULT_PROFILE}; any of ${Object.keys(PROFILES).join(", ")}: h100-8b = Llama-3.1-8B on one H100, 4xh100-70b = Llama-3.1-70B on four)`,
  },
  "kv-tokens": {
    type: "string",
    description: "Sims: what the routers' router.toml says of each replica's kv_tokens: none (default: discovered from the engine or learnt), true (the sims' real KV), or Fx (F times the real KV, e.g. 6x)",
  },
  // No citty default: --sim-threads given with --config is a mistake to report, the default is not.
  "sim-threads": {
    type: "boolean",
    description: "Sims: each on its own thread, its timers apart from the routers' and the client's (default on; docs/bench.md#timer-lag)",
    negativeDescription: "Sims: run them in the bench's own process, their timers sharing the routers' and the client's event loop",
  },
  oracle: { type: "boolean", description: "Add the bench-only oracle arm on sims", negativeDescription: "Skip the oracle arm (it asks every sim what it holds, so it needs sims)", default: true },
  workload: { type: "string", description: `Comma-separated workloads (default all: ${WORKLOAD_NAMES.join(",")})` },
  "context-tokens": { type: "string", description: `agent: prompt tokens of the last turn (${DEFAULTS.agent.contextTokens})` },
  turns: { type: "string", description: `agent: turns in the conversation (${DEFAULTS.agent.turns})` },
  "turn-tokens": { type: "string", description: `agent/mixed: tokens the client adds per turn (${DEFAULTS.agent.turnTokens})` },
  "system-tokens": { type: "string", description: `Tokens of every workload's system prompt (agent ${DEFAULTS.agent.systemTokens}, mixed bursts ${DEFAULTS.mixed.burst.systemTokens})` },
  "reply-tokens": { type: "string", description: `max_tokens of each agent, mixed and capacity reply (${DEFAULTS.agent.replyTokens})` },
  "burst-size": { type: "string", description: `burst/mixed: requests sent at once (${DEFAULTS.burst.size})` },
  bursts: { type: "string", description: `burst: bursts per arm (${DEFAULTS.burst.count})` },
  "burst-reply-tokens": { type: "string", description: `burst: max_tokens of each answer (${DEFAULTS.burst.replyTokens})` },
  "task-tokens": { type: "string", description: `burst: tokens of each request's own task (${DEFAULTS.burst.taskTokens})` },
  "mixed-agents": { type: "string", description: `mixed: concurrent agent loops (${DEFAULTS.mixed.agents})` },
  "mixed-context-tokens": { type: "string", description: `mixed: each agent's last-turn tokens (${DEFAULTS.mixed.agent.contextTokens})` },
  "mixed-turns": { type: "string", description: `mixed: turns per agent (${DEFAULTS.mixed.agent.turns})` },
  "mixed-bursts": { type: "string", description: `mixed: bursts per arm (${DEFAULTS.mixed.bursts})` },
  "burst-every": { type: "string", description: `mixed: model seconds from one burst's start to the next's, whatever the last one took (${DEFAULTS.mixed.everyS})` },
  "tool-time": { type: "string", description: `mixed: model seconds each agent's tools run between turns, MIN,MAX (${DEFAULTS.mixed.toolS.join(",")})` },
  docs: { type: "string", description: `shared: distinct shared prefixes (${DEFAULTS.shared.docs})` },
  "doc-tokens": { type: "string", description: `shared: tokens per shared prefix (${DEFAULTS.shared.docTokens})` },
  requests: { type: "string", description: `shared: requests per arm (${DEFAULTS.shared.requests})` },
  rate: { type: "string", description: `shared: mean arrivals per model second (${DEFAULTS.shared.rate})` },
  families: { type: "string", description: `capacity: comma-separated context tokens of the concurrent families (${DEFAULTS.capacity.families.join(",")})` },
  "family-turns": { type: "string", description: `capacity: turns per family (${DEFAULTS.capacity.turns})` },
  "pressured-docs": { type: "string", description: `pressured: distinct shared documents (${DEFAULTS.pressured.docs})` },
  "pressured-doc-tokens": { type: "string", description: `pressured: tokens per document (${DEFAULTS.pressured.docTokens})` },
  "pressured-requests": { type: "string", description: `pressured: requests per arm (${DEFAULTS.pressured.requests})` },
  "pressured-rate": { type: "string", description: `pressured: mean arrivals per model second (${DEFAULTS.pressured.rate})` },
  "llmd-groups": { type: "string", description: `llmd: groups sharing a system prompt (${DEFAULTS.llmd.groups})` },
  "llmd-prompts": { type: "string", description: `llmd: prompts per group (${DEFAULTS.llmd.promptsPerGroup})` },
  "llmd-system-tokens": { type: "string", description: `llmd: tokens of each group's system prompt (${DEFAULTS.llmd.systemTokens})` },
  "llmd-question-tokens": { type: "string", description: `llmd: tokens of each prompt's question (${DEFAULTS.llmd.questionTokens})` },
  "llmd-reply-tokens": { type: "string", description: `llmd: max_tokens of each answer (${DEFAULTS.llmd.replyTokens})` },
  "llmd-rates": { type: "string", description: `llmd: the ladder, comma-separated requests per model second (${DEFAULTS.llmd.rates.join(",")})` },
  "llmd-rung-requests": { type: "string", description: `llmd: requests per rung (${DEFAULTS.llmd.rungRequests})` },
  "llmd-warmup-rate": { type: "string", description: `llmd: rate of the warm-up, one full set of prompts (${DEFAULTS.llmd.warmupRate})` },
  trace: { type: "string", description: "trace: a Mooncake-format JSONL trace to replay (timestamp, input_length, output_length, hash_ids a line); alone, it runs only the trace workload" },
  "trace-block-tokens": { type: "string", description: `trace: tokens per hash id (${DEFAULTS.trace.blockTokens})` },
  "trace-sample": { type: "string", description: "trace: keep each conversation with probability 1/K, whole (1 = all; half of K = twice the load, a superset)" },
  "trace-seed": { type: "string", description: `trace: which conversations the sample keeps; the same in every run (${DEFAULTS.trace.sampleSeed})` },
  "trace-speed": { type: "string", description: "trace: arrival speed, trace times divided by X (1)" },
  "trace-start": { type: "string", description: "trace: the trace minute the replay starts at, warm-up first (0)" },
  "trace-warmup-minutes": { type: "string", description: "trace: trace minutes sent but not measured before the window (0)" },
  "trace-minutes": { type: "string", description: "trace: trace minutes measured after the warm-up (default: to the end)" },
  "trace-shape": { type: "string", description: `trace: chat (earlier turns as messages, the preamble as system) or flat (one user message) (${DEFAULTS.trace.shape})` },
  "trace-max-output": { type: "string", description: `trace: max_tokens = min(output_length, this) (${DEFAULTS.trace.maxOutput})` },
  pooled: { type: "boolean", description: "trace on sims: add the pooled arm", negativeDescription: "trace: skip the pooled arm (one sim with all the cards' KV, prefill and sequences)", default: true },
  seed: { type: "string", description: "Seed of the shared, pressured and llmd arrivals and choices; run r uses seed + r − 1 (1)" },
  runs: { type: "string", description: "Repeat the whole bench N times, each with a fresh salt; the matrix shows the median and spread (1)" },
  json: { type: "string", description: "Write every sample and summary to this JSON file" },
  report: { type: "string", description: "Write a self-contained HTML report with charts to this file" },
} as const satisfies ArgsDef;

export type RawArgs = Partial<Record<keyof typeof benchArgs, string | boolean | undefined>>;

export function parseBenchArgs(raw: RawArgs): BenchOptions {
  const problems: string[] = [];
  const DEFAULTS = raw.small === true ? SMALL : DEFAULT_SIZES;
  const str = (key: keyof typeof benchArgs) => {
    const v = raw[key];
    return typeof v === "string" && v !== "" ? v : undefined;
  };
  const num = (key: keyof typeof benchArgs, fallback: number, check: "int" | "positive" | "nonneg" = "int", min = 1): number => {
    const v = str(key);
    if (v === undefined) return fallback;
    const n = Number(v.replaceAll("_", ""));
    const ok = check === "int" ? Number.isInteger(n) && n >= min : check === "positive" ? Number.isFinite(n) && n > 0 : Number.isFinite(n) && n >= 0;
    if (!ok) {
      const want = check === "int" ? `an integer >= ${min}` : check === "positive" ? "a number > 0" : "a number >= 0";
      problems.push(`--${key} ${JSON.stringify(v)}: must be ${want}`);
      return fallback;
    }
    return n;
  };
  /** "MIN,MAX" model seconds, 0 ≤ MIN ≤ MAX. */
  const range = (key: keyof typeof benchArgs, fallback: readonly [number, number]): readonly [number, number] => {
    const v = str(key);
    if (v === undefined) return fallback;
    const parts = v.split(",").map((x) => Number(x.trim()));
    const [lo, hi] = parts;
    if (parts.length !== 2 || !Number.isFinite(lo) || !Number.isFinite(hi) || lo! < 0 || hi! < lo!) {
      problems.push(`--${key} ${JSON.stringify(v)}: must be MIN,MAX model seconds with 0 <= MIN <= MAX`);
      return fallback;
    }
    return [lo!, hi!];
  };
  const list = <T extends string>(key: keyof typeof benchArgs, known: readonly T[], fallback: readonly T[]): T[] => {
    const v = str(key);
    if (v === undefined) return [...fallback];
    const items = v.split(",").map((s) => s.trim()).filter(Boolean);
    const bad = items.filter((i) => !(known as readonly string[]).includes(i));
    if (bad.length > 0 || items.length === 0) {
      problems.push(`--${key} ${JSON.stringify(v)}: ${bad.length ? `unknown ${bad.map((b) => JSON.stringify(b)).join(", ")}; ` : ""}choose from ${known.join(", ")}`);
      return [...fallback];
    }
    return [...new Set(items)] as T[];
  };

  const replyTokens = num("reply-tokens", DEFAULTS.agent.replyTokens);
  const turnTokens = num("turn-tokens", DEFAULTS.agent.turnTokens);
  const burstSize = num("burst-size", DEFAULTS.burst.size);
  const system = str("system-tokens") === undefined ? undefined : num("system-tokens", 0, "int", 1);
  const numbers = (key: keyof typeof benchArgs, fallback: readonly number[], ok: (n: number) => boolean, want: string): number[] => {
    const v = str(key);
    if (v === undefined) return [...fallback];
    const items = v.split(",").map((s) => Number(s.trim().replaceAll("_", "")));
    if (items.length === 0 || !items.every(ok)) {
      problems.push(`--${key} ${JSON.stringify(v)}: must be ${want}`);
      return [...fallback];
    }
    return items;
  };
  const families = numbers("families", DEFAULTS.capacity.families, (f) => Number.isInteger(f) && f >= 256, "comma-separated token counts >= 256");

  // A trace alone runs alone; --workload says otherwise.
  const workloads = list("workload", WORKLOAD_NAMES, str("trace") ? ["trace"] : DEFAULT_WORKLOADS);
  const options: BenchOptions = {
    sim: num("sim", DEFAULTS.sim),
    timeScale: num("time-scale", workloads.every((w) => w === "trace") ? TRACE_TIME_SCALE : DEFAULTS.timeScale, "positive"),
    ...(str("config") ? { config: str("config")! } : {}),
    routers: num("routers", 1),
    ...(str("redis") ? { redis: str("redis")! } : {}),
    ...(str("model") ? { model: str("model")! } : {}),
    policies: list("policies", POLICY_NAMES, DEFAULT_POLICIES),
    oracle: raw.oracle !== false,
    engines: list("engine", ENGINE_PROFILES, [DEFAULT_ENGINE]),
    templates: list("template", TEMPLATES, ["chatml"]),
    card: list("card", Object.keys(PROFILES) as ProfileName[], [DEFAULT_PROFILE])[0]!,
    kvTokens: kvTokensOf(str("kv-tokens"), problems),
    workloads,
    agent: {
      contextTokens: num("context-tokens", DEFAULTS.agent.contextTokens),
      turns: num("turns", DEFAULTS.agent.turns, "int", 2),
      turnTokens,
      replyTokens,
      systemTokens: system ?? DEFAULTS.agent.systemTokens,
    },
    burst: {
      size: burstSize,
      systemTokens: system ?? DEFAULTS.burst.systemTokens,
      taskTokens: num("task-tokens", DEFAULTS.burst.taskTokens),
      replyTokens: num("burst-reply-tokens", DEFAULTS.burst.replyTokens),
      count: num("bursts", DEFAULTS.burst.count),
    },
    mixed: {
      agents: num("mixed-agents", DEFAULTS.mixed.agents),
      agent: {
        ...DEFAULTS.mixed.agent,
        contextTokens: num("mixed-context-tokens", DEFAULTS.mixed.agent.contextTokens),
        turns: num("mixed-turns", DEFAULTS.mixed.agent.turns, "int", 2),
        turnTokens,
        replyTokens,
        systemTokens: system ?? DEFAULTS.mixed.agent.systemTokens,
      },
      burst: { ...DEFAULTS.mixed.burst, size: burstSize, replyTokens, systemTokens: system ?? DEFAULTS.mixed.burst.systemTokens },
      bursts: num("mixed-bursts", DEFAULTS.mixed.bursts, "int", 1),
      everyS: num("burst-every", DEFAULTS.mixed.everyS, "nonneg"),
      toolS: range("tool-time", DEFAULTS.mixed.toolS),
    },
    shared: {
      ...DEFAULTS.shared,
      docs: num("docs", DEFAULTS.shared.docs),
      docTokens: num("doc-tokens", DEFAULTS.shared.docTokens),
      requests: num("requests", DEFAULTS.shared.requests),
      rate: num("rate", DEFAULTS.shared.rate, "positive"),
      seed: num("seed", DEFAULTS.shared.seed, "int", 0),
    },
    pressured: {
      ...DEFAULTS.pressured,
      docs: num("pressured-docs", DEFAULTS.pressured.docs),
      docTokens: num("pressured-doc-tokens", DEFAULTS.pressured.docTokens),
      requests: num("pressured-requests", DEFAULTS.pressured.requests),
      rate: num("pressured-rate", DEFAULTS.pressured.rate, "positive"),
      seed: num("seed", DEFAULTS.pressured.seed, "int", 0),
    },
    llmd: {
      groups: num("llmd-groups", DEFAULTS.llmd.groups),
      promptsPerGroup: num("llmd-prompts", DEFAULTS.llmd.promptsPerGroup),
      systemTokens: num("llmd-system-tokens", DEFAULTS.llmd.systemTokens),
      questionTokens: num("llmd-question-tokens", DEFAULTS.llmd.questionTokens),
      replyTokens: num("llmd-reply-tokens", DEFAULTS.llmd.replyTokens),
      warmupRate: num("llmd-warmup-rate", DEFAULTS.llmd.warmupRate, "positive"),
      rates: numbers("llmd-rates", DEFAULTS.llmd.rates, (r) => Number.isFinite(r) && r > 0, "comma-separated rates > 0"),
      rungRequests: num("llmd-rung-requests", DEFAULTS.llmd.rungRequests),
      seed: num("seed", DEFAULTS.llmd.seed, "int", 0),
    },
    capacity: {
      ...DEFAULTS.capacity,
      families,
      turns: num("family-turns", DEFAULTS.capacity.turns, "int", 2),
      replyTokens,
      systemTokens: system ?? DEFAULTS.capacity.systemTokens,
    },
    trace: {
      file: str("trace") ?? "",
      blockTokens: num("trace-block-tokens", DEFAULTS.trace.blockTokens),
      sample: num("trace-sample", DEFAULTS.trace.sample, "positive"),
      sampleSeed: num("trace-seed", DEFAULTS.trace.sampleSeed, "int", 0),
      speed: num("trace-speed", DEFAULTS.trace.speed, "positive"),
      startMinutes: num("trace-start", DEFAULTS.trace.startMinutes, "nonneg"),
      warmupMinutes: num("trace-warmup-minutes", DEFAULTS.trace.warmupMinutes, "nonneg"),
      minutes: num("trace-minutes", DEFAULTS.trace.minutes, "positive"),
      shape: list("trace-shape", TRACE_SHAPES, [DEFAULTS.trace.shape])[0]!,
      maxOutput: num("trace-max-output", DEFAULTS.trace.maxOutput),
    },
    pooled: raw.pooled !== false,
    simThreads: raw["sim-threads"] !== false,
    runs: num("runs", 1),
    ...(str("json") ? { json: str("json")! } : {}),
    ...(str("report") ? { report: str("report")! } : {}),
  };
  // A conversation must fit its context: say so now, not halfway through the bench.
  const fits = (what: string, spec: AgentSpec, flags: string) => {
    if (options.workloads.includes(what.split(" ")[0] as WorkloadName) && agentFirstTokens(spec) < 16) {
      problems.push(`${what}: ${spec.turns} turns of ${spec.turnTokens}+${spec.replyTokens} tokens after a ${spec.systemTokens}-token system prompt do not fit in ${spec.contextTokens} tokens (${flags})`);
    }
  };
  fits("agent", options.agent, "--context-tokens, --turns, --turn-tokens, --reply-tokens, --system-tokens");
  fits("mixed agents", options.mixed.agent, "--mixed-context-tokens, --mixed-turns, --turn-tokens");
  for (const f of options.capacity.families) fits(`capacity family of ${f}`, { ...options.capacity, contextTokens: f }, "--families, --family-turns");
  // The sims' knobs mean nothing to replicas the user runs: say so rather than ignore them.
  if (options.config !== undefined) {
    for (const key of ["engine", "template", "kv-tokens", "card"] as const) {
      if (str(key) !== undefined) problems.push(`--${key}: only with simulated replicas (--config benches the replicas as they are, with its own kv_tokens)`);
    }
    if (raw["sim-threads"] === true) problems.push("--sim-threads: only with simulated replicas (--config benches replicas that run apart already)");
  }
  const traceFlags = (Object.keys(benchArgs) as (keyof typeof benchArgs)[]).filter((k) => k.startsWith("trace") && str(k) !== undefined);
  if (str("card")?.includes(",")) problems.push(`--card ${JSON.stringify(str("card"))}: one card a bench`);
  if (options.workloads.includes("trace")) {
    if (options.trace.file === "") problems.push("--workload trace: needs --trace FILE (a Mooncake-format JSONL trace)");
    if (options.trace.sample < 1) problems.push(`--trace-sample ${options.trace.sample}: must be >= 1 (keep 1 of every K conversations)`);
    if (str("trace-shape")?.includes(",")) problems.push(`--trace-shape ${JSON.stringify(str("trace-shape"))}: one shape a run (chat or flat); two shapes are two runs`);
  } else if (traceFlags.length > 0) problems.push(`${traceFlags.map((k) => `--${k}`).join(", ")}: only with --workload trace`);
  const redis = str("redis");
  if (redis !== undefined && !/^rediss?:\/\/[^/]/.test(redis)) problems.push(`--redis ${JSON.stringify(redis)}: must be a redis:// or rediss:// URL`);
  else if (redis !== undefined && options.routers < 2) problems.push("--redis: only used with --routers 2 or more");
  if (problems.length > 0) throw new LlmrouteError("usage", `bench: ${problems.join("; ")}`);
  return options;
}

const DEFAULT_SIZES = DEFAULTS;

/** `--kv-tokens`: none | true | <F>x (F > 0). */
function kvTokensOf(value: string | undefined, problems: string[]): KvTokensSetting {
  if (value === undefined || value === "none") return { kind: "none" };
  if (value === "true") return { kind: "factor", factor: 1 };
  const m = /^(\d+(?:\.\d+)?)x$/.exec(value);
  const factor = m ? Number(m[1]) : NaN;
  if (!(factor > 0)) {
    problems.push(`--kv-tokens ${JSON.stringify(value)}: must be none (the router discovers or learns each card's KV), true (the sims' real KV) or a factor such as 6x (six times the real KV)`);
    return { kind: "none" };
  }
  return { kind: "factor", factor };
}
