/**
 * Router overhead, measured in one run: the same requests sent direct to an engine, through
 * llmroute, and through nginx (when installed), interleaved in rounds so machine noise hits
 * every arm alike. Prints medians of the per-round medians, p90s, throughput, the ratios,
 * and the router's memory before/after (RSS) with its index size.
 *
 *   npx bun bench/overhead.ts [--requests 400] [--rounds 5] [--concurrency 8] [--stream]
 *
 * The engine is `llmroute sim` at a near-zero time scale, so what is left is HTTP and
 * routing work. Everything runs on this machine's cores, so read ratios, not absolutes.
 */
import { readFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { parseArgs } from "node:util";
import { spawnCli } from "../test/helpers/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    requests: { type: "string", default: "400" },
    rounds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "8" },
    stream: { type: "boolean", default: false },
    "context-chars": { type: "string", default: "8000" },
  },
});
const REQUESTS = Number(values.requests);
const ROUNDS = Number(values.rounds);
const CONCURRENCY = Number(values.concurrency);
const CONTEXT = Number(values["context-chars"]);

async function freePort(): Promise<number> {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = s.port!;
  await s.stop(true);
  return port;
}

function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const median = (xs: number[]) => pct([...xs].sort((a, b) => a - b), 50);

/** One arm of one round: REQUESTS requests with CONCURRENCY workers; latencies in ms. */
async function run(base: string, salt: string): Promise<{ latencies: number[]; seconds: number }> {
  const context = "All work and no play makes a dull prompt. ".repeat(Math.ceil(CONTEXT / 43)).slice(0, CONTEXT);
  const latencies: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, w) => {
      while (next < REQUESTS) {
        const i = next++;
        const body = JSON.stringify({
          model: "sim-model",
          max_tokens: 4,
          stream: values.stream,
          messages: [
            { role: "system", content: `${salt} worker ${w}\n${context}` },
            { role: "user", content: `question ${i}` },
            ...(i % 2 ? [{ role: "assistant", content: "ok" }, { role: "user", content: "go on" }] : []),
          ],
        });
        const start = performance.now();
        const res = await fetch(`${base}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" } });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`${base}: HTTP ${res.status}`);
        latencies.push(performance.now() - start);
      }
    }),
  );
  return { latencies, seconds: (performance.now() - t0) / 1000 };
}

const dir = await mkdtemp("/tmp/llmroute-overhead-");
const sim = spawnCli(["sim", "--port", "0", "--profile", "tiny", "--time-scale", "0.000001"]);
const simUrl = (await sim.waitFor(/listening on (http:\/\/\S+)/))[1]!;
await Bun.write(`${dir}/router.toml`, `[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "${simUrl}"\n`);
const router = spawnCli(["serve", "--config", `${dir}/router.toml`, "--listen", "127.0.0.1:0", "--log-format", "json"]);
const routerUrl = (await router.waitFor(/listening on (http:\/\/[^\s"]+)/))[1]!;

const arms: { name: string; url: string }[] = [
  { name: "direct", url: simUrl },
  { name: "llmroute", url: routerUrl },
];
const nginxBin = Bun.which("nginx") ?? (await Bun.file("/usr/sbin/nginx").exists() ? "/usr/sbin/nginx" : null);
let nginx: ReturnType<typeof Bun.spawn> | undefined;
if (nginxBin) {
  const port = await freePort();
  await Bun.write(
    `${dir}/nginx.conf`,
    `worker_processes 1; daemon off; pid ${dir}/nginx.pid; error_log ${dir}/nginx-error.log;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path ${dir}; proxy_temp_path ${dir}; fastcgi_temp_path ${dir}; uwsgi_temp_path ${dir}; scgi_temp_path ${dir};
  upstream sim { server ${new URL(simUrl).host}; keepalive 64; }
  server { listen 127.0.0.1:${port};
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; client_max_body_size 32m; } } }
`,
  );
  nginx = Bun.spawn([nginxBin, "-c", `${dir}/nginx.conf`, "-e", `${dir}/nginx-error.log`], { stdout: "ignore", stderr: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) break;
    await Bun.sleep(10);
  }
  arms.push({ name: "nginx", url });
} else {
  console.error("nginx not found: `apt install nginx-light` to add the nginx column");
}

const salt = crypto.randomUUID();
const rssBefore = rssKiB(router.proc.pid);
console.error(`warm-up, then ${ROUNDS} rounds × ${arms.length} arms × ${REQUESTS} requests (concurrency ${CONCURRENCY}, ${values.stream ? "streamed" : "non-streamed"}, ~${CONTEXT} chars of context)`);
for (const arm of arms) await run(arm.url, `warm ${salt}`);

const perArm = new Map(arms.map((a) => [a.name, { medians: [] as number[], p90s: [] as number[], rps: [] as number[] }]));
for (let round = 0; round < ROUNDS; round++) {
  for (const arm of round % 2 ? [...arms].reverse() : arms) {
    const { latencies, seconds } = await run(arm.url, `${salt} round ${round}`);
    const sorted = latencies.sort((a, b) => a - b);
    const rec = perArm.get(arm.name)!;
    rec.medians.push(pct(sorted, 50));
    rec.p90s.push(pct(sorted, 90));
    rec.rps.push(latencies.length / seconds);
  }
  console.error(`round ${round + 1}/${ROUNDS} done`);
}
const rssAfter = rssKiB(router.proc.pid);
const status = (await (await fetch(`${routerUrl}/status`)).json()) as { index: { entries: number } };

const direct = perArm.get("direct")!;
console.log(`\nrouter overhead — n = ${ROUNDS} rounds × ${REQUESTS} requests per arm, concurrency ${CONCURRENCY}, ${values.stream ? "stream" : "no stream"}`);
console.log("arm        median ms   p90 ms   req/s   median ÷ direct   added ms");
for (const [name, rec] of perArm) {
  const m = median(rec.medians);
  console.log(
    `${name.padEnd(9)} ${m.toFixed(2).padStart(10)} ${median(rec.p90s).toFixed(2).padStart(8)} ${median(rec.rps).toFixed(0).padStart(7)} ${(m / median(direct.medians)).toFixed(2).padStart(17)} ${(m - median(direct.medians)).toFixed(2).padStart(10)}`,
  );
}
console.log(`\nrouter RSS: ${(rssBefore / 1024).toFixed(1)} MiB before, ${(rssAfter / 1024).toFixed(1)} MiB after ${ROUNDS * REQUESTS + REQUESTS} requests; prefix index ${status.index.entries} entries`);

router.proc.kill();
sim.proc.kill();
nginx?.kill();
process.exit(0);
