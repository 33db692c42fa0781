/**
 * `llmroute probe`: does the prefix cache really work? Sends the same long salted prompt
 * twice to an idle replica (cold, then warm with a new tail) and judges by TTFT and the
 * engine's own cached-token count; `--via` checks a running router pins a conversation.
 * Exit 0 cache works / pinned, 1 no cache effect / not pinned, 2 could not probe.
 */
import { defineCommand } from "citty";
import { shownUrl } from "../_shown-url.ts";
import { loadConfigFile, type ReplicaConfig } from "../config.ts";
import { LlmrouteError } from "../errors.ts";
import { DEFAULT_TIMEOUT_S, DEFAULT_TOKENS, DEFAULT_TURNS, parseProbeArgs, type ProbeOptions } from "./args.ts";
import { ProbeError, type Target } from "./client.ts";
import { createProgress } from "./progress.ts";
import { renderEngine, renderVia } from "./render.ts";
import { ui } from "../ui.ts";
import { probeEngine, probeVia, type EngineReport, type ProbeIO, type ViaReport } from "./run.ts";

export interface ProbeEnv {
  io: ProbeIO;
  stdout: (text: string) => void;
}

interface Failed {
  mode: "error";
  target: { label: string; url: string };
  error: string;
  verdict: { code: 2; summary: string };
}

type Outcome = EngineReport | ViaReport | Failed;

const codeOf = (o: Outcome) => o.verdict.code;

async function attempt(target: Target, run: () => Promise<EngineReport | ViaReport>): Promise<Outcome> {
  try {
    return await run();
  } catch (error) {
    if (!(error instanceof ProbeError)) throw error;
    // The client's errors start with the target's name, for when they travel alone; here the
    // report (its header, the "all" line, the reason) names the target already.
    const message = error.message.startsWith(`${target.label}: `) ? error.message.slice(target.label.length + 2) : error.message;
    return { mode: "error", target: { label: target.label, url: target.url }, error: message, verdict: { code: 2, summary: `could not probe: ${message}` } };
  }
}

function render(o: Outcome): string {
  if (o.mode === "engine") return renderEngine(o);
  if (o.mode === "via") return renderVia(o);
  return `llmroute probe  ${o.target.label === o.target.url ? o.target.url : `${o.target.label} ${o.target.url}`}\nverdict  2: could not probe: ${o.error}`;
}

export interface ProbeResult {
  exitCode: number;
  /** One line for stderr when exitCode is not 0: the verdict or why the probe could not run. */
  reason: string;
}

