/**
 * Soak: mixed traffic through `llmroute serve` over three `llmroute sim` replicas for N
 * minutes, one replica killed and restarted every few minutes, the router's memory (RSS)
 * and open file descriptors sampled each minute. Not part of `npm test`; loopback only.
 *
 *   npx bun perf/soak.ts [--minutes 30] [--restart-every 5] [--concurrency 12] [--index-max-entries 20000]
 *
 * The index is bounded (routing.index_max_entries) so that it fills within minutes: from
 * then on the router's memory should stay flat, and what grows is a leak.
 * The traffic: growing agent conversations (chat, up to 12 turns, then a new one),
 * one-shots, streams with and without usage, a client that leaves mid-stream, Responses
 * API chains (previous_response_id), Anthropic /v1/messages, and a little bad input. The
 * restarts alternate SIGKILL and SIGTERM and bring the replica back on the same port.
 * Prints one line per minute and a summary: RSS and descriptors first/last/max, requests
 * by outcome as the router counted them, and what the clients saw.
 */
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { parsePrometheus } from "../src/engines/metrics.ts";
import { spawnCli, type Proc } from "../test/helpers/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    minutes: { type: "string", default: "30" },
    "restart-every": { type: "string", default: "5" },
    concurrency: { type: "string", default: "12" },
    "sample-every": { type: "string", default: "60" },
    "index-max-entries": { type: "string", default: "20000" },
  },
});
const MINUTES = Number(values.minutes);
const RESTART_EVERY_MS = Number(values["restart-every"]) * 60_000;
const CONCURRENCY = Number(values.concurrency);
const SAMPLE_EVERY_MS = Number(values["sample-every"]) * 1000;
const SIM_ARGS = ["--profile", "tiny", "--decode-tps", "300"];

async function freePort(): Promise<number> {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = s.port!;
  await s.stop(true);
  return port;
}

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) / 1024;
const openFds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

// --- the fleet -----------------------------------------------------------------------
const ports = await Promise.all([0, 1, 2].map(() => freePort()));
const startSim = async (i: number): Promise<Proc> => {
  const proc = spawnCli(["sim", "--port", String(ports[i]), "--name", `gpu${i}`, ...SIM_ARGS]);
  await proc.waitFor(/listening on/);
  return proc;
};
const sims = await Promise.all([0, 1, 2].map(startSim));
const dir = await mkdtemp("/tmp/llmroute-soak-");
await Bun.write(
  `${dir}/router.toml`,
  `[routing]\nstate_file = "${dir}/state.json"\nstate_interval = "30s"\nindex_max_entries = ${Number(values["index-max-entries"])}\n[health]\ninterval = "2s"\ntimeout = "1s"\n` +
    ports.map((p, i) => `[[replica]]\nname = "gpu${i}"\nurl = "http://127.0.0.1:${p}"\nkv_tokens = 4096\nmetrics = true\n`).join(""),
);
const router = spawnCli(["serve", "--config", `${dir}/router.toml`, "--listen", "127.0.0.1:0", "--log-format", "json"]);
const base = (await router.waitFor(/listening on (http:\/\/[^\s"]+)/))[1]!;
const pid = router.proc.pid;

// --- the traffic ---------------------------------------------------------------------
const seen = new Map<string, number>();
const see = (what: string) => seen.set(what, (seen.get(what) ?? 0) + 1);
const post = (path: string, body: unknown, init: RequestInit = {}) =>
  fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body), ...init });

async function drain(res: Response, label: string, abortAfterChunks?: number, abort?: AbortController): Promise<void> {
  const reader = res.body!.getReader();
  let chunks = 0;
  let text = "";
  try {
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      text += new TextDecoder().decode(r.value);
      if (abortAfterChunks !== undefined && ++chunks >= abortAfterChunks) {
        abort!.abort();
        see(`${label}: left mid-stream`);
        return;
      }
    }
    see(text.includes('"error"') ? `${label}: ${res.status} ended by an error event` : `${label}: ${res.status}`);
  } catch {
    see(`${label}: ${abortAfterChunks !== undefined ? "left mid-stream" : "connection broken"}`);
  }
}

