/**
 * The router's own cost over a long replay: an hour of a production trace (Mooncake
 * format, the bench's trace workload), sped up, through one llmroute router in front of
 * `llmroute sim` replicas, with the router's decision time and memory taken at the start
 * and at the end. Does either grow as the index fills and the hour goes on?
 *
 *   npx bun perf/trace-replay.ts --trace /path/to/conversation_trace.jsonl [--minutes 60] [--speed 10]
 *       [--sample 1] [--sims 4] [--card h100-8b] [--policy hybrid] [--shape chat] [--window 5] [--warmup 2] [--max-output 64]
 *
 * The router runs in a child process of its own (this script, `--router-child`), so its RSS
 * is the router's alone; its Router's `route` (the index lookup and the policy's choice)
 * and `commit` (recording the placement) are timed there, per request. The sims run in one
 * `llmroute sim --replicas N` process at time scale 1/speed, so the engines keep up with the
 * sped-up arrivals as the real cards would with the real ones; replies are capped at
 * `--max-output` tokens (the router's cost does not depend on them). Prints, for the first
 * `--window` trace minutes after `--warmup` ones (the JIT's and the index's first minutes)
 * and for the last `--window`, the median and p90 of route and commit (µs, n) and the
 * router's RSS and JS heap (after a full GC) at the end of each, then end ÷ start, the
 * prefix index's entries, and RSS and heap every `--window` trace minutes with the requests
 * then in flight (their bodies are memory too).
 */
import { heapStats } from "bun:jsc";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { quantile } from "../src/bench/stats.ts";
import { sendChat } from "../src/bench/client.ts";
import { loadTrace, TRACE_DEFAULTS, type TraceShape } from "../src/bench/trace.ts";
import { traceMessages } from "../src/bench/trace-text.ts";
import { chatBody, saltLine, newRunId } from "../src/bench/workloads.ts";
import { parseConfig } from "../src/config.ts";
import { memoryLog } from "../src/log.ts";
import { startRouter } from "../src/proxy/server.ts";
import { spawnCli } from "../test/helpers/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    trace: { type: "string" },
    "block-tokens": { type: "string", default: "512" },
    minutes: { type: "string", default: "60" },
    speed: { type: "string", default: "10" },
    sample: { type: "string", default: "1" },
    sims: { type: "string", default: "4" },
    card: { type: "string", default: "h100-8b" },
    policy: { type: "string", default: "hybrid" },
    shape: { type: "string", default: "chat" },
    window: { type: "string", default: "5" },
    warmup: { type: "string", default: "2" },
    "max-output": { type: "string", default: "64" },
    "router-child": { type: "string" },
  },
});

interface Timing {
  /** Ms since the child started. */
  at: number;
  routeUs: number;
  commitUs: number;
}

if (values["router-child"]) await routerChild(values["router-child"]);
else await main();

/** The router, in-process here, its decisions timed; GET /perf on a side port answers the timings since `?since=` and the RSS after a full GC. */
async function routerChild(toml: string): Promise<void> {
  const server = await startRouter(parseConfig(await Bun.file(toml).text(), toml, { env: {} }), { log: memoryLog() });
  const t0 = performance.now();
  const timings: Timing[] = [];
  // A decision's route time until its commit (a request held for a llama.cpp slot is routed again).
  const routed = new WeakMap<object, { at: number; routeUs: number }>();
  const router = server.router;
  const route = router.route.bind(router);
  const commit = router.commit.bind(router);
  router.route = (...args: Parameters<typeof route>) => {
    const start = performance.now();
    const out = route(...args);
    if (out) routed.set(out, { at: start - t0, routeUs: (performance.now() - start) * 1000 });
    return out;
  };
  router.commit = (...args: Parameters<typeof commit>) => {
    const start = performance.now();
    const out = commit(...args);
    const r = routed.get(args[1]);
    if (r) timings.push({ ...r, commitUs: (performance.now() - start) * 1000 });
    return out;
  };
  const side = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const since = Number(new URL(req.url).searchParams.get("since") ?? 0);
      Bun.gc(true);
      return Response.json({
        now: performance.now() - t0,
        rss: process.memoryUsage().rss,
        heap: heapStats().heapSize,
        index: router.index.size,
        indexBytes: router.index.memoryBytes(),
        timings: timings.filter((t) => t.at >= since),
      });
    },
  });
  console.log(`router ${server.url} perf http://127.0.0.1:${side.port}`);
  await new Promise<void>((resolve) => process.on("SIGTERM", () => resolve()));
  await server.stop();
  side.stop(true);
}

