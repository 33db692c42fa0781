/**
 * The runner: for each workload, each arm starts from an equal, cold fleet (sims reset; a
 * fresh salt either way), gets its own in-process router, and drives the workload's
 * requests through it. It records one sample per request in model time (real ÷ time
 * scale) and leaves every figure to report.ts.
 */
import type { CacheVerdict } from "../route/evidence.ts";
import type { TemplateName } from "../sim/index.ts";
import { kvTokensLabel, type BenchOptions, type WorkloadName } from "./args.ts";
import { fmt, keyFigure } from "./matrix.ts";
import { routerCapacityWarnings, summarizeArm } from "./report.ts";
import type { Outcome, SimStop } from "./client.ts";
import type { Arm, ArmName, SimTotals, Target } from "./targets.ts";
import { traceYardstick, type TraceYardstick } from "./pooled.ts";
import { watchTimerLag, type TimerLag } from "./lag.ts";
import { loadTrace, type TracePlan } from "./trace.ts";
import { traceMessages } from "./trace-text.ts";
import {
  AGENT_TOOLS,
  agentMessages,
  agentPlan,
  burstMessages,
  chatBody,
  hitCeiling,
  ladderRequests,
  saltLine,
  sharedRequests,
  toolPauses,
  type AgentPlan,
  type BurstSpec,
  type ChatMessage,
  type LadderRequest,
  type Reply,
} from "./workloads.ts";

export interface Sample {
  /** Agent or family number, burst number, or user number (shared). */
  group: number;
  /** 1-based turn for conversations (agents, families, a trace's conversations); position in the burst; the shared document. */
  index: number;
  /** "turn" (a conversation's request), "burst" (a burst member), "shared" (a one-shot over a shared prefix: shared, pressured, llmd), "trace" (a trace's request). */
  kind: "turn" | "burst" | "shared" | "trace";
  /** trace: sent in the warm-up, not measured. */
  warmup?: true;
  /** trace: the line of the trace file it replays. */
  line?: number;
  /** llmd: 0 = warm-up, k = the ladder's k-th rate. */
  rung?: number;
  /** Which run, once several are pooled (their clocks each start at 0). */
  run?: number;
  /** Model ms from the arm's start to sending. */
  startMs: number;
  /** Model ms to the first content chunk (NaN if none). */
  ttftMs: number;
  totalMs: number;
  replica: string;
  route: string;
  status: number;
  promptTokens: number;
  /**
   * Delivered: prompt tokens the engine found cached. On sims, the sim's own figure
   * (x-sim-prefix), since some engines' usage carries none; on real replicas, usage's.
   */
  cachedTokens: number;
  /** usage's cached_tokens, when usage carried one (on sims it equals cachedTokens wherever the profile reports it). */
  reportedCachedTokens?: number;
  /** Sims: why the cache hit stopped where it did (full, evicted, new, elsewhere). */
  simStop?: SimStop;
  /** Sims: how much of the prompt's prefix the replica held (≥ cachedTokens: beyond it, evicted or held elsewhere). */
  simHeld?: number;
  /** Sims, `elsewhere` stops: how much of the prompt the replica had computed, when more than it held (the rest was evicted since). */
  simComputed?: number;
  /** Sims: the sequence id (x-sim-sequence) that ties this request to the sim's own first-token time. */
  simSequence?: number;
  /**
   * Sims: the engine's own time to first token, model ms, by the sim's clock (GET /sim/first-tokens):
   * its queue and prefill, without the client's, the router's and the HTTP hops' time, which at
   * a time scale of F reach ttftMs multiplied by 1/F (docs/traces.md#engine-ttft).
   */
  engineTtftMs?: number;
  /** The router's judgement of the engine's report (its request record): a "miss" dropped index entries as evicted. */
  verdict?: CacheVerdict;
  completionTokens: number;
  /** Prompt tokens cached on some replica when the request was routed, by the router's index (the oracle: by the sims). */
  availableTokens?: number;
  /** … cached on the replica it went to. */
  capturedTokens?: number;
  error?: string;
}

export interface BurstWall {
  group: number;
  /** Model ms from the first request sent to the last one finished. */
  wallMs: number;
  size: number;
}