/** Run a probe with parsed options. All I/O comes through `env`; results go to `env.stdout`. */
export async function runProbe(options: ProbeOptions, env: ProbeEnv): Promise<ProbeResult> {
  const { io } = env;
  const engineOptions = (replica?: ReplicaConfig) => ({
    ...(options.model === undefined ? {} : { model: options.model }),
    tokens: options.tokens,
    repeat: options.repeat,
    timeoutMs: options.timeoutMs,
    metricsPath: options.metricsPath ?? (replica?.metrics || "/metrics"),
  });
  const key = (fallback?: string) => options.apiKey ?? fallback;
  const withKey = (t: Omit<Target, "apiKey">, apiKey?: string): Target => (apiKey === undefined ? t : { ...t, apiKey });

  let outcomes: Outcome[];
  const mode = options.mode;
  if (mode.kind === "url") {
    const target = withKey({ label: mode.url, url: mode.url }, key());
    outcomes = [await attempt(target, () => probeEngine(target, engineOptions(), io))];
  } else if (mode.kind === "via") {
    const target = withKey({ label: mode.url, url: mode.url }, key());
    const via = { ...(options.model === undefined ? {} : { model: options.model }), tokens: options.tokens, turns: options.turns, timeoutMs: options.timeoutMs };
    outcomes = [await attempt(target, () => probeVia(target, via, io))];
  } else {
    const config = await loadConfigFile(options.config);
    let replicas = config.replicas;
    if (mode.kind === "replica") {
      const found = replicas.find((r) => r.name === mode.name);
      if (!found) {
        throw new LlmrouteError("usage", `probe: no replica named ${JSON.stringify(mode.name)} in ${config.file}; known: ${replicas.map((r) => r.name).join(", ")}`);
      }
      replicas = [found];
    }
    outcomes = [];
    for (const replica of replicas) {
      if (replicas.length > 1) io.progress.note(`--- ${replica.name} ${shownUrl(replica.url)}`);
      const target = withKey({ label: replica.name, url: replica.url }, key(replica.api_key));
      const model = options.model ?? (replica.models.length > 0 ? replica.models[0] : undefined);
      const opts = { ...engineOptions(replica), ...(model === undefined ? {} : { model }) };
      outcomes.push(await attempt(target, () => probeEngine(target, opts, io)));
    }
  }

  const exitCode = Math.max(...outcomes.map(codeOf));
  if (options.json) {
    const doc = mode.kind === "all" ? { mode: "all", reports: outcomes, exit_code: exitCode } : { ...outcomes[0]!, exit_code: exitCode };
    env.stdout(`${shownUrl(JSON.stringify(doc, null, 2))}\n`);
  } else {
    env.stdout(`${shownUrl(outcomes.map(render).join(`\n\n${"=".repeat(72)}\n\n`))}\n`);
    if (outcomes.length > 1) {
      env.stdout(`\nall: exit ${exitCode} (worst of ${outcomes.map((o) => `${o.target.label} ${codeOf(o)}`).join(", ")}; n=${outcomes.length} replicas)\n`);
    }
  }
  const worst = outcomes.filter((o) => codeOf(o) === exitCode);
  // A replica is named (a URL is in the message already).
  const reason = worst.map((o) => (outcomes.length > 1 || mode.kind === "replica" ? `${o.target.label}: ${o.verdict.summary}` : o.verdict.summary)).join("; ");
  return { exitCode, reason: shownUrl(reason) };
}

export default defineCommand({
  meta: {
    name: "probe",
    description: "Does the prefix cache really work? Cold vs warm TTFT of a salted prompt (exit 0 works, 1 no effect, 2 could not probe)",
  },
  args: {
    url: { type: "string", description: "Probe one engine at this base URL (http://host:8000)" },
    replica: { type: "string", description: "Probe this replica from --config (its URL and api_key)" },
    all: { type: "boolean", description: "Probe every replica in --config in turn; exit with the worst code" },
    via: { type: "string", description: "Probe a running llmroute: a conversation must stay on one replica and turn warm" },
    config: { type: "string", alias: "c", description: "Config file for --replica/--all", default: "router.toml" },
    model: { type: "string", description: "Model to use (default: the first from /v1/models)" },
    tokens: { type: "string", description: `Shared prefix size in tokens (default ${DEFAULT_TOKENS})` },
    repeat: { type: "string", description: "Cold/warm pairs, each with a fresh salt; prints each and the median (default 1)" },
    turns: { type: "string", description: `--via: turns per conversation (default ${DEFAULT_TURNS})` },
    timeout: { type: "string", description: `Seconds one request may take (default ${DEFAULT_TIMEOUT_S})` },
    "metrics-path": { type: "string", description: "Engine metrics path (default: the replica's `metrics`, else /metrics)" },
    "api-key": { type: "string", description: "Bearer key for --url/--via, or \"env:NAME\" to read it from the environment (--via default: env LLMROUTE_API_KEY)" },
    json: { type: "boolean", description: "Print one JSON document on stdout (progress stays on stderr)" },
  },
  async run({ args }) {
    const options = parseProbeArgs(args, process.env);
    const started = performance.now();
    const progress = createProgress({ now: () => performance.now() - started });
    let result: ProbeResult;
    try {
      result = await runProbe(options, {
        io: { fetch: (input, init) => fetch(input, init), now: () => performance.now(), random: Math.random, date: () => new Date(), progress },
        stdout: (text) => process.stdout.write(text),
      });
    } finally {
      progress.close();
    }
    // The reason for a non-zero exit goes to stderr too, so it is seen when stdout is a file
    // or a JSON parser: "no cache effect" is the probe's answer (fail), "could not probe" an error.
    if (result.exitCode === 1) ui.fail(`llmroute probe: ${result.reason}`);
    else if (result.exitCode !== 0) ui.error(`llmroute probe: ${result.reason}`);
    return result.exitCode;
  },
});
