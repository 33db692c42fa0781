/**
 * Calibrates the sim's llama.cpp KV model (src/sim/slots.ts) against the real llama-server:
 * the same request sequences go to (a) the prebuilt llama-server (started here on a free
 * port, `-t 1 --parallel 2 -c 65536`) and (b) `llmroute sim --engine llamacpp` with the
 * same slots and context, under three server configurations (default --cache-ram,
 * --cache-ram 0, --no-cache-prompt), and every response's cached tokens are printed side
 * by side.
 *
 * The two tokenizers differ (the real one is Qwen2's BPE, the sim's a fixed number of
 * characters per token), so the same text has different token counts: compare the
 * cached/prompt RATIOS. Prompts are sized in real tokens with the real server's /tokenize,
 * and the sim's characters per token are set to the real tokenizer's average on this text,
 * so both also see similar counts (what matters for --batch-size steps and thresholds).
 *
 * Within a burst, which request reaches the real server first is a race between its HTTP
 * threads; the burst tables list each burst's requests from least to most cached.
 *
 * Sequences (each on fresh text, one after the other on the same server):
 *   (i)   one conversation, 6 turns, growing;
 *   (ii)  four conversations interleaved on the 2 slots, 4 turns each;
 *   (iii) six documents of --doc-tokens (11,800) tokens, visited, then all revisited;
 *   (iv)  bursts of 2, 3 and 4 concurrent requests sharing a prefix.
 *
 *   npx bun perf/calibrate-llamacpp.ts [--doc-tokens 11800] [--time-scale 0.1]
 *     [--prefill-tps 1150] [--cache-ram-gbps 0.45] [--out FILE]
 *
 * The engine: $LLMROUTE_LLAMA_SERVER and $LLMROUTE_LLAMA_MODEL, else ../shared/engines
 * beside the checkout (see its README). A few minutes on 2 cores.
 */
import { existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { SlotEngine, startSim, type SimServer } from "../src/sim/index.ts";
import { freePort, startServer, tail, type Server } from "./lib/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    "doc-tokens": { type: "string", default: "11800" },
    "time-scale": { type: "string", default: "0.1" },
    "prefill-tps": { type: "string", default: "1150" },
    // Restores of 11.9k-token states (48.7 MB) took 101–136 ms in the real server's log (n = 4).
    "cache-ram-gbps": { type: "string", default: "0.45" },
    out: { type: "string" },
  },
});
const DOC_TOKENS = Number(values["doc-tokens"]);
const TIME_SCALE = Number(values["time-scale"]);
const PREFILL_TPS = Number(values["prefill-tps"]);
const CACHE_RAM_GBPS = Number(values["cache-ram-gbps"]);
const SLOTS = 2;
const N_CTX = 65_536;
/** The tiny model's KV per token: 4 layers × (K + V) × 256 × 2 bytes (f16). */
const TINY_BYTES_PER_TOKEN = 4 * 2 * 256 * 2;

const repo = resolve(import.meta.dir, "..");
function enginePath(env: string, file: string): string {
  const given = process.env[env];
  if (given) return given;
  const found = [join(repo, "..", "shared", "engines", file), join(repo, "..", "..", "shared", "engines", file)].find((p) => existsSync(p));
  if (!found) throw new Error(`${file} not found: set ${env} (see ../shared/engines/README.md)`);
  return found;
}
const SERVER = enginePath("LLMROUTE_LLAMA_SERVER", "llama-server");
const MODEL = enginePath("LLMROUTE_LLAMA_MODEL", "tiny-qwen2tok-L4-E256.gguf");

interface Config {
  name: string;
  flags: string[];
  sim: { cacheRam: number; prefixCache: boolean };
  docTokens: number;
}
const CONFIGS: Config[] = [
  { name: "default --cache-ram (8192 MiB)", flags: [], sim: { cacheRam: 8192, prefixCache: true }, docTokens: DOC_TOKENS },
  { name: "--cache-ram 0", flags: ["--cache-ram", "0"], sim: { cacheRam: 0, prefixCache: true }, docTokens: DOC_TOKENS },
  // Nothing is reused whatever the size: smaller documents keep the run short.
  { name: "--no-cache-prompt", flags: ["--no-cache-prompt"], sim: { cacheRam: 8192, prefixCache: false }, docTokens: Math.min(DOC_TOKENS, 2_000) },
];