export interface ArmResult {
  arm: ArmName;
  samples: Sample[];
  bursts: BurstWall[];
  /** Model ms the whole arm took. */
  wallMs: number;
  /** The router's /status warnings at the end of the arm (undefined for the oracle). */
  warnings?: string[];
  /** Sim counters over the arm (preemptions, evicted blocks); undefined on real replicas. */
  sim?: SimTotals;
  /** The KV (tokens) the router believed each replica holds at the end of the arm (/status; 0 = unknown); undefined for the oracle. */
  kvBelieved?: Record<string, number>;
  /** With sims: how late this process's timers fired over the arm, real ms (lag.ts). Several runs pooled: the worst run's. */
  timerLag?: TimerLag;
}

export interface WorkloadResult {
  workload: WorkloadName;
  arms: ArmResult[];
  /** The best hit rate any placement could deliver, from the plan (shared, pressured, llmd; trace: the infinite cache). */
  ceiling?: number;
  /** trace: the infinite and the pooled cache over the same requests (pooled.ts). */
  yardstick?: TraceYardstick;
}

export interface BenchResult {
  run: string;
  target: {
    kind: Target["kind"];
    replicas: { name: string; kvTokens: number }[];
    timeScale: number;
    model: string;
    engine?: string;
    /** Sims: the engine profile, the chat template, what the routers' router.toml said of kv_tokens ("none", "true", "6x"), the card they were sized as, and whether each ran on its own thread. */
    sim?: { engine: string; template: string; kvTokens: string; card: string; threads?: boolean };
  };
  options: BenchOptions;
  startedAt: string;
  /** Real seconds the whole bench took. */
  elapsedS: number;
  workloads: WorkloadResult[];
}

export interface Progress {
  /** A transient status line (overwritten on a TTY). */
  status(text: string): void;
  /** A line that stays. */
  line(text: string): void;
}

export const silentProgress: Progress = { status: () => {}, line: () => {} };

/** What a workload driver needs: the arm, the clock in model ms, the salt and the model. */
export interface DriveContext {
  arm: Arm;
  model: string;
  /** The run's id: what every arm of one run shares. */
  run: string;
  salt: string;
  /** Tools the conversations declare on every request (under the sims' non-ChatML templates). */
  tools?: readonly unknown[];
  /** Real ms per model ms (1 on real replicas). */
  scale: number;
  /** The trace to replay (the trace workload). */
  trace?: TracePlan;
  /** Model ms since the arm started. */
  now(): number;
  /** Wait until model ms `at` since the arm started (pacing arrivals; not synchronisation). */
  until(at: number): Promise<void>;
  progress: Progress;
}

/**
 * What a target's row block is called: the sims' engine profile, and their template when it
 * is not ChatML ("vllm", "sglang · qwen3-reasoning"); undefined for real replicas.
 */
export function setupLabel(sim: { engine: string; template: string } | undefined): string | undefined {
  if (!sim) return undefined;
  return sim.template === "chatml" ? sim.engine : `${sim.engine} · ${sim.template}`;
}

/** Tools go with the conversations under a template where they can move (see AGENT_TOOLS). */
export function toolsFor(template: TemplateName | undefined): readonly unknown[] | undefined {
  return template === undefined || template === "chatml" ? undefined : AGENT_TOOLS;
}

/** What a run needs beyond its options: which run of several it is, and the trace, read and checked once. */
export interface RunInputs {
  /** 1-based; even runs take the arms in reverse order (armOrder). */
  runIndex?: number;
  trace?: TracePlan;
}

/**
 * The order run `runIndex` takes its arms in: forward in odd runs, backward in even ones
 * (A B C, C B A), so a drift over the bench's time (a machine growing busier, a cache
 * warming) falls on every arm alike over two runs rather than on the last arm every time.
 */
export function armOrder<T>(arms: readonly T[], runIndex = 1): T[] {
  return runIndex % 2 === 0 ? [...arms].reverse() : [...arms];
}

