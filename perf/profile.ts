/**
 * Where the router's CPU goes under load: `llmroute serve` runs under Bun's sampling
 * profiler (`bun --cpu-prof`) in front of the zero-think engine while wrk drives one arm of
 * perf/overhead.ts (default: small bodies, concurrency 64); on SIGTERM the router exits and
 * Bun writes the profile. Prints the samples by category (body read, JSON parse, hashing,
 * relay, log line, telemetry, …), by nearest project function and by native leaf, and
 * writes that to perf/results/profile-<date>.md. The raw .cpuprofile (open it in Chrome
 * DevTools or speedscope) is kept with --keep.
 *
 *   npx bun perf/profile.ts [--seconds 10] [--concurrency 64] [--body small|large] [--interval-us 250] [--keep DIR] [--no-pin]
 */
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { agentChat, smallChat } from "./lib/bodies.ts";
import { readMachine, describeMachine } from "./lib/machine.ts";
import { markdownTable } from "./lib/markdown.ts";
import { canPin, cpuLayout, freePort, run, startServer, which, type Server } from "./lib/proc.ts";
import { summarizeProfile, type CpuProfile, type Share } from "./lib/profile.ts";
import { parseWrk, wrkArgs, wrkScript } from "./lib/wrk.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    seconds: { type: "string", default: "10" },
    concurrency: { type: "string", default: "64" },
    body: { type: "string", default: "small" },
    "interval-us": { type: "string", default: "250" },
    keep: { type: "string" },
    "no-pin": { type: "boolean", default: false },
    out: { type: "string", default: join(ROOT, "perf/results") },
  },
});
const wrk = which("wrk");
if (!wrk) {
  console.error("perf/profile: wrk is the client and is not installed: `apt-get install wrk`");
  process.exit(2);
}
const machine = readMachine();
const cpus = cpuLayout(machine.cores, !values["no-pin"] && canPin());

const dir = await mkdtemp(join(tmpdir(), "llmroute-profile-"));
const profDir = values.keep ?? join(dir, "prof");
await mkdir(profDir, { recursive: true });
const servers: Server[] = [];
try {
  const bodies = values.body === "small" ? Array.from({ length: 64 }, (_, i) => smallChat(i)) : Array.from({ length: 8 }, (_, i) => agentChat(i, 339_000));
  const files = await Promise.all(bodies.map(async (b, i) => {
    const f = join(dir, `body-${i}.json`);
    await Bun.write(f, JSON.stringify(b));
    return f;
  }));
  const script = join(dir, "bodies.lua");
  await Bun.write(script, wrkScript(files, "/v1/chat/completions"));

  const enginePort = await freePort();
  const engine = await startServer({ name: "engine", cmd: [process.execPath, join(ROOT, "perf/engine.ts"), "--port", String(enginePort)], url: `http://127.0.0.1:${enginePort}`, log: join(dir, "engine.log"), cpus: cpus?.load });
  servers.push(engine);
  const port = await freePort();
  const toml = join(dir, "router.toml");
  await Bun.write(toml, `[server]\nlisten = "127.0.0.1:${port}"\nlog_format = "json"\n\n[[replica]]\nname = "engine"\nurl = "${engine.url}"\n`);
  const router = await startServer({
    name: "llmroute",
    cmd: [process.execPath, "--cpu-prof", `--cpu-prof-dir=${profDir}`, `--cpu-prof-interval=${values["interval-us"]}`, join(ROOT, "src/cli.ts"), "serve", "--config", toml],
    url: `http://127.0.0.1:${port}`,
    log: join(dir, "router.log"),
    cpus: cpus?.proxy,
  });
  servers.push(router);

  const load = async (seconds: number) => {
    const r = await run(wrkArgs({ wrk, script, url: router.url, connections: Number(values.concurrency), seconds }), { cpus: cpus?.load });
    if (r.code !== 0) throw new Error(`wrk exited with ${r.code}: ${r.stderr}`);
    return parseWrk(r.stdout);
  };
  console.error(`perf/profile: warm-up, then ${values.seconds} s of ${values.body} bodies at concurrency ${values.concurrency} under the profiler${cpus ? ` (router on CPU ${cpus.proxy})` : ""}`);
  await load(1);
  const result = await load(Number(values.seconds));
  await router.stop(); // SIGTERM: the router drains and exits, and Bun writes the profile
  servers.splice(servers.indexOf(router), 1);
  const name = (await readdir(profDir)).filter((f) => f.endsWith(".cpuprofile")).sort().at(-1);
  if (!name) throw new Error(`no .cpuprofile in ${profDir}: did the router exit cleanly? Its log:\n${await Bun.file(join(dir, "router.log")).text()}`);
  const summary = summarizeProfile((await Bun.file(join(profDir, name)).json()) as CpuProfile, ROOT);

  const pct = (s: Share) => `${(s.share * 100).toFixed(1)} %`;
  const text = [
    `**${machine.date.slice(0, 10)}**, ${describeMachine(machine)}. \`llmroute serve\` under \`bun --cpu-prof\` (every ${values["interval-us"]} µs)${cpus ? ` on CPU ${cpus.proxy}` : ""}, ` +
      `${values.body} bodies at concurrency ${values.concurrency} for ${values.seconds} s: ${Math.round(result.rps).toLocaleString("en-US")} req/s under the profiler, ${summary.samples.toLocaleString("en-US")} samples of the JS thread ` +
      `(Bun's HTTP client thread is not sampled).`,
    "",
    "By category (first matching rule over each sample's stack):",
    "",
    markdownTable(["category", "samples", "share"], summary.byCategory.map((s) => [s.key, s.samples, pct(s)])),
    "",
    "By nearest project function (native calls charged to the project code that made them), top 25:",
    "",
    markdownTable(["function", "samples", "share"], summary.byFunction.slice(0, 25).map((s) => [`\`${s.key}\``, s.samples, pct(s)])),
    "",
    "By non-project leaf (native code, Bun internals) ← its project caller, top 20:",
    "",
    markdownTable(["leaf ← caller", "samples", "share"], summary.nativeLeaves.slice(0, 20).map((s) => [`\`${s.key}\``, s.samples, pct(s)])),
    "",
  ].join("\n");
  console.log(text);
  const file = join(values.out, `profile-${machine.date.slice(0, 16).replace(":", "")}.md`);
  await Bun.write(file, `# Router CPU profile, ${machine.date.slice(0, 10)}\n\nWritten by \`npx bun perf/profile.ts ${Bun.argv.slice(2).join(" ")}\`.\n\n${text}`);
  console.error(`perf/profile: wrote ${file}${values.keep ? `; raw profile ${join(profDir, name)}` : ""}`);
} finally {
  await Promise.all(servers.map((s) => s.stop()));
  await rm(dir, { recursive: true, force: true });
}