// --- text ----------------------------------------------------------------------------------

const WORDS =
  "river stone garden window silver morning letter market engine winter candle harbor meadow pencil thunder basket mirror forest button castle ladder planet orange copper violin shadow bridge canvas desert rocket velvet marble anchor falcon lantern pepper saddle timber walnut".split(
    " ",
  );

/** Deterministic prose: `words` words drawn by a seeded generator, a full stop every 12. */
function prose(seed: string, words: number): string {
  let x = Bun.hash.crc32(seed) >>> 0 || 1;
  const out: string[] = [];
  for (let i = 0; i < words; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(WORDS[x % WORDS.length]! + (i % 12 === 11 ? "." : ""));
  }
  return out.join(" ");
}

/** Real tokens per word of `prose`, and characters per real token, measured once on the real server. */
let tokensPerWord = 1;
let charsPerToken = 4;
async function measureTokenizer(url: string): Promise<void> {
  const sample = prose("tokenizer-sample", 2_000);
  const tokens = ((await post(url, "/tokenize", { content: sample })).tokens as number[]).length;
  tokensPerWord = tokens / 2_000;
  charsPerToken = Math.max(1, Math.round(sample.length / tokens));
}

/** About `tokens` real tokens of prose. */
function sized(seed: string, tokens: number): string {
  return prose(seed, Math.max(1, Math.round(tokens / tokensPerWord)));
}

// --- HTTP ----------------------------------------------------------------------------------