/** The arms of a workload: the policies, the oracle on sims, and for a trace on sims the pooled sim. */
export function armsOf(workload: WorkloadName, options: BenchOptions, target: Pick<Target, "kind">): ArmName[] {
  const sims = target.kind === "sim";
  return [...options.policies, ...(options.oracle && sims ? (["oracle"] as const) : []), ...(workload === "trace" && options.pooled && sims ? (["pooled"] as const) : [])];
}

export async function runBench(target: Target, options: BenchOptions, run: string, progress: Progress = silentProgress, inputs: RunInputs = {}): Promise<BenchResult> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  // A bad trace stops here, before any request is sent.
  const trace = options.workloads.includes("trace") ? (inputs.trace ?? (await loadTrace(options.trace))) : undefined;
  const workloads: WorkloadResult[] = [];
  for (const workload of options.workloads) {
    const result: WorkloadResult = { workload, arms: [] };
    const ceiling = planCeiling(workload, options);
    if (ceiling !== undefined) result.ceiling = ceiling;
    if (workload === "trace") {
      // The pooled cache holds every card's KV; unknown (0) on any card leaves it out.
      const kv = target.replicas.every((r) => r.kvTokens > 0) ? target.replicas.reduce((a, r) => a + r.kvTokens, 0) : 0;
      result.yardstick = traceYardstick(trace!, kv);
      result.ceiling = result.yardstick.ceiling.hitRate;
    }
    const arms = armsOf(workload, options, target);
    const done = new Map<ArmName, ArmResult>();
    for (const name of armOrder(arms, inputs.runIndex)) {
      const arm = await runArm(target, options, run, workload, name, progress, trace);
      done.set(name, arm);
      progress.line(armLine(workload, arm, target.replicas.map((r) => r.name), target.kind === "sim", setupLabel(target.sim)));
    }
    // Reported in the arms' own order, whatever order they ran in.
    result.arms = arms.map((name) => done.get(name)!);
    workloads.push(result);
  }
  return {
    run,
    target: {
      kind: target.kind,
      replicas: target.replicas.map((r) => ({ name: r.name, kvTokens: r.kvTokens })),
      timeScale: target.timeScale,
      model: target.model,
      ...(target.engine ? { engine: target.engine } : {}),
      ...(target.sim ? { sim: { engine: target.sim.engine, template: target.sim.template, kvTokens: kvTokensLabel(target.sim.kvTokens), card: target.sim.card, ...(target.sim.threads ? { threads: true } : {}) } } : {}),
    },
    options,
    startedAt,
    elapsedS: (performance.now() - started) / 1000,
    workloads,
  };
}

export async function runArm(
  target: Target,
  options: BenchOptions,
  run: string,
  workload: WorkloadName,
  name: ArmName,
  progress: Progress,
  trace?: TracePlan,
): Promise<ArmResult> {
  await target.reset();
  const arm = await target.startArm(name);
  const scale = target.timeScale;
  const t0 = performance.now();
  const label = setupLabel(target.sim);
  const tools = toolsFor(target.sim?.template);
  const ctx: DriveContext = {
    arm,
    model: target.model,
    run,
    salt: saltLine(run, workload, name),
    ...(tools ? { tools } : {}),
    ...(trace ? { trace } : {}),
    scale,
    now: () => (performance.now() - t0) / scale,
    until: async (at) => {
      const wait = at * scale - (performance.now() - t0);
      if (wait > 0) await Bun.sleep(wait);
    },
    progress: {
      status: (text) => progress.status(`${label ? `${label} · ` : ""}${workload} · ${name} · ${text}`),
      line: progress.line,
    },
  };
  ctx.progress.status("starting");
  // With sims, times are model time: how late this process's timers fire (the routers' and the
  // client's; the sims' too when they run here, --no-sim-threads) is noise in every time reported.
  const lag = target.kind === "sim" ? watchTimerLag() : undefined;
  try {
    const driven = await DRIVERS[workload](ctx, options);
    const result: ArmResult = { arm: name, samples: driven.samples, bursts: driven.bursts ?? [], wallMs: ctx.now() };
    if (lag) result.timerLag = lag.stop();
    if (arm.status) {
      const status = await arm.status();
      result.warnings = routerCapacityWarnings(status);
      result.kvBelieved = Object.fromEntries(status.replicas.map((r) => [r.name, r.kv_tokens]));
    }
    const sim = await target.simTotals();
    if (sim) result.sim = sim;
    const firsts = await target.firstTokens();
    if (firsts) {
      for (const s of result.samples) {
        const ms = s.simSequence === undefined ? undefined : firsts.get(s.replica)?.get(s.simSequence);
        if (ms !== undefined) s.engineTtftMs = ms;
      }
    }
    return result;
  } finally {
    lag?.stop();
    await arm.stop();
  }
}