async function agent(worker: number, running: () => boolean): Promise<void> {
  let messages: { role: string; content: string }[] = [];
  let responseId: string | undefined;
  for (let i = 0; running(); i++) {
    try {
      const kind = i % 10;
      if (kind <= 3) {
        // a growing conversation
        if (messages.length === 0 || messages.length > 24) messages = [{ role: "system", content: `worker ${worker} conversation ${i} ${"context ".repeat(80)}` }];
        messages.push({ role: "user", content: `turn ${i}: ${"tool output ".repeat(10)}` });
        const res = await post("/v1/chat/completions", { model: "sim-model", messages, max_tokens: 8 });
        const body = (await res.json()) as { choices?: { message: { content: string } }[] };
        see(`chat: ${res.status}`);
        messages.push({ role: "assistant", content: body.choices?.[0]?.message.content ?? "" });
      } else if (kind === 4) {
        const res = await post("/v1/chat/completions", { model: "sim-model", messages: [{ role: "user", content: `one-shot ${worker}/${i}` }], max_tokens: 8 });
        await res.arrayBuffer();
        see(`one-shot: ${res.status}`);
      } else if (kind === 5 || kind === 6) {
        const res = await post("/v1/chat/completions", {
          model: "sim-model",
          messages: [{ role: "user", content: `stream ${worker}/${i}` }],
          max_tokens: 40,
          stream: true,
          ...(kind === 6 ? { stream_options: { include_usage: true } } : {}),
        });
        await drain(res, "stream");
      } else if (kind === 7) {
        const abort = new AbortController();
        const res = await post("/v1/chat/completions", { model: "sim-model", messages: [{ role: "user", content: `leave ${worker}/${i}` }], max_tokens: 200, stream: true }, { signal: abort.signal });
        await drain(res, "stream", 3, abort);
      } else if (kind === 8) {
        const res = await post("/v1/responses", { model: "sim-model", input: `responses ${worker}/${i}`, max_output_tokens: 8, ...(responseId ? { previous_response_id: responseId } : {}) });
        const body = (await res.json()) as { id?: string };
        see(`responses${responseId ? " follow-up" : ""}: ${res.status}`);
        // a chain whose owner restarted is gone for good (its state lived there): start a new one
        responseId = res.status === 200 && i % 40 !== 8 ? body.id : undefined;
      } else if (i % 50 === 9) {
        const res = await post("/v1/chat/completions", "{not json");
        await res.arrayBuffer();
        see(`bad input: ${res.status}`);
      } else {
        const res = await post("/v1/messages", { model: "sim-model", max_tokens: 8, messages: [{ role: "user", content: `anthropic ${worker}/${i}` }] });
        await res.arrayBuffer();
        see(`messages: ${res.status}`);
      }
    } catch (error) {
      see(`client error: ${(error as Error).message.slice(0, 60)}`);
    }
  }
}

// --- the run -------------------------------------------------------------------------
const started = Date.now();
const deadline = started + MINUTES * 60_000;
const running = () => Date.now() < deadline;
const samples: { minute: number; rss: number; fds: number; entries: number; requests: number }[] = [];

async function sample(): Promise<void> {
  const status = (await (await fetch(`${base}/status`)).json()) as { index: { entries: number } };
  const requests = (parsePrometheus(await (await fetch(`${base}/metrics`)).text()).get("llmroute_requests_total") ?? []).reduce((n, s) => n + s.value, 0);
  const s = { minute: Math.round((Date.now() - started) / 60_000), rss: rssMiB(pid), fds: openFds(pid), entries: status.index.entries, requests };
  samples.push(s);
  console.error(`t=${String(s.minute).padStart(3)} min  rss ${s.rss.toFixed(1)} MiB  fds ${s.fds}  index ${s.entries}  requests ${s.requests}`);
}

async function restarts(): Promise<void> {
  for (let n = 0; ; n++) {
    const wait = Math.min(RESTART_EVERY_MS, deadline - Date.now());
    if (wait <= 5_000) return;
    await Bun.sleep(wait);
    const i = n % 3;
    const signal = n % 2 === 0 ? "SIGKILL" : "SIGTERM";
    console.error(`restart: gpu${i} (${signal})`);
    await sims[i]!.kill(signal);
    await Bun.sleep(2_000);
    sims[i] = await startSim(i);
  }
}

console.error(`soak: ${MINUTES} min, ${CONCURRENCY} clients, a restart every ${RESTART_EVERY_MS / 60_000} min; router ${base} (pid ${pid})`);
await sample();
const sampler = setInterval(() => void sample(), SAMPLE_EVERY_MS);
await Promise.all([...Array.from({ length: CONCURRENCY }, (_, w) => agent(w, running)), restarts()]);
clearInterval(sampler);
await sample();

const metrics = parsePrometheus(await (await fetch(`${base}/metrics`)).text());
const byOutcome = new Map<string, number>();
for (const s of metrics.get("llmroute_requests_total") ?? []) byOutcome.set(s.labels.outcome!, (byOutcome.get(s.labels.outcome!) ?? 0) + s.value);
const sum = (name: string) => (metrics.get(name) ?? []).reduce((n, s) => n + s.value, 0);
const first = samples[1] ?? samples[0]!;
const last = samples.at(-1)!;
const max = (key: "rss" | "fds") => Math.max(...samples.map((s) => s[key]));

console.log(`\nsoak ${MINUTES} min, ${CONCURRENCY} clients, ${Math.floor((MINUTES * 60_000) / RESTART_EVERY_MS)} restarts`);
console.log(`router RSS: ${first.rss.toFixed(1)} MiB at minute ${first.minute}, ${last.rss.toFixed(1)} MiB at the end, max ${max("rss").toFixed(1)} MiB`);
console.log(`open descriptors: ${first.fds} at minute ${first.minute}, ${last.fds} at the end, max ${max("fds")}`);
console.log(`index entries at the end: ${last.entries}`);
console.log(`router outcomes: ${[...byOutcome].sort().map(([k, v]) => `${k} ${v}`).join(", ")}`);
console.log(`failovers ${sum("llmroute_failovers_total")}, timeouts ${sum("llmroute_timeouts_total")}, cache losses ${sum("llmroute_cache_losses_total")}, panic routes ${sum("llmroute_panic_routes_total")}`);
console.log("clients saw:");
for (const [what, n] of [...seen].sort()) console.log(`  ${String(n).padStart(7)}  ${what}`);

await router.kill("SIGTERM");
await Promise.all(sims.map((s) => s.kill("SIGTERM")));
await rm(dir, { recursive: true, force: true });
