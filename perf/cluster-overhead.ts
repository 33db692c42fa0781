/**
 * What sharing routing state through Redis costs, measured in one run (the numbers in
 * docs/cluster.md):
 *
 * 1. The transports a design could use, against a fresh redis-server: a read per decision
 *    (GET round trip: what every decision would wait for), and how fast an event reaches
 *    another connection by pub/sub and by a stream (XADD → a blocked XREAD). Plus what
 *    encoding one commit costs the deciding instance.
 * 2. The router with [cluster] against the same router without it, in front of a zero-think
 *    engine (`llmroute sim` at a near-zero time scale): one instance with a peer that applies
 *    its events, and two instances with the requests alternating between them (each applies
 *    the other's events), interleaved in rounds with the plain router so machine noise hits
 *    every arm alike. CPU per request (router, peer, redis-server) from /proc.
 *
 *   npx bun perf/cluster-overhead.ts [--requests 300] [--rounds 5] [--concurrency 1] [--context-chars 8000]
 *
 * Read medians and differences, not absolutes: everything shares this machine's cores.
 */
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { RedisClient } from "bun";
import { BatchWriter } from "../src/cluster/codec.ts";
import { startRedisServer } from "../src/cluster/redis-server.ts";
import { prefixChain } from "../src/route/chain.ts";
import { createHasher } from "../src/route/hash.ts";
import { spawnCli } from "../test/helpers/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    requests: { type: "string", default: "500" },
    rounds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "1" },
    "context-chars": { type: "string", default: "8000" },
    samples: { type: "string", default: "2000" },
    redis: { type: "string", default: process.env.LLMROUTE_TEST_REDIS_SERVER ?? "redis-server" },
  },
});
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);
const CONCURRENCY = Number(values.concurrency);
const CONTEXT = Number(values["context-chars"]);
const SAMPLES = Number(values.samples);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => pct(xs, 50);
const us = (ms: number) => `${(ms * 1000).toFixed(0)} µs`;
/** CPU time a process has used, in ms (utime + stime from /proc, 100 Hz ticks). */
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
};

const redis = await startRedisServer({ binary: values.redis });
const version = (await new RedisClient(redis.url).send("INFO", ["server"])) as string;
console.log(`${values.redis} ${/(?:redis|valkey)_version:(\S+)/.exec(version)?.[1] ?? "?"} on ${redis.url}; Bun ${Bun.version}\n`);

// --- 1. transports ------------------------------------------------------------------------
{
  const a = new RedisClient(redis.url);
  await a.connect();
  const b = await a.duplicate();
  const sub = await a.duplicate();

  const get: number[] = [];
  await a.set("k", "gpu0");
  for (let i = 0; i < SAMPLES; i++) {
    const t = performance.now();
    await a.get("k");
    get.push(performance.now() - t);
  }

  const pubsub: number[] = [];
  let arrived: (() => void) | undefined;
  await sub.subscribe("perf", () => arrived?.());
  for (let i = 0; i < SAMPLES; i++) {
    const got = new Promise<void>((resolve) => (arrived = resolve));
    const t = performance.now();
    void a.publish("perf", "x".repeat(200));
    await got;
    pubsub.push(performance.now() - t);
  }

  const stream: number[] = [];
  let last = (await a.send("XADD", ["perf-log", "*", "p", "seed"])) as string;
  for (let i = 0; i < SAMPLES; i++) {
    const read = b.send("XREAD", ["BLOCK", "1000", "STREAMS", "perf-log", last]);
    const t = performance.now();
    void a.send("XADD", ["perf-log", "*", "p", "x".repeat(200)]);
    const reply = (await read) as Record<string, [string, string[]][]>;
    stream.push(performance.now() - t);
    last = reply["perf-log"]!.at(-1)![0];
  }

  const hasher = createHasher();
  const encode = (chars: number) => {
    const chain = prefixChain({ tenant: "", model: "m", segments: [["system\u001e", "s".repeat(2000)], ["user\u001e", "u".repeat(chars - 2000)]] }, hasher, 1024);
    const w = new BatchWriter();
    const t = performance.now();
    for (let i = 0; i < SAMPLES; i++) {
      w.add({ kind: "commit", at: Date.now(), replica: "gpu0", commit: i + 1, continued: true, chains: [chain] });
      if (w.events === 16) Buffer.from(w.take(Date.now())).toString("base64");
    }
    return { links: chain.length, ms: (performance.now() - t) / SAMPLES };
  };
  const small = encode(8_000);
  const large = encode(360_000);

  console.log(`transport (n = ${SAMPLES} each, sequential)            p50        p99`);
  console.log(`read per decision: GET round trip              ${us(median(get)).padStart(9)}  ${us(pct(get, 99)).padStart(9)}`);
  console.log(`pub/sub: PUBLISH → subscriber                  ${us(median(pubsub)).padStart(9)}  ${us(pct(pubsub, 99)).padStart(9)}`);
  console.log(`stream: XADD → blocked XREAD                   ${us(median(stream)).padStart(9)}  ${us(pct(stream, 99)).padStart(9)}`);
  console.log(`encode one commit, 8k-char prompt (${small.links} links)   ${us(small.ms).padStart(9)}`);
  console.log(`encode one commit, 90k-token prompt (${large.links} links) ${us(large.ms).padStart(9)}\n`);
  await sub.unsubscribe();
  for (const c of [sub, b, a]) c.close();
}