/** Model ms between the starts of concurrent conversations: enough to fix their arrival order. */
const STAGGER_MS = 500;

type Driver = (ctx: DriveContext, options: BenchOptions) => Promise<{ samples: Sample[]; bursts?: BurstWall[] }>;

const DRIVERS: Record<WorkloadName, Driver> = {
  agent: async (ctx, o) => ({ samples: await driveConversation(ctx, agentPlan(o.agent, ctx.salt, 0), o.agent.turns, 0, "agent") }),
  burst: async (ctx, o) => {
    const samples: Sample[] = [];
    const bursts: BurstWall[] = [];
    for (let b = 0; b < o.burst.count; b++) {
      // Each burst has its own salt: every one of them is cold, as the measured bursts were.
      const r = await driveBurst(ctx, o.burst, `${ctx.salt} b${b}`, b);
      samples.push(...r.samples);
      bursts.push(r.wall);
      ctx.progress.status(`burst ${b + 1}/${o.burst.count} · wall ${fmtS(r.wall.wallMs)}`);
    }
    return { samples, bursts };
  },
  mixed: async (ctx, o) => {
    const m = o.mixed;
    const pauses = toolPauses(ctx.run, m.agents, m.agent.turns, m.toolS);
    // Agents start in order; bursts begin once every agent's first (cold) turn is back, so
    // the spread counter places the agents alike in every arm, then come on a fixed schedule
    // (see MixedSpec): the same count at the same times in every arm.
    let firstTurns = 0;
    let allStarted!: () => void;
    const started = new Promise<void>((resolve) => (allStarted = resolve));
    const agents = Promise.all(
      Array.from({ length: m.agents }, async (_, a) => {
        await ctx.until(a * STAGGER_MS);
        return driveConversation(
          ctx,
          agentPlan(m.agent, ctx.salt, a),
          m.agent.turns,
          a,
          `agent ${a}`,
          (turn) => {
            if (turn === 1 && ++firstTurns === m.agents) allStarted();
          },
          (turn) => pauses[a]![turn - 1]!,
        );
      }),
    )
      .finally(allStarted)
      .then((all) => all.flat());
    const burstRuns = (async () => {
      await started;
      const t0 = ctx.now();
      return Promise.all(
        Array.from({ length: m.bursts }, async (_, b) => {
          await ctx.until(t0 + b * m.everyS * 1000);
          return driveBurst(ctx, m.burst, `${ctx.salt} b${b}`, b);
        }),
      );
    })();
    // Awaited after the agents; marked handled now, so a failing burst is not reported as unhandled meanwhile.
    burstRuns.catch(() => undefined);
    const samples = await agents;
    const runs = await burstRuns;
    for (const r of runs) samples.push(...r.samples);
    return { samples, bursts: runs.map((r) => r.wall) };
  },
  shared: async (ctx, o) => ({ samples: await driveArrivals(ctx, sharedRequests(o.shared, ctx.salt), o.shared.replyTokens, (r, i) => ({ group: i, index: r.doc })) }),
  pressured: async (ctx, o) => ({ samples: await driveArrivals(ctx, sharedRequests(o.pressured, ctx.salt), o.pressured.replyTokens, (r, i) => ({ group: i, index: r.doc })) }),
  llmd: async (ctx, o) => {
    const requests = ladderRequests(o.llmd, ctx.salt);
    const where = (r: LadderRequest, i: number) => ({ group: i, index: r.group, rung: r.rung });
    const warmup = requests.filter((r) => r.rung === 0);
    const samples = await driveArrivals(ctx, warmup, o.llmd.replyTokens, where);
    // The ladder waits for the warm-up to drain: a slow warm-up (it is where every system
    // prompt is computed cold) would otherwise leak into the first rung (docs/bench-design.md#llmd).
    const start = ctx.now();
    const first = requests[warmup.length]?.atMs ?? 0;
    const ladder = requests.slice(warmup.length).map((r) => ({ ...r, atMs: start + r.atMs - first }));
    samples.push(...(await driveArrivals(ctx, ladder, o.llmd.replyTokens, (r, i) => where(r, warmup.length + i))));
    return { samples };
  },
  trace: async (ctx, o) => ({ samples: await driveTrace(ctx, ctx.trace!, o.trace.maxOutput) }),
  capacity: async (ctx, o) => {
    const c = o.capacity;
    // Families start in order, so counter-based policies place them alike in every arm.
    const families = c.families.map(async (contextTokens, f) => {
      await ctx.until(f * STAGGER_MS);
      const spec = { contextTokens, turns: c.turns, turnTokens: c.turnTokens, replyTokens: c.replyTokens, systemTokens: c.systemTokens };
      return driveConversation(ctx, agentPlan(spec, ctx.salt, f), c.turns, f, `family ${f}`);
    });
    return { samples: (await Promise.all(families)).flat() };
  },
};

