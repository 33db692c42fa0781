/**
 * Proxy overhead, side by side in one run and with one client: the same requests
 * to a zero-think engine sent direct, through nginx, HAProxy, a Bun pass-through (the floor
 * for a Bun router that reads the body) and `llmroute serve` (default policy) — at several
 * concurrencies, for small and ~339 KB bodies; then streamed (the gaps a client sees
 * between chunks); then the index's memory and the routing decision's cost (perf/memory.ts,
 * perf/decision.ts). Prints medians of interleaved runs, the ratios, and every target of
 * the router's targets with its verdict, and writes it all to perf/results/overhead-<date>.md (+ .json).
 *
 *   npx bun perf/overhead.ts [--runs 3] [--seconds 3] [--concurrency 1,16,64,256]
 *       [--arms direct,nginx,haproxy,passthrough,llmroute] [--skip streams,memory,decision]
 *       [--no-pin] [--readme]   (--readme: the report also replaces the tables between
 *       perf/README.md's perf:begin/perf:end markers)
 *
 * Prerequisites: wrk (the client), and for their columns nginx and haproxy (Debian:
 * `apt-get install wrk nginx-light haproxy`); a missing proxy is reported and skipped.
 *
 * Every arm is a process of its own, llmroute included (`llmroute serve`, as deployed): the
 * comparison with nginx and HAProxy is only fair process to process, and only a separate
 * process's CPU can be read from /proc without the client's mixed in.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { agentChat, smallChat } from "./lib/bodies.ts";
import { clockTicks, microsPerRequest, parseCpuTotals, readProcStats, treeTicks } from "./lib/cpu.ts";
import { readLoadavg, readMachine, toolVersion } from "./lib/machine.ts";
import { replaceBetween } from "./lib/markdown.ts";
import { canPin, cpuLayout, freePort, rssBytes, run, startServer, which, type Server } from "./lib/proc.ts";
import { ARM_LABELS, renderReport, type DecisionResults, type MemoryResults, type OverheadResults } from "./lib/report.ts";
import { rotate, summarizeCells, summarizeStreamCells, summarizeStreams, type Sample, type StreamSample, type StreamTrace } from "./lib/summarize.ts";
import { parseWrk, wrkArgs, wrkScript } from "./lib/wrk.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const ALL_ARMS = ["direct", "nginx", "haproxy", "passthrough", "llmroute"];

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    runs: { type: "string", default: "3" },
    seconds: { type: "string", default: "3" },
    concurrency: { type: "string", default: "1,16,64,256" },
    arms: { type: "string", default: ALL_ARMS.join(",") },
    bodies: { type: "string", default: "small,large" },
    "large-bytes": { type: "string", default: "339000" },
    skip: { type: "string", default: "" },
    "no-pin": { type: "boolean", default: false },
    streams: { type: "string", default: "48" },
    "stream-concurrency": { type: "string", default: "16" },
    chunks: { type: "string", default: "40" },
    "gap-ms": { type: "string", default: "5" },
    out: { type: "string", default: join(ROOT, "perf/results") },
    readme: { type: "boolean", default: false },
  },
});
const RUNS = Number(values.runs);
const SECONDS = Number(values.seconds);
const CONCURRENCY = values.concurrency.split(",").map(Number);
const SKIP = new Set(values.skip.split(",").filter(Boolean));
const CHUNKS = Number(values.chunks);
const GAP_MS = Number(values["gap-ms"]);
const say = (line: string) => console.error(line);

const wrk = which("wrk");
if (!wrk) {
  say("perf/overhead: wrk is the client and is not installed: `apt-get install wrk` (Debian/Ubuntu), `brew install wrk` (macOS)");
  process.exit(2);
}

const machine = readMachine();
const hz = clockTicks();
const pinning = cpuLayout(machine.cores, !values["no-pin"] && canPin());
say(`perf/overhead: ${machine.cpu}, ${machine.cores} cores, load ${machine.load.join(" ")}; ${pinning ? `proxy on CPU ${pinning.proxy}, client + engine on CPU ${pinning.load}` : "not pinned"}`);
if (machine.load[0] > machine.cores * 0.5) say(`perf/overhead: the machine is busy (load ${machine.load[0]} on ${machine.cores} cores): figures will be noisy; read ratios`);

// This process (the streams' client) runs with the client and the engine, off the proxy's core.
if (pinning) Bun.spawnSync(["taskset", "-a", "-p", "-c", pinning.load, String(process.pid)], { stdout: "ignore", stderr: "ignore" });

const dir = await mkdtemp(join(tmpdir(), "llmroute-perf-"));
const servers: Server[] = [];
const cleanup = async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await rm(dir, { recursive: true, force: true });
};
process.on("SIGINT", () => void cleanup().then(() => process.exit(130)));

try {
  // --- bodies ---------------------------------------------------------------------------
  const LARGE = Number(values["large-bytes"]);
  const bodyKinds = values.bodies.split(",");
  const bodies: OverheadResults["bodies"] = [];
  const scripts = new Map<string, string>();
  for (const kind of bodyKinds) {
    const made = kind === "small" ? Array.from({ length: 64 }, (_, i) => smallChat(i)) : Array.from({ length: 8 }, (_, i) => agentChat(i, LARGE));
    const files = await Promise.all(made.map(async (b, i) => {
      const f = join(dir, `${kind}-${i}.json`);
      await Bun.write(f, JSON.stringify(b));
      return f;
    }));
    const bytes = Math.round(made.reduce((s, b) => s + JSON.stringify(b).length, 0) / made.length);
    bodies.push({ id: kind, label: kind === "small" ? `small (${(bytes / 1000).toFixed(1)} KB)` : `${Math.round(bytes / 1000)} KB`, bytes });
    const script = join(dir, `${kind}.lua`);
    await Bun.write(script, wrkScript(files, "/v1/chat/completions"));
    scripts.set(kind, script);
  }

  // --- the engine and the arms ------------------------------------------------------------
  const log = (name: string) => join(dir, `${name}.log`);
  const enginePort = await freePort();
  const engine = await startServer({
    name: "engine",
    cmd: [process.execPath, join(ROOT, "perf/engine.ts"), "--port", String(enginePort), "--chunks", String(CHUNKS), "--gap-ms", String(GAP_MS)],
    url: `http://127.0.0.1:${enginePort}`,
    log: log("engine"),
    cpus: pinning?.load,
  });
  servers.push(engine);
  const engineHost = `127.0.0.1:${enginePort}`;

  /** Each arm that is a server: the executable (and the package that has it), its config file, its command. */
  const specs: Record<string, { tool?: { name: string; install: string }; conf?: (port: number) => [string, string]; cmd: (bin: string, conf: string, port: number) => string[]; version?: (bin: string) => string | undefined }> = {
    passthrough: { cmd: (bun, _, port) => [bun, join(ROOT, "perf/passthrough.ts"), engine.url, String(port)] },
    llmroute: {
      conf: (port) => ["router.toml", `[server]\nlisten = "127.0.0.1:${port}"\nlog_format = "json"\n\n[[replica]]\nname = "engine"\nurl = "${engine.url}"\n`],
      cmd: (bun, conf) => [bun, join(ROOT, "src/cli.ts"), "serve", "--config", conf],
    },
    nginx: {
      tool: { name: "nginx", install: "apt-get install nginx-light" },
      conf: (port) => ["nginx.conf", nginxConf(port, engineHost, dir)],
      cmd: (bin, conf) => [bin, "-c", conf, "-e", log("nginx-error")],
      version: (bin) => toolVersion([bin, "-v"])?.replace(/^nginx version: /, ""),
    },
    haproxy: {
      tool: { name: "haproxy", install: "apt-get install haproxy" },
      conf: (port) => ["haproxy.cfg", haproxyConf(port, engineHost)],
      cmd: (bin, conf) => [bin, "-f", conf, "-db"],
      version: (bin) => toolVersion([bin, "-v"])?.match(/version (\S+)/)?.[1],
    },
  };
  const arms: { id: string; url: string; server?: Server; version?: string }[] = [];
  const missing: OverheadResults["missing"] = [];
  for (const id of values.arms.split(",")) {
    if (id === "direct") {
      arms.push({ id, url: engine.url });
      continue;
    }
    const spec = specs[id];
    const bin = spec?.tool ? which(spec.tool.name) : process.execPath;
    if (!spec || !bin) {
      missing.push({ id, why: spec ? `${spec.tool!.name} not installed: \`${spec.tool!.install}\`` : `unknown arm (known: ${ALL_ARMS.join(", ")})` });
      continue;
    }
    try {
      const port = await freePort();
      let conf = "";
      if (spec.conf) {
        const [name, text] = spec.conf(port);
        await Bun.write((conf = join(dir, name)), text);
      }
      const server = await startServer({ name: id, cmd: spec.cmd(bin, conf, port), url: `http://127.0.0.1:${port}`, log: log(id), cpus: pinning?.proxy });
      servers.push(server);
      const version = spec.version?.(bin);
      arms.push({ id, url: server.url, server, ...(version ? { version } : {}) });
    } catch (error) {
      const lines = (error as Error).message.split("\n").filter((l) => l.trim());
      missing.push({ id, why: `did not start: ${lines[0]}${lines.length > 1 ? ` … ${lines.at(-1)!.trim()}` : ""}` });
    }
  }
  for (const m of missing) say(`perf/overhead: ${ARM_LABELS[m.id] ?? m.id} is not run: ${m.why}`);

  // Every arm must answer a real request before it is measured.
  for (const arm of [...arms]) {
    const res = await fetch(`${arm.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify(smallChat(0)), headers: { "content-type": "application/json" } }).catch((e: Error) => e);
    const text = res instanceof Error ? res.message : await res.text();
    if (res instanceof Error || res.status !== 200 || !text.includes("chatcmpl-perf")) {
      say(`perf/overhead: ${arm.id} does not answer a chat completion (${res instanceof Error ? text : `HTTP ${res.status}: ${text.slice(0, 200)}`}); not run`);
      missing.push({ id: arm.id, why: "did not answer a chat completion" });
      arms.splice(arms.indexOf(arm), 1);
    }
  }

  // --- CPU and noise accounting ----------------------------------------------------------
  // This process and everything it started (the servers; wrk is counted from its own rusage).
  const ours = () => {
    const stats = readProcStats();
    return { stats, ticks: treeTicks(process.pid, stats) };
  };
  let otherTicks = 0;
  let wallSeconds = 0;

  const wrkRun = async (url: string, body: string, connections: number, seconds: number) => {
    const args = wrkArgs({ wrk, script: scripts.get(body)!, url, connections, seconds });
    const r = await run(args, { cpus: pinning?.load });
    if (r.code !== 0) throw new Error(`wrk exited with ${r.code}: ${r.stderr}`);
    return { result: parseWrk(r.stdout), clientMs: r.cpuMs };
  };

  // --- warm-up: JIT, connection pools, the index's first conversations ----------------------
  say(`perf/overhead: warm-up (${arms.map((a) => a.id).join(", ")})`);
  for (const arm of arms) for (const b of bodies) await wrkRun(arm.url, b.id, 16, 1);

  // --- the proxy runs --------------------------------------------------------------------
  const samples: Sample[] = [];
  const totalCells = bodies.length * CONCURRENCY.length * RUNS * arms.length;
  let done = 0;
  for (const body of bodies) {
    for (const c of CONCURRENCY) {
      for (let runIndex = 0; runIndex < RUNS; runIndex++) {
        for (const arm of rotate(arms, runIndex)) {
          const cpuBefore = parseCpuTotals(readFileSync("/proc/stat", "utf8"));
          const before = ours();
          const t0 = performance.now();
          const { result, clientMs } = await wrkRun(arm.url, body.id, c, SECONDS);
          const wall = (performance.now() - t0) / 1000;
          const after = ours();
          const cpuAfter = parseCpuTotals(readFileSync("/proc/stat", "utf8"));
          const armTicks = arm.server ? treeTicks(arm.server.pid, after.stats) - treeTicks(arm.server.pid, before.stats) : undefined;
          const engineTicks = treeTicks(engine.pid, after.stats) - treeTicks(engine.pid, before.stats);
          otherTicks += Math.max(0, cpuAfter.busy - cpuBefore.busy - (after.ticks - before.ticks) - (clientMs / 1000) * hz);
          wallSeconds += wall;
          samples.push({
            arm: arm.id,
            body: body.id,
            concurrency: c,
            run: runIndex,
            requests: result.requests,
            rps: result.rps,
            p50Ms: result.p50Ms,
            p99Ms: result.p99Ms,
            errors: result.errors,
            ...(armTicks !== undefined ? { armUs: microsPerRequest(armTicks, result.requests, hz) } : {}),
            engineUs: microsPerRequest(engineTicks, result.requests, hz),
            clientUs: result.requests > 0 ? (clientMs * 1000) / result.requests : NaN,
          });
          done++;
          say(
            `[${done}/${totalCells}] ${body.id} c=${c} run ${runIndex + 1} ${arm.id.padEnd(11)} ${Math.round(result.rps).toString().padStart(6)} req/s  p50 ${result.p50Ms.toFixed(2)} ms` +
              `${armTicks !== undefined ? `  ${microsPerRequest(armTicks, result.requests, hz).toFixed(0)} µs/req` : ""}${result.errors ? `  ${result.errors} errors` : ""}`,
          );
        }
      }
    }
  }
  const cells = summarizeCells(samples);

  // --- streams -----------------------------------------------------------------------------
  let streams: OverheadResults["streams"];
  if (!SKIP.has("streams")) {
    const total = Number(values.streams);
    const concurrency = Number(values["stream-concurrency"]);
    const streamSamples: StreamSample[] = [];
    for (let runIndex = 0; runIndex < RUNS; runIndex++) {
      for (const arm of rotate(arms, runIndex)) {
        const traces = await streamRun(arm.url, total, concurrency);
        const s = summarizeStreams(arm.id, runIndex, traces, CHUNKS + 1);
        streamSamples.push(s);
        say(`streams run ${runIndex + 1} ${arm.id.padEnd(11)} gap p50 ${s.gapP50Ms.toFixed(2)} ms  p99 ${s.gapP99Ms.toFixed(2)} ms  reads ${s.reads.toFixed(1)}/${CHUNKS + 1}`);
      }
    }
    streams = { cells: summarizeStreamCells(streamSamples), chunks: CHUNKS, gapMs: GAP_MS, streams: total, concurrency };
  }
  const llmroute = arms.find((a) => a.id === "llmroute");
  if (llmroute?.server) say(`perf/overhead: llmroute RSS after the runs: ${(rssBytes(llmroute.server.pid) / 1e6).toFixed(0)} MB`);
  await Promise.all(servers.map((s) => s.stop()));
  servers.length = 0;

  // --- memory and the decision, each in processes of their own -----------------------------
  const child = async (script: string, args: string[]): Promise<unknown> => {
    say(`perf/overhead: running ${script} ${args.join(" ")}`);
    const proc = Bun.spawn([process.execPath, join(ROOT, script), ...args], { stdout: "pipe", stderr: "inherit" });
    const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
    if (code !== 0) throw new Error(`${script} exited with ${code}`);
    return JSON.parse(out.trim().split("\n").at(-1)!);
  };
  const memory = SKIP.has("memory") ? undefined : ((await child("perf/memory.ts", ["--json"])) as MemoryResults);
  const decision = SKIP.has("decision") ? undefined : ((await child("perf/decision.ts", ["--json"])) as DecisionResults);

  const results: OverheadResults = {
    machine,
    finishedAt: new Date().toISOString(),
    loadAfter: readLoadavg(),
    otherCores: wallSeconds > 0 ? otherTicks / hz / wallSeconds : NaN,
    ...(pinning ? { pinning } : {}),
    runs: RUNS,
    seconds: SECONDS,
    client: `wrk ${toolVersion([wrk, "--version"])?.match(/wrk (\S+)/)?.[1] ?? ""} (1 thread, keep-alive)`.replace("  ", " "),
    arms: arms.map((a) => ({ id: a.id, ...(a.version ? { version: a.version } : {}) })),
    missing,
    bodies,
    concurrency: CONCURRENCY,
    cells,
    ...(streams ? { streams } : {}),
    ...(memory ? { memory } : {}),
    ...(decision ? { decision } : {}),
  };
  const report = renderReport(results);
  console.log(`\n${report}`);
  const stamp = machine.date.slice(0, 16).replace(":", "");
  const file = join(values.out, `overhead-${stamp}.md`);
  await Bun.write(file, `# Proxy performance, ${machine.date.slice(0, 10)}\n\nWritten by \`npx bun perf/overhead.ts ${Bun.argv.slice(2).join(" ")}\`.\n\n${report}`);
  await Bun.write(file.replace(/\.md$/, ".json"), `${JSON.stringify(results, null, 1)}\n`);
  say(`perf/overhead: wrote ${file} (and .json)`);
  if (values.readme) {
    // The lab notes keep the latest run between their markers (the project README is for users).
    const notes = join(ROOT, "perf", "README.md");
    await Bun.write(notes, replaceBetween(readFileSync(notes, "utf8"), "<!-- perf:begin -->", "<!-- perf:end -->", report));
    say("perf/overhead: perf/README.md's tables replaced");
  }
} finally {
  await cleanup();
}

/** `total` streamed requests, `concurrency` at a time; when each read arrived and how many events it held. */
async function streamRun(base: string, total: number, concurrency: number): Promise<StreamTrace[]> {
  const traces: StreamTrace[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        const res = await fetch(`${base}/v1/chat/completions`, { method: "POST", body: JSON.stringify(smallChat(i, true)), headers: { "content-type": "application/json" } });
        if (res.status !== 200 || !res.body) throw new Error(`${base}: streamed request answered HTTP ${res.status}`);
        const trace: StreamTrace = { readsAt: [], events: [] };
        const decoder = new TextDecoder();
        for await (const chunk of res.body) {
          trace.readsAt.push(performance.now());
          trace.events.push(decoder.decode(chunk).split("data: ").length - 1);
        }
        traces.push(trace);
      }
    }),
  );
  return traces;
}


/** One worker, keep-alive both ways, the body read before forwarding (nginx's default) and kept in memory, responses streamed. */
function nginxConf(port: number, upstream: string, dir: string): string {
  return `worker_processes 1;
daemon off;
master_process on;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/nginx-body; proxy_temp_path ${dir}/nginx-proxy; fastcgi_temp_path ${dir}/nginx-fcgi; uwsgi_temp_path ${dir}/nginx-uwsgi; scgi_temp_path ${dir}/nginx-scgi;
  client_max_body_size 32m;
  client_body_buffer_size 1m;
  keepalive_requests 1000000;
  upstream engine { server ${upstream}; keepalive 512; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:${port};
    location / { proxy_pass http://engine; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
`;
}

/** One thread, connections to the engine reused, small writes sent at once; HAProxy streams the body (it does not need to read it). */
function haproxyConf(port: number, upstream: string): string {
  return `global
  nbthread 1
  maxconn 4096
defaults
  mode http
  # Without it HAProxy holds small writes back for more (MSG_MORE) and an SSE stream's chunks arrive in bursts.
  option http-no-delay
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout http-keep-alive 120s
frontend fe
  bind 127.0.0.1:${port}
  default_backend be
backend be
  http-reuse always
  server engine ${upstream}
`;
}