// --- 2. the router with and without [cluster] --------------------------------------------
const dir = await mkdtemp("/tmp/llmroute-cluster-overhead-");
const sim = spawnCli(["sim", "--port", "0", "--profile", "tiny", "--time-scale", "0.000001"]);
const simUrl = (await sim.waitFor(/listening on (http:\/\/\S+)/))[1]!;
const replica = `[[replica]]\nname = "gpu0"\nurl = "${simUrl}"\n`;
async function serve(name: string, cluster: boolean) {
  const toml = `[health]\ninterval = "60s"\n${cluster ? `[cluster]\nredis = "${redis.url}"\nname = "${name}"\n` : ""}${replica}`;
  await Bun.write(`${dir}/${name}.toml`, toml);
  const proc = spawnCli(["serve", "--config", `${dir}/${name}.toml`, "--listen", "127.0.0.1:0", "--log-format", "json"]);
  return { proc, url: (await proc.waitFor(/listening on (http:\/\/[^\s"]+)/))[1]! };
}
const plain = await serve("plain", false);
const plain2 = await serve("plain2", false);
const one = await serve("one", true);
const two = await serve("two", true);

async function run(urls: string[], salt: string): Promise<number[]> {
  const context = "All work and no play makes a dull prompt. ".repeat(Math.ceil(CONTEXT / 43)).slice(0, CONTEXT);
  const latencies: number[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, w) => {
      while (next < REQUESTS) {
        const i = next++;
        const body = JSON.stringify({
          model: "sim-model",
          max_tokens: 4,
          messages: [
            { role: "system", content: `${salt} worker ${w}\n${context}` },
            { role: "user", content: `question ${i}` },
            ...(i % 2 ? [{ role: "assistant", content: "ok" }, { role: "user", content: "go on" }] : []),
          ],
        });
        const start = performance.now();
        const res = await fetch(`${urls[i % urls.length]}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" } });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
        latencies.push(performance.now() - start);
      }
    }),
  );
  return latencies;
}

const arms = [
  { name: "1 instance", urls: [plain.url] },
  { name: "1 instance, [cluster] (+1 peer)", urls: [one.url] },
  { name: "2 instances alternating", urls: [plain.url, plain2.url] },
  { name: "2 alternating, [cluster]", urls: [one.url, two.url] },
];
const salt = crypto.randomUUID();
for (const arm of arms) await run(arm.urls, `warm ${salt}`);
const p50s = new Map(arms.map((a) => [a.name, [] as number[]]));
const p90s = new Map(arms.map((a) => [a.name, [] as number[]]));
const pids = { routers: [plain.proc.proc.pid, plain2.proc.proc.pid, one.proc.proc.pid, two.proc.proc.pid], redis: redis.pid };
const cpu = new Map(arms.map((a) => [a.name, { routers: 0, redis: 0 }]));
for (let round = 0; round < ROUNDS; round++) {
  for (const arm of round % 2 ? [...arms].reverse() : arms) {
    const before = { routers: pids.routers.reduce((t, p) => t + cpuMs(p), 0), redis: cpuMs(redis.pid) };
    const l = await run(arm.urls, `${salt} round ${round}`);
    const c = cpu.get(arm.name)!;
    c.routers += pids.routers.reduce((t, p) => t + cpuMs(p), 0) - before.routers;
    c.redis += cpuMs(redis.pid) - before.redis;
    p50s.get(arm.name)!.push(median(l));
    p90s.get(arm.name)!.push(pct(l, 90));
  }
  console.error(`round ${round + 1}/${ROUNDS}`);
}
const status = (await (await fetch(`${one.url}/status`)).json()) as { cluster: { events: { sent: number; applied: number }; lag_ms: number } };
// Each [cluster] arm against the same topology without it.
const baseOf = (name: string) => median(p50s.get(name.startsWith("1") ? arms[0]!.name : arms[2]!.name)!);
console.log(`router latency, zero-think engine — ${ROUNDS} rounds × ${REQUESTS} requests per arm, concurrency ${CONCURRENCY}, ~${CONTEXT} chars of context`);
console.log("arm                              p50 ms   p90 ms   added p50 ms   CPU µs/request: routers  redis   per-round p50s");
for (const arm of arms) {
  const m = median(p50s.get(arm.name)!);
  const c = cpu.get(arm.name)!;
  const per = (ms: number) => ((ms * 1000) / (ROUNDS * REQUESTS)).toFixed(0);
  console.log(
    `${arm.name.padEnd(32)} ${m.toFixed(3).padStart(6)} ${median(p90s.get(arm.name)!).toFixed(3).padStart(8)} ${arm.name.includes("[cluster]") ? (m - baseOf(arm.name)).toFixed(3).padStart(14) : "".padStart(14)} ${per(c.routers).padStart(24)} ${per(c.redis).padStart(6)}   ${p50s.get(arm.name)!.map((x) => x.toFixed(3)).join(" ")}`,
  );
}
console.log(`\ninstance "one": ${status.cluster.events.sent} events shared, ${status.cluster.events.applied} applied from "two", last sync lag ${status.cluster.lag_ms} ms`);

for (const p of [plain, plain2, one, two]) p.proc.kill();
sim.proc.kill();
await redis.stop();
await rm(dir, { recursive: true, force: true });
process.exit(0);