async function post(url: string, path: string, body: unknown): Promise<Record<string, any>> {
  // A server that stops answering (killed from outside, say) ends the run instead of hanging it.
  const res = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(600_000),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${url}${path}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

type Msg = { role: "system" | "user" | "assistant"; content: string };
interface Reply {
  promptTokens: number;
  cachedTokens: number;
  text: string;
}

async function chat(url: string, messages: Msg[], maxTokens: number): Promise<Reply> {
  const r = await post(url, "/v1/chat/completions", { model: "tiny", messages, max_tokens: maxTokens, temperature: 0 });
  return {
    promptTokens: r.usage.prompt_tokens,
    cachedTokens: r.usage.prompt_tokens_details?.cached_tokens ?? 0,
    text: r.choices[0].message.content ?? "",
  };
}

// --- sequences -----------------------------------------------------------------------------

interface Row {
  sequence: string;
  label: string;
  prompt: number;
  cached: number;
}

type Sequence = (url: string, salt: string, config: Config) => Promise<Row[]>;

const SEQUENCES: [string, Sequence][] = [
  [
    "(i) one conversation, 6 turns",
    async (url, salt) => {
      const rows: Row[] = [];
      const messages: Msg[] = [{ role: "system", content: `${salt} agent. ${sized(`${salt}-sys`, 1_500)}` }];
      for (let turn = 1; turn <= 6; turn++) {
        messages.push({ role: "user", content: sized(`${salt}-u${turn}`, 300) });
        const r = await chat(url, messages, 4);
        rows.push({ sequence: "i", label: `turn ${turn}`, prompt: r.promptTokens, cached: r.cachedTokens });
        messages.push({ role: "assistant", content: r.text });
      }
      return rows;
    },
  ],
  [
    "(ii) four conversations interleaved on 2 slots",
    async (url, salt) => {
      const rows: Row[] = [];
      const convs: Msg[][] = ["A", "B", "C", "D"].map((c) => [{ role: "system", content: `${salt} conversation ${c}. ${sized(`${salt}-${c}`, 800)}` }]);
      for (let turn = 1; turn <= 4; turn++) {
        for (const [i, messages] of convs.entries()) {
          messages.push({ role: "user", content: sized(`${salt}-${i}-${turn}`, 200) });
          const r = await chat(url, messages, 4);
          rows.push({ sequence: "ii", label: `${"ABCD"[i]}${turn}`, prompt: r.promptTokens, cached: r.cachedTokens });
          messages.push({ role: "assistant", content: r.text });
        }
      }
      return rows;
    },
  ],
  [
    "(iii) six documents, visited then revisited",
    async (url, salt, config) => {
      const rows: Row[] = [];
      const docs = Array.from({ length: 6 }, (_, d) => `${salt} document ${d + 1}. ${sized(`${salt}-doc${d}`, config.docTokens)}`);
      for (const pass of ["visit", "revisit"]) {
        for (const [d, doc] of docs.entries()) {
          const r = await chat(url, [{ role: "system", content: doc }, { role: "user", content: `Summarise document ${d + 1}.` }], 1);
          rows.push({ sequence: "iii", label: `${pass} ${d + 1}`, prompt: r.promptTokens, cached: r.cachedTokens });
        }
      }
      return rows;
    },
  ],
  [
    "(iv) bursts of 2, 3, 4 sharing a prefix",
    async (url, salt) => {
      const rows: Row[] = [];
      for (const size of [2, 3, 4]) {
        const prefix = `${salt} burst ${size}. ${sized(`${salt}-burst${size}`, 1_500)}`;
        const replies = await Promise.all(
          Array.from({ length: size }, (_, k) =>
            chat(url, [{ role: "system", content: prefix }, { role: "user", content: sized(`${salt}-b${size}-${k}`, 100) }], 1),
          ),
        );
        replies.sort((x, y) => x.cachedTokens / x.promptTokens - y.cachedTokens / y.promptTokens);
        for (const [k, r] of replies.entries()) rows.push({ sequence: "iv", label: `burst ${size}, ${k + 1}${["st", "nd", "rd", "th"][k]} least cached`, prompt: r.promptTokens, cached: r.cachedTokens });
      }
      return rows;
    },
  ],
];

// --- the two engines ---------------------------------------------------------------------

async function startReal(config: Config, dir: string, log: string): Promise<Server> {
  const port = await freePort();
  // Run through neutrally named links, so a broad `pkill llama-server` by someone else on a
  // shared machine does not end this run (it did, twice, before this).
  const engine = join(dir, "engine");
  const model = join(dir, "model.gguf");
  if (!existsSync(engine)) symlinkSync(SERVER, engine);
  if (!existsSync(model)) symlinkSync(MODEL, model);
  return startServer({
    name: "llama-server",
    cmd: [engine, "-m", model, "--host", "127.0.0.1", "--port", String(port), "-t", "1", "-c", String(N_CTX), "--parallel", String(SLOTS), "--metrics", "--slots", "--no-webui", "-a", "tiny", ...config.flags],
    url: `http://127.0.0.1:${port}`,
    log,
    timeoutMs: 120_000,
  });
}

function startSimFor(config: Config): Promise<SimServer> {
  return startSim({
    port: 0,
    name: "sim-llamacpp",
    model: "tiny",
    engine: "llamacpp",
    parallel: SLOTS,
    kvTokens: N_CTX,
    cacheRam: config.sim.cacheRam,
    cacheRamBytesPerToken: TINY_BYTES_PER_TOKEN,
    cacheRamGbps: CACHE_RAM_GBPS,
    charsPerToken,
    prefixCache: config.sim.prefixCache,
    prefillTps: PREFILL_TPS,
    cachedTokenCost: 0,
    decodeTps: 100,
    timeScale: TIME_SCALE,
  });
}

async function runAll(url: string, config: Config, salt: string): Promise<Row[][]> {
  const out: Row[][] = [];
  for (const [, sequence] of SEQUENCES) out.push(await sequence(url, salt, config));
  return out;
}

// --- report --------------------------------------------------------------------------------

/** A run- and configuration-unique word of letters (digits would cost the real tokenizer one token each). */
const RUN = Date.now();
function salt(config: number): string {
  let n = RUN * 8 + config;
  let word = "";
  while (n > 0) {
    word += String.fromCharCode(97 + (n % 26));
    n = Math.floor(n / 26);
  }
  return `Session ${word}:`;
}

const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
const ratio = (r: Row) => (r.prompt === 0 ? 0 : r.cached / r.prompt);

async function main(): Promise<void> {
  const started = performance.now();
  const lines: string[] = [];
  const say = (line = "") => {
    lines.push(line);
    process.stdout.write(`${line}\n`);
  };
  const logDir = join(repo, "perf", "results");
  // The servers' logs (which slot each task got, the prompt cache's saves and loads) stay out of the repository.
  const serverLogs = mkdtempSync(join(tmpdir(), "calibrate-llamacpp-"));
  const stamp = new Date().toISOString().slice(0, 16).replace(/[-:]/g, "");
  const summary: string[] = [];
  say(`# llama.cpp KV model: real llama-server vs \`llmroute sim --engine llamacpp\``);
  say();
  say(`llama-server ${SERVER} (-t 1 -c ${N_CTX} --parallel ${SLOTS}), model ${MODEL}; sim: ${SLOTS} slots, kv_tokens ${N_CTX}, ${TINY_BYTES_PER_TOKEN} bytes/token in the RAM cache copied at ${CACHE_RAM_GBPS} GB/s, prefill ${PREFILL_TPS} tok/s, time scale ${TIME_SCALE}.`);
  say(`Cached/prompt ratios: the tokenizers differ (Qwen2 BPE vs a fixed number of characters per token, set to the real one's average on this text). Run ${new Date().toISOString()}.`);
  for (const [c, config] of CONFIGS.entries()) {
    const log = join(serverLogs, `server${c}.log`);
    const real = await startReal(config, serverLogs, log);
    let realRows: Row[][];
    try {
      if (c === 0) await measureTokenizer(real.url);
      realRows = await runAll(real.url, config, salt(c));
      const slots = await (await fetch(`${real.url}/slots`)).json();
      say();
      say(`## ${config.name}`);
      say();
      say(`real /slots at the end: ${JSON.stringify((slots as { id: number; n_prompt_tokens?: number }[]).map((s) => [s.id, s.n_prompt_tokens ?? 0]))} (id, tokens held)`);
    } catch (error) {
      process.stderr.write(`${tail(log, 30)}\n`);
      throw error;
    } finally {
      await real.stop();
    }
    const sim = await startSimFor(config);
    let simRows: Row[][];
    let simState: unknown;
    try {
      simRows = await runAll(sim.url, config, salt(c));
      const engine = sim.engine;
      if (!(engine instanceof SlotEngine)) throw new Error("calibrate: the llamacpp sim is not running on the slot engine");
      simState = { slots: engine.slots().map((s) => [s.id, s.cached_tokens]), ram: engine.promptCache() };
    } finally {
      await sim.stop();
    }
    const ram = (simState as { ram: { entries: number; tokens: number } }).ram;
    say(`sim slots at the end: ${JSON.stringify((simState as { slots: unknown }).slots)}; sim RAM cache: ${ram.entries} entries, ${ram.tokens} tokens`);
    for (const [s, [title]] of SEQUENCES.entries()) {
      const a = realRows[s]!;
      const b = simRows[s]!;
      say();
      say(`### ${title}`);
      say();
      say("| request | real cached / prompt | real | sim cached / prompt | sim | sim − real |");
      say("| --- | --- | --- | --- | --- | --- |");
      for (const [i, r] of a.entries()) {
        const m = b[i]!;
        say(`| ${r.label} | ${r.cached} / ${r.prompt} | ${pct(ratio(r))} | ${m.cached} / ${m.prompt} | ${pct(ratio(m))} | ${((ratio(m) - ratio(r)) * 100).toFixed(1)} pt |`);
      }
      const sum = (rows: Row[], k: "cached" | "prompt") => rows.reduce((t, r) => t + r[k], 0);
      const realAll = sum(a, "cached") / sum(a, "prompt");
      const simAll = sum(b, "cached") / sum(b, "prompt");
      const worst = Math.max(...a.map((r, i) => Math.abs(ratio(b[i]!) - ratio(r))));
      say();
      say(`Σcached/Σprompt: real ${pct(realAll)}, sim ${pct(simAll)}; largest per-request difference ${(worst * 100).toFixed(1)} points; n = ${a.length}.`);
      summary.push(`| ${config.name} | ${title} | ${a.length} | ${pct(realAll)} | ${pct(simAll)} | ${(worst * 100).toFixed(1)} pt |`);
    }
  }
  say();
  say("## Summary");
  say();
  say("| configuration | sequence | n | real Σcached/Σprompt | sim | largest per-request difference |");
  say("| --- | --- | --- | --- | --- | --- |");
  for (const line of summary) say(line);
  say();
  say(`Real tokens per word of the prose: ${tokensPerWord.toFixed(3)}; the sim's characters per token: ${charsPerToken}. Wall time ${((performance.now() - started) / 1000).toFixed(0)} s.`);
  const out = values.out ?? join(logDir, `calibrate-llamacpp-${stamp}.md`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${lines.join("\n")}\n`);
  process.stderr.write(`written to ${out}; llama-server logs in ${serverLogs}\n`);
}

await main();