async function main(): Promise<void> {
  if (!values.trace) throw new Error("--trace FILE: a Mooncake-format JSONL trace (docs/traces.md says where to get one)");
  const speed = Number(values.speed);
  const minutes = Number(values.minutes);
  const windowMin = Number(values.window);
  const sims = Number(values.sims);
  const shape = values.shape as TraceShape;
  const plan = await loadTrace({ ...TRACE_DEFAULTS, file: values.trace, blockTokens: Number(values["block-tokens"]), sample: Number(values.sample), minutes, shape, speed });
  const lastMs = plan.records[plan.requests.at(-1)!.record]!.timestamp;
  console.error(`${plan.requests.length} requests over ${(lastMs / 60_000).toFixed(1)} trace minutes at ${speed}× (≈${(lastMs / speed / 60_000).toFixed(1)} real minutes), ${sims} sims as ${values.card}, policy ${values.policy}, ${shape}`);

  const fleet = spawnCli(["sim", "--replicas", String(sims), "--base-port", "0", "--profile", values.card!, "--time-scale", String(1 / speed)]);
  const urls: string[] = [];
  for (let i = 0; i < sims; i++) urls.push((await fleet.waitFor(new RegExp(`sim gpu${i} listening on (http://\\S+)`)))[1]!);
  const dir = await mkdtemp(join(tmpdir(), "llmroute-trace-replay-"));
  const toml = join(dir, "router.toml");
  await Bun.write(
    toml,
    `[server]\nlisten = "127.0.0.1:0"\n[routing]\npolicy = "${values.policy}"\n[health]\ninterval = "${Math.max(100, Math.round(10_000 / speed))}ms"\n` +
      urls.map((u, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${u}"\nmodels = ["sim-model"]\n`).join(""),
  );
  const child = Bun.spawn(["bun", import.meta.path, "--router-child", toml], { stdout: "pipe", stderr: "inherit" });
  const reader = child.stdout.getReader();
  let head = "";
  while (!/perf (\S+)\n/.test(head)) {
    const r = await reader.read();
    if (r.done) throw new Error(`the router child exited: ${head}`);
    head += new TextDecoder().decode(r.value);
  }
  const [, routerUrl, perfUrl] = /router (\S+) perf (\S+)/.exec(head)!;
  const perf = async (since = 0) => (await (await fetch(`${perfUrl}/perf?since=${since}`)).json()) as { now: number; rss: number; heap: number; index: number; indexBytes: number; timings: Timing[] };

  // Open loop, in real ms: trace ms ÷ speed from now.
  const salt = saltLine(newRunId(), "trace", values.policy!);
  const t0 = performance.now();
  const childStart = (await perf(Infinity)).now;
  let done = 0;
  let failed = 0;
  let startRss = NaN;
  let startAt = NaN;
  let startIndex = NaN;
  let startHeap = NaN;
  const windowMs = (windowMin * 60_000) / speed;
  const warmupMs = (Number(values.warmup) * 60_000) / speed;
  const startWindow = (async () => {
    await Bun.sleep(warmupMs + windowMs);
    const p = await perf(Infinity);
    [startRss, startAt, startIndex, startHeap] = [p.rss, p.now, p.index, p.heap];
  })();
  // RSS every window, with the requests in flight then, to see whether it levels off.
  const series: { traceMin: number; rss: number; heap: number; inflight: number }[] = [];
  let sent = 0;
  const every = setInterval(async () => {
    const inflight = sent - done;
    const p = await perf(Infinity);
    series.push({ traceMin: ((p.now - childStart) * speed) / 60_000, rss: p.rss, heap: p.heap, inflight });
  }, windowMs);
  await Promise.all(
    plan.requests.map(async (p) => {
      const wait = p.atMs - (performance.now() - t0);
      if (wait > 0) await Bun.sleep(wait);
      const r = plan.records[p.record]!;
      const body = chatBody("sim-model", traceMessages(plan, p.record, shape, salt, plan.spec.blockTokens), Math.max(1, Math.min(r.outputLength, Number(values["max-output"]))));
      sent++;
      const out = await sendChat(routerUrl!, body);
      if (out.error) failed++;
      if (++done % 500 === 0) console.error(`${done}/${plan.requests.length} requests, ${failed} failed, ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    }),
  );
  await startWindow;
  clearInterval(every);
  const end = await perf(0);
  const elapsed = end.now - childStart;
  // The windows are the schedule's: the first after the warm-up, the last before the last arrival.
  const lastArrival = plan.requests.at(-1)!.atMs;
  const first = end.timings.filter((t) => t.at - childStart >= warmupMs && t.at - childStart < warmupMs + windowMs);
  const last = end.timings.filter((t) => t.at - childStart >= lastArrival - windowMs && t.at - childStart <= lastArrival);
  const fig = (list: Timing[], f: (t: Timing) => number) => ({ p50: quantile(list.map(f), 0.5), p90: quantile(list.map(f), 0.9), n: list.length });
  const row = (what: string, a: { p50: number; p90: number; n: number }, b: { p50: number; p90: number; n: number }) =>
    `${what.padEnd(18)} start p50 ${a.p50.toFixed(1)} µs p90 ${a.p90.toFixed(1)} µs (n=${a.n}) · end p50 ${b.p50.toFixed(1)} µs p90 ${b.p90.toFixed(1)} µs (n=${b.n}) · end ÷ start p50 ${(b.p50 / a.p50).toFixed(2)}×, p90 ${(b.p90 / a.p90).toFixed(2)}×`;
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  console.log(`trace ${values.trace}: ${done} requests (${failed} failed) in ${(elapsed / 1000).toFixed(0)} s real, ${(lastMs / 60_000).toFixed(1)} trace minutes at ${speed}×; windows: ${windowMin} trace minutes after the first ${values.warmup}, and the last ${windowMin}`);
  console.log(row("route (decision)", fig(first, (t) => t.routeUs), fig(last, (t) => t.routeUs)));
  console.log(row("commit", fig(first, (t) => t.commitUs), fig(last, (t) => t.commitUs)));
  console.log(`router RSS after a full GC: start ${mib(startRss)} (at ${(startAt / 1000).toFixed(0)} s) · end ${mib(end.rss)} (every request answered) · end ÷ start ${(end.rss / startRss).toFixed(2)}×`);
  console.log(`JS heap after a full GC: start ${mib(startHeap)} · end ${mib(end.heap)} · end ÷ start ${(end.heap / startHeap).toFixed(2)}×`);
  console.log(`prefix index: ${startIndex.toLocaleString("en")} entries at the start, ${end.index.toLocaleString("en")} at the end (${mib(end.indexBytes)} of arrays; routing.index_max_entries bounds it)`);
  console.log(`by trace minute, RSS / JS heap MiB (requests in flight): ${series.map((x) => `${x.traceMin.toFixed(0)}: ${(x.rss / 2 ** 20).toFixed(0)}/${(x.heap / 2 ** 20).toFixed(0)} (${x.inflight})`).join(", ")}`);
  child.kill("SIGTERM");
  await child.exited;
  fleet.proc.kill("SIGTERM");
  await fleet.proc.exited;
  await rm(dir, { recursive: true, force: true });
}
