/**
 * What the prefix index costs in memory, and what reading it costs at full size:
 *
 * - For each size, a fresh process fills a Router's index through the real API — each turn
 *   of a three-turn chat parsed, chained, routed over 8 replicas by the default policy and
 *   committed — then reports its RSS after a full GC, `index.memoryBytes()` and how many
 *   conversations that took. The largest size is the default bound
 *   (routing.index_max_entries), so "conversations the default bound holds" is measured.
 * - At the bound it times a capacity reading (`index.activeWorkingSet(now)`, as the server
 *   does every 2 s), and saves the index as a routing.state_file.
 * - A real `llmroute serve` is started on that state file: its RSS with the full index, and
 *   GET /status and GET /metrics over HTTP (each refreshes the capacity readings first).
 *
 *   npx bun perf/memory.ts [--sizes 100000,1000000,2000000] [--no-router] [--json]
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { quantile } from "../src/bench/stats.ts";
import { parseConfig } from "../src/config.ts";
import { saveState } from "../src/ops/state-file.ts";
import { prefixChains } from "../src/route/chain.ts";
import { createHasher } from "../src/route/hash.ts";
import { createPolicy } from "../src/route/policies/index.ts";
import { PrefixIndex } from "../src/route/prefix.ts";
import { Router, type FleetView } from "../src/route/router.ts";
import { shapeOf } from "../src/route/shape.ts";
import { CONVERSATION_SHAPE, conversationTurns, MODEL } from "./lib/bodies.ts";
import { freePort, rssBytes, startServer, type Server } from "./lib/proc.ts";
import type { MemoryResults, MemorySize } from "./lib/report.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const REPLICAS = 8;

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    sizes: { type: "string" },
    "no-router": { type: "boolean", default: false },
    json: { type: "boolean", default: false },
    // internal: one fill in this (fresh) process
    child: { type: "string" },
    state: { type: "string" },
    "engine-url": { type: "string" },
  },
});

/** One perf engine stands for every replica, each under its own path prefix (one engine listed twice is a config error). */
const replicaUrl = (url: string, i: number) => `${url}/r${i}`;
const replicaToml = (url: string) =>
  Array.from({ length: REPLICAS }, (_, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${replicaUrl(url, i)}"\n`).join("\n");
/** The defaults a user gets: the bound, TTL, window, chunk size and policy come from the config, not from here. */
const config = parseConfig(replicaToml("http://127.0.0.1:9"), "<perf>", { env: {} });

if (values.child) {
  console.log(JSON.stringify(await fill(Number(values.child), values.state, values["engine-url"])));
  process.exit(0);
}

const bound = config.routing.index_max_entries;
const sizes = (values.sizes ?? `100000,1000000,${bound}`).split(",").map(Number);
// Issue 12 sets its RSS limit at 1M entries: the router is restored at that size when it is measured.
const stateSize = sizes.includes(1_000_000) ? 1_000_000 : Math.max(...sizes);
const dir = await mkdtemp(join(tmpdir(), "llmroute-memory-"));
const say = (line: string) => console.error(line);
const servers: Server[] = [];
try {
  const results: MemorySize[] = [];
  let capacity: MemoryResults["capacity"];
  const state = join(dir, "state.bin");
  // The state file names each replica's URL, and a router drops what it holds for a replica
  // whose URL changed: it is saved with the URL the measured router will use.
  const enginePort = await freePort();
  const engineUrl = `http://127.0.0.1:${enginePort}`;
  for (const size of sizes) {
    say(`perf/memory: filling ${size.toLocaleString("en-US")} entries in a fresh process`);
    const args = ["--child", String(size), ...(size === stateSize ? ["--state", state, "--engine-url", engineUrl] : [])];
    const proc = Bun.spawn([process.execPath, import.meta.path, ...args], { stdout: "pipe", stderr: "inherit" });
    const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
    if (code !== 0) throw new Error(`the fill of ${size} entries exited with ${code}`);
    const r = JSON.parse(out) as MemorySize & { capacity?: MemoryResults["capacity"] };
    if (r.capacity) capacity = r.capacity;
    const { capacity: _c, ...size_ } = r;
    results.push(size_);
  }

  let router: MemoryResults["router"];
  if (!values["no-router"]) {
    const engine = await startServer({ name: "engine", cmd: [process.execPath, join(ROOT, "perf/engine.ts"), "--port", String(enginePort)], url: engineUrl, log: join(dir, "engine.log") });
    servers.push(engine);
    const port = await freePort();
    const toml = join(dir, "router.toml");
    await Bun.write(toml, `[server]\nlisten = "127.0.0.1:${port}"\nlog_format = "json"\n\n[routing]\nstate_file = "${state}"\n\n${replicaToml(engine.url)}`);
    say("perf/memory: starting llmroute serve on the saved index");
    const serve = await startServer({ name: "llmroute", cmd: [process.execPath, join(ROOT, "src/cli.ts"), "serve", "--config", toml], url: `http://127.0.0.1:${port}`, log: join(dir, "router.log"), timeoutMs: 60_000 });
    servers.push(serve);
    const get = async (path: string) => {
      const t0 = performance.now();
      const res = await fetch(`${serve.url}${path}`);
      const body = await res.text();
      if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${body.slice(0, 200)}`);
      return { ms: performance.now() - t0, body };
    };
    const first = await get("/status");
    const entries = (JSON.parse(first.body) as { index?: { entries?: number } }).index?.entries ?? NaN;
    const saved = results.find((r) => r.entries >= stateSize)?.entries ?? stateSize;
    if (!(entries >= saved * 0.99)) throw new Error(`the router restored ${entries} of the ${saved} entries saved`);
    const n = 20;
    const status: number[] = [];
    const metrics: number[] = [];
    for (let i = 0; i < n; i++) {
      status.push((await get("/status")).ms);
      metrics.push((await get("/metrics")).ms);
    }
    router = {
      entries,
      rssMB: rssBytes(serve.pid) / 1e6,
      statusMs: quantile(status, 0.5),
      metricsMs: quantile(metrics, 0.5),
      firstStatusMs: first.ms,
      samples: n,
    };
  }

  const result: MemoryResults = {
    conversation: CONVERSATION_SHAPE,
    replicas: REPLICAS,
    bound,
    sizes: results,
    ...(capacity ? { capacity } : {}),
    ...(router ? { router } : {}),
  };
  if (values.json) console.log(JSON.stringify(result));
  else printResult(result);
} finally {
  await Promise.all(servers.map((s) => s.stop()));
  await rm(dir, { recursive: true, force: true });
}

/** Fill an index to `entries` with three-turn chats, measure, and (at the bound) time capacity readings and save it. */
async function fill(entries: number, statePath?: string, engineUrl?: string): Promise<MemorySize & { capacity?: MemoryResults["capacity"] }> {
  const hasher = createHasher();
  const index = new PrefixIndex({ maxEntries: config.routing.index_max_entries, ttlMs: config.routing.index_ttl_ms, windowMs: config.routing.capacity_window_ms });
  const router = new Router({ policy: createPolicy(config.routing.policy), index, hasher, maxInflight: config.routing.max_inflight, cacheAware: config.routing.cache_aware });
  const views: FleetView[] = Array.from({ length: REPLICAS }, (_, i) => ({
    name: `gpu${i}`,
    healthy: true,
    inflight: 0,
    load: 0,
    queuedTokens: 0,
    prefillRate: 4000,
    charsPerToken: 4,
    budgetChars: Infinity,
  }));
  Bun.gc(true);
  const baseRss = process.memoryUsage().rss;
  // One turn per millisecond of clock, ending now: the entries are as fresh as a live router's.
  const turnsGuess = Math.ceil((entries / 6) * 3);
  let now = Date.now() - turnsGuess;
  const t0 = performance.now();
  let conversations = 0;
  while (index.size < entries) {
    for (const messages of conversationTurns(conversations)) {
      // The proxy's path: bytes → JSON → shape → chains → route → commit.
      const text = JSON.stringify({ model: MODEL, stream: true, messages });
      const shape = shapeOf("chat", JSON.parse(text));
      const input = { shape, chains: prefixChains(shape, hasher, config.routing.chunk_chars) };
      const decision = router.route(input, views, now)!;
      router.commit(input, decision, now);
      now++;
    }
    conversations++;
  }
  const fillSeconds = (performance.now() - t0) / 1000;
  Bun.gc(true);
  Bun.gc(true);
  const rss = process.memoryUsage().rss;
  const size: MemorySize = { entries: index.size, conversations, rssMB: rss / 1e6, baseRssMB: baseRss / 1e6, indexBytes: index.memoryBytes(), fillSeconds };
  if (!statePath) return size;

  await saveState(statePath, router, Object.fromEntries(config.replicas.map((r, i) => [r.name, engineUrl ? replicaUrl(engineUrl, i) : r.url])), config.routing.chunk_chars);
  // Capacity readings as the server takes them: every 2 s of clock, each visiting only the entries that left the window.
  const samples: number[] = [];
  for (let i = 0; i < 200; i++) {
    now += 2000;
    const t = performance.now();
    index.activeWorkingSet(now);
    samples.push(performance.now() - t);
  }
  // A changed window (a config reload) makes the next reading walk every entry once.
  index.configure({ ...index.options, windowMs: index.options.windowMs + 1 });
  const t = performance.now();
  index.activeWorkingSet(now);
  const rebuildMs = performance.now() - t;
  return { ...size, capacity: { medianMs: quantile(samples, 0.5), p90Ms: quantile(samples, 0.9), rebuildMs, samples: samples.length } };
}


function printResult(r: MemoryResults): void {
  console.log(`prefix index memory — ${r.conversation}, ${r.replicas} replicas, default policy; a fresh process per size, RSS after a full GC`);
  console.log("entries     conversations  entries/conv  RSS MB  RSS before MB  index arrays MB  bytes/entry (arrays)  RSS growth/entry  fill s");
  for (const s of r.sizes) {
    console.log(
      `${s.entries.toLocaleString("en-US").padEnd(11)} ${s.conversations.toLocaleString("en-US").padStart(13)} ${(s.entries / s.conversations).toFixed(2).padStart(13)} ${s.rssMB.toFixed(0).padStart(7)} ${s.baseRssMB.toFixed(0).padStart(14)} ${(s.indexBytes / 1e6).toFixed(1).padStart(16)} ${(s.indexBytes / s.entries).toFixed(0).padStart(21)} ${(((s.rssMB - s.baseRssMB) * 1e6) / s.entries).toFixed(0).padStart(16)} B ${s.fillSeconds.toFixed(1).padStart(6)}`,
    );
  }
  if (r.capacity) console.log(`capacity reading at ${r.sizes.at(-1)!.entries.toLocaleString("en-US")} entries: median ${r.capacity.medianMs.toFixed(3)} ms, p90 ${r.capacity.p90Ms.toFixed(3)} ms (n = ${r.capacity.samples}); after a window change ${r.capacity.rebuildMs.toFixed(1)} ms`);
  if (r.router) console.log(`llmroute serve with ${r.router.entries.toLocaleString("en-US")} entries restored: RSS ${r.router.rssMB.toFixed(0)} MB; /status median ${r.router.statusMs.toFixed(2)} ms (first ${r.router.firstStatusMs.toFixed(1)} ms), /metrics median ${r.router.metricsMs.toFixed(2)} ms (n = ${r.router.samples})`);
}
