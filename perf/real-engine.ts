/**
 * `npm run perf:real-engine`: the router in front of a real engine, measured — what the
 * README's "Checked against a real engine" section quotes. Two llama.cpp `llama-server`
 * replicas (the pair `npm run engine:llamacpp` makes: a tiny random-weight model with the
 * real Qwen2 tokenizer; one thread each, 2 slots of 32,768 tokens) on this machine, and an
 * in-process llmroute per arm:
 *
 * - probe: cold and warm TTFT of a ~3,000-token prompt straight to one replica (3 pairs);
 * - agent: 4 conversations × 6 turns growing to ~6k tokens, all four at once (one per
 *   slot), through round-robin and hybrid: warm-turn TTFT, what the engine delivered of
 *   the previous turn's prompt, and whether each warm turn stayed on its owner;
 * - shared: 6 documents of ~2,000 tokens, 4 questions each in a shuffled order, through
 *   round-robin and hybrid: the hit rate (Σ cached ÷ Σ prompt, the engine's own figures)
 *   against its ceiling (each document's first request must miss).
 *
 * Every arm gets fresh salts, so none measures another's cache; `--runs N` repeats the whole
 * set (default 2). Prints a markdown report with n beside every figure, writes it to
 * perf/results/real-engine-<time>.md and, with --readme, between the README's
 * `<!-- realengine:start -->` / `<!-- realengine:end -->` markers.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseConfig } from "../src/config.ts";
import { memoryLog } from "../src/log.ts";
import { startRouter } from "../src/proxy/server.ts";
import { sendChat, type Outcome } from "../src/bench/client.ts";
import { median, p90 } from "../src/bench/stats.ts";
import { BUILD_COMMAND, locateLlamacppEngine } from "../scripts/_llamacpp-engine.ts";
import { markdownTable, replaceBetween } from "./lib/markdown.ts";

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { runs: { type: "string", default: "2" }, readme: { type: "boolean", default: false } } });
const RUNS = Number(values.runs);

const where = locateLlamacppEngine();
if (!where.server.exists || !where.model.exists) {
  console.error(`perf/real-engine: the engine is missing (${where.server.path}, ${where.model.path}); run \`${BUILD_COMMAND}\` first`);
  process.exit(2);
}

interface Replica {
  url: string;
  proc: ReturnType<typeof Bun.spawn>;
}

async function startReplica(): Promise<Replica> {
  const proc = Bun.spawn(
    [where.server.path, "-m", where.model.path, "--host", "127.0.0.1", "--port", "0", "-t", "1", "-c", "65536", "--parallel", "2", "--metrics", "--slots", "--no-ui", "-a", "tiny"],
    { stdout: "ignore", stderr: "pipe" },
  );
  // llama-server logs the address it bound (tools/server/server.cpp: "listening on"). Its log
  // is read to the end: a pipe left unread fills and stalls the server.
  const decoder = new TextDecoder();
  let text = "";
  const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
  const bound = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return undefined;
      if (text.length < 65_536) text += decoder.decode(value, { stream: true });
      const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(text)?.[1];
      if (url) return url;
    }
  })();
  const url = await bound;
  if (!url) throw new Error(`llama-server did not start:\n${text}`);
  void (async () => {
    while (!(await reader.read()).done);
  })();
  for (;;) {
    const res = await fetch(`${url}/health`).catch(() => undefined);
    if (res?.status === 200) break;
    await Bun.sleep(50);
  }
  return { url, proc };
}

const lines = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${label} line ${i}: replica ${i % 7} holds ${i * 13} tokens of ${label}.`).join("\n");

async function routerFor(replicas: Replica[], policy: string) {
  const toml = `[server]\nlisten = "127.0.0.1:0"\n[routing]\npolicy = "${policy}"\n${replicas.map((r, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${r.url}"\n`).join("")}`;
  return startRouter(parseConfig(toml, "<perf/real-engine>", { env: {} }), { log: memoryLog() });
}

const body = (messages: unknown[], maxTokens: number) => ({ model: "tiny", messages, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, temperature: 0 });

interface AgentTurn {
  turn: number;
  out: Outcome;
  previousPrompt?: number;
  previousReplica?: string;
}

async function agent(url: string, salt: string): Promise<AgentTurn[]> {
  const converse = async (c: number) => {
    const messages: { role: string; content: string }[] = [{ role: "system", content: lines(`agent ${c} ${salt}`, 50) }];
    const turns: AgentTurn[] = [];
    for (let t = 0; t < 6; t++) {
      messages.push({ role: "user", content: lines(`tool result ${c}.${t} ${salt}`, 40) });
      const out = await sendChat(url, body(messages, 8));
      if (out.error) throw new Error(`agent turn failed: ${out.error}`);
      const prev = turns.at(-1);
      turns.push({ turn: t + 1, out, ...(prev ? { previousPrompt: prev.out.promptTokens, previousReplica: prev.out.replica } : {}) });
      messages.push({ role: "assistant", content: out.text });
    }
    return turns;
  };
  return (await Promise.all([0, 1, 2, 3].map(converse))).flat();
}

async function shared(url: string, salt: string): Promise<{ prompt: number; cached: number; ceiling: number; n: number }> {
  const docs = [0, 1, 2, 3, 4, 5].map((d) => lines(`document ${d} ${salt}`, 100));
  // each document 4 times, in an order fixed by the salt's first characters
  const order = docs.flatMap((_, d) => [d, d, d, d]);
  let seed = parseInt(salt.slice(0, 8), 16) || 1;
  for (let i = order.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    const j = seed % (i + 1);
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  let prompt = 0;
  let cached = 0;
  let ceiling = 0;
  const docTokens = new Map<number, number>();
  for (const [i, d] of order.entries()) {
    const out = await sendChat(url, body([{ role: "system", content: docs[d]! }, { role: "user", content: `question ${i} ${salt}: what does line ${i * 3} say?` }], 2));
    if (out.error) throw new Error(`shared request failed: ${out.error}`);
    prompt += out.promptTokens;
    cached += out.cachedTokens;
    // A document's first request computes it; each later one could reuse all of it but the question.
    if (docTokens.has(d)) ceiling += docTokens.get(d)!;
    else docTokens.set(d, out.promptTokens - 30);
  }
  return { prompt, cached, ceiling, n: order.length };
}

async function probe(url: string): Promise<{ cold: number; warm: number; n: number; cached: number }> {
  const p = Bun.spawn([process.execPath, "src/cli.ts", "probe", "--url", url, "--tokens", "3000", "--repeat", "3", "--json"], { stdout: "pipe", stderr: "ignore" });
  const report = JSON.parse(await new Response(p.stdout).text()) as { summary: { coldTtftMs: number; warmTtftMs: number; n: number; cachedFraction?: number }; exit_code: number };
  return { cold: report.summary.coldTtftMs, warm: report.summary.warmTtftMs, n: report.summary.n, cached: report.summary.cachedFraction ?? NaN };
}

const ms = (x: number) => `${Math.round(x).toLocaleString("en-US")} ms`;
const pct = (x: number) => `${Math.round(x * 100)} %`;

const replicas = await Promise.all([startReplica(), startReplica()]);
const version = ((await (await fetch(`${replicas[0]!.url}/props`)).json()) as { build_info?: string }).build_info ?? "?";
const started = new Date();
const sections: string[] = [];
try {
  const probes = [];
  for (let r = 0; r < RUNS; r++) probes.push(await probe(replicas[r % 2]!.url));
  const agentRows: (string | number)[][] = [];
  const sharedRows: (string | number)[][] = [];
  for (let r = 1; r <= RUNS; r++) {
    for (const policy of ["roundrobin", "hybrid"]) {
      const router = await routerFor(replicas, policy);
      try {
        const salt = crypto.randomUUID().replaceAll("-", "");
        const turns = await agent(router.url, salt);
        const warm = turns.filter((t) => t.turn > 1);
        const ttft = warm.map((t) => t.out.ttftMs);
        const delivered = warm.map((t) => t.out.cachedTokens / t.previousPrompt!);
        const owner = warm.filter((t) => t.out.replica === t.previousReplica).length;
        agentRows.push([r, policy, warm.length, ms(median(ttft)), ms(p90(ttft)), pct(median(delivered)), pct(Math.min(...delivered)), `${owner} of ${warm.length}`]);
        const s = await shared(router.url, crypto.randomUUID().replaceAll("-", ""));
        sharedRows.push([r, policy, s.n, pct(s.cached / s.prompt), pct(s.ceiling / s.prompt), pct(s.cached / s.ceiling)]);
      } finally {
        await router.stop();
      }
    }
  }
  const agentMedians = (policy: string) => agentRows.filter((row) => row[1] === policy).map((row) => Number(String(row[3]).replace(/[^\d]/g, "")));
  const ratios = agentMedians("hybrid").map((h, i) => h / agentMedians("roundrobin")[i]!);
  sections.push(
    `Measured by \`npm run perf:real-engine\` on ${started.toISOString().slice(0, 16).replace("T", " ")} UTC: two llama.cpp replicas (${version}, \`-t 1 -c 65536 --parallel 2\`, the tiny random-weight model) on this 2-core machine, ${RUNS} runs, fresh salts per arm.`,
    "",
    "**Probe** (`llmroute probe --url … --tokens 3000 --repeat 3`, straight to one replica):",
    "",
    markdownTable(
      ["run", "n pairs", "cold TTFT p50", "warm TTFT p50", "cached on warm"],
      probes.map((p, i) => [i + 1, p.n, ms(p.cold), ms(p.warm), pct(p.cached)]),
    ),
    "",
    "**Agent**: 4 conversations × 6 turns at once (one per slot), growing to ~6k tokens; warm turns are turns 2–6. Delivered = the engine's cached tokens ÷ the previous turn's prompt.",
    "",
    markdownTable(["run", "policy", "n warm turns", "warm TTFT p50", "p90", "delivered p50", "delivered min", "on the previous turn's replica"], agentRows),
    "",
    `hybrid ÷ round-robin, warm-turn TTFT p50: ${ratios.map((x) => `${x.toFixed(2)}×`).join(", ")} (run by run).`,
    "",
    "**Shared documents**: 6 documents of ~2,000 tokens, 4 questions each, shuffled, one at a time. Hit rate = Σ cached ÷ Σ prompt, from the engine's usage; the ceiling leaves each document's first request a miss.",
    "",
    markdownTable(["run", "policy", "n", "hit rate", "ceiling", "÷ ceiling"], sharedRows),
  );
} finally {
  for (const r of replicas) r.proc.kill();
}
const report = sections.join("\n");
console.log(report);
const file = `perf/results/real-engine-${started.toISOString().slice(0, 16).replace(/[-:]/g, "").replace("T", "T")}.md`;
await Bun.write(file, `# perf/real-engine\n\n${report}\n`);
console.error(`written: ${file}`);
if (values.readme) {
  const readme = "README.md";
  await Bun.write(readme, replaceBetween(readFileSync(readme, "utf8"), "<!-- realengine:start -->", "<!-- realengine:end -->", report));
  console.error(`README.md updated between the realengine markers`);
}