/** The plan's hit-rate ceiling (no salt changes a token count, so any salt will do). */
export function planCeiling(workload: WorkloadName, o: BenchOptions): number | undefined {
  if (workload === "shared") return hitCeiling(sharedRequests(o.shared, ""));
  if (workload === "pressured") return hitCeiling(sharedRequests(o.pressured, ""));
  if (workload === "llmd") return hitCeiling(ladderRequests(o.llmd, ""));
  return undefined;
}

/** One-shots sent at their planned arrival times (open loop: nobody waits for an answer). */
async function driveArrivals<R extends { atMs: number; messages: ChatMessage[] }>(
  ctx: DriveContext,
  requests: readonly R[],
  replyTokens: number,
  where: (r: R, i: number) => Pick<Sample, "group" | "index" | "rung">,
): Promise<Sample[]> {
  let done = 0;
  return Promise.all(
    requests.map(async (r, i) => {
      await ctx.until(r.atMs);
      const { reply: _reply, ...sample } = await send(ctx, chatBody(ctx.model, r.messages, replyTokens), { ...where(r, i), kind: "shared" });
      done++;
      if (done % 10 === 0 || done === requests.length) ctx.progress.status(`${done}/${requests.length} requests`);
      return sample;
    }),
  );
}

/**
 * A trace replayed open loop: each request at its (window-relative, sped-up) arrival time,
 * its text made just before it is sent (an hour of trace is gigabytes of prompts).
 */
async function driveTrace(ctx: DriveContext, plan: TracePlan, maxOutput: number): Promise<Sample[]> {
  let done = 0;
  const total = plan.requests.length;
  const B = plan.spec.blockTokens;
  return Promise.all(
    plan.requests.map(async (p) => {
      await ctx.until(p.atMs);
      const r = plan.records[p.record]!;
      const messages = traceMessages(plan, p.record, plan.spec.shape, ctx.salt, B);
      const maxTokens = Math.max(1, Math.min(r.outputLength, maxOutput));
      const where = { group: p.conversation, index: p.turn, kind: "trace" as const, line: r.line, ...(p.warmup ? { warmup: true as const } : {}) };
      const { reply: _reply, ...sample } = await send(ctx, chatBody(ctx.model, messages, maxTokens), where);
      done++;
      if (done % 25 === 0 || done === total) ctx.progress.status(`${done}/${total} requests`);
      return sample;
    }),
  );
}

async function send(ctx: DriveContext, body: Record<string, unknown>, where: Pick<Sample, "group" | "index" | "kind" | "rung" | "warmup" | "line">): Promise<Sample & { reply: Reply }> {
  const startMs = ctx.now();
  const out: Outcome = await ctx.arm.send(body);
  return {
    ...where,
    startMs,
    ttftMs: out.ttftMs / ctx.scale,
    totalMs: out.totalMs / ctx.scale,
    reply: { content: out.text, ...(out.reasoning ? { reasoning: out.reasoning } : {}) },
    replica: out.replica,
    route: out.route,
    status: out.status,
    promptTokens: out.promptTokens,
    // A sim says what it really found cached, reported in usage or not (vLLM without
    // --enable-prompt-tokens-details and Ollama report nothing); a real engine's usage is all there is.
    cachedTokens: out.sim?.cachedTokens ?? out.cachedTokens,
    ...(out.cachedReported ? { reportedCachedTokens: out.cachedTokens } : {}),
    ...(out.sim
      ? {
          simStop: out.sim.stop,
          simHeld: out.sim.heldTokens,
          ...(out.sim.computedTokens === undefined ? {} : { simComputed: out.sim.computedTokens }),
          ...(out.sim.sequence === undefined ? {} : { simSequence: out.sim.sequence }),
        }
      : {}),
    ...(out.verdict ? { verdict: out.verdict } : {}),
    completionTokens: out.completionTokens,
    ...(out.availableTokens === undefined ? {} : { availableTokens: out.availableTokens }),
    ...(out.capturedTokens === undefined ? {} : { capturedTokens: out.capturedTokens }),
    ...(out.error ? { error: out.error } : {}),
  };
}

/**
 * One sequential-turn client: each turn re-sends the whole conversation plus its reply and a
 * tool result, the reply as the engine returned it (reasoning included, in its own field).
 */
export async function driveConversation(
  ctx: DriveContext,
  plan: AgentPlan,
  turns: number,
  group: number,
  label: string,
  onTurn: (turn: number) => void = () => {},
  /** Model ms the client spends after turn `turn` before sending the next (its tools running). */
  pauseMs: (turn: number) => number = () => 0,
): Promise<Sample[]> {
  const samples: Sample[] = [];
  const replies: Reply[] = [];
  for (let turn = 1; turn <= turns; turn++) {
    const messages: ChatMessage[] = agentMessages(plan, replies, turn);
    const { reply, ...sample } = await send(ctx, chatBody(ctx.model, messages, plan.replyTokens, ctx.tools), { group, index: turn, kind: "turn" });
    samples.push(sample);
    onTurn(turn);
    ctx.progress.status(`${label} turn ${turn}/${turns} · ttft ${fmtS(sample.ttftMs)} · ${sample.replica} ${sample.route}`);
    // A conversation cannot go on without its reply: stop it, the table counts the error.
    if (sample.error) break;
    replies.push(reply);
    const pause = turn < turns ? pauseMs(turn) : 0;
    if (pause > 0) await ctx.until(ctx.now() + pause);
  }
  return samples;
}

/** Distinct cold one-shots sent at once; wall time from the first send to the last byte. */
export async function driveBurst(ctx: DriveContext, spec: BurstSpec, salt: string, group: number): Promise<{ samples: Sample[]; wall: BurstWall }> {
  const start = ctx.now();
  const samples = await Promise.all(
    burstMessages(spec, salt, group).map(async (messages, i) => {
      const { reply: _reply, ...sample } = await send(ctx, chatBody(ctx.model, messages, spec.replyTokens), { group, index: i, kind: "burst" });
      return sample;
    }),
  );
  return { samples, wall: { group, wallMs: ctx.now() - start, size: spec.size } };
}

/** One line per finished arm: its key figure with the sample size, and what the arm took. */
export function armLine(workload: WorkloadName, arm: ArmResult, replicas: readonly string[], modelTime = true, setup?: string): string {
  const s = summarizeArm(workload, arm, replicas);
  const key = keyFigure(workload, s);
  const hit = s.trace ? ` · hit ${Number.isFinite(s.trace.hitRate) ? `${(s.trace.hitRate * 100).toFixed(1)} %` : "-"}` : "";
  const figure = key ? `${key.what} ${fmt(key.value, key.unit)} (n=${key.n})${hit}` : "no samples";
  // On real replicas no time scale applies: their seconds are seconds.
  return `${setup ? `${setup} · ` : ""}${workload} · ${arm.arm}: ${figure}${s.errors ? ` · ${s.errors} errors` : ""} · ${fmtS(arm.wallMs)}${modelTime ? " model" : ""}`;
}

function fmtS(ms: number): string {
  return Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : "-";
}

