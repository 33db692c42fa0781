/**
 * Redis stopped mid-run, measured: two router instances (`llmroute serve` processes) in
 * front of two sims, conversations alternating between the instances, Redis SIGKILLed
 * after a warm-up, kept down for a while, then restarted empty (no persistence). Prints
 * failed requests per phase, how often a continuation left the replica of its first turn
 * (by the phase its conversation started in: while the instances cannot share, each turn
 * that reaches the other instance is routed as new), and how long after the restart both
 * instances were back in sync — with a conversation learned during the outage on one
 * instance pinned by the other.
 *
 *   npx bun perf/cluster-outage.ts [--down 5] [--workers 4]
 */
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { startRedisServer } from "../src/cluster/redis-server.ts";
import type { StatusDocument } from "../src/ops/telemetry.ts";
import { startRouterProc, startSimProc, until, type RouterProc } from "../test/helpers/fleet.ts";
import { killAll } from "../test/helpers/proc.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { down: { type: "string", default: "5" }, workers: { type: "string", default: "4" }, redis: { type: "string", default: process.env.LLMROUTE_TEST_REDIS_SERVER ?? "redis-server" } },
});
const DOWN_S = Number(values.down);
const WORKERS = Number(values.workers);
const SALT = crypto.randomUUID();

const redis = await startRedisServer({ binary: values.redis });
const sims = await Promise.all([startSimProc("gpu0"), startSimProc("gpu1")]);
const routers = await Promise.all(
  ["r0", "r1"].map((name) => startRouterProc(sims.map((s) => ({ name: s.name, url: s.url })), { toml: `[cluster]\nredis = "${redis.url}"\nname = "${name}"\n` })),
);
const [a, b] = routers as [RouterProc, RouterProc];
const status = async (r: RouterProc) => (await (await fetch(`${r.url}/status`)).json()) as StatusDocument;

type Phase = "before" | "down" | "restarted" | "synced";
let phase: Phase = "before";
const counts: Record<Phase, { requests: number; failed: number; moved: number; why: Record<string, number> }> = {
  before: { requests: 0, failed: 0, moved: 0, why: {} },
  down: { requests: 0, failed: 0, moved: 0, why: {} },
  restarted: { requests: 0, failed: 0, moved: 0, why: {} },
  synced: { requests: 0, failed: 0, moved: 0, why: {} },
};
let stop = false;

async function turn(r: RouterProc, messages: OpenAI.ChatCompletionMessageParam[], next: string) {
  const { data, response } = await r.client().chat.completions.create({ model: "sim-model", messages, max_tokens: 4 }).withResponse();
  messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" }, { role: "user", content: next });
  return { replica: response.headers.get("x-llmroute-replica"), route: response.headers.get("x-llmroute-route") ?? "?" };
}

const workers = Array.from({ length: WORKERS }, async (_, w) => {
  for (let c = 0; !stop; c++) {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: `${SALT} worker ${w} conversation ${c}\n${"Work through the task step by step. ".repeat(20)}` },
      { role: "user", content: "start" },
    ];
    let owner: string | null = null;
    const started = phase;
    for (let t = 0; t < 6 && !stop; t++) {
      try {
        const { replica, route } = await turn(routers[(w + t) % 2]!, messages, `step ${t}`);
        const c = counts[started];
        c.requests++;
        if (t === 0) owner = replica;
        else if (replica !== owner) {
          c.moved++;
          c.why[route] = (c.why[route] ?? 0) + 1;
        }
      } catch {
        counts[started].failed++;
      }
    }
  }
});

await until(() => counts.before.requests >= 100 || undefined, "warm-up traffic", 60_000);
await redis.stop("SIGKILL");
phase = "down";
const killedAt = performance.now();
await until(async () => (await Promise.all([status(a), status(b)])).every((s) => s.cluster?.state !== "up"), "the instances to notice", 10_000);
const noticedMs = performance.now() - killedAt;
const away: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: `${SALT} learned while Redis was away` }, { role: "user", content: "start" }];
const awayOwner = (await turn(a, away, "second")).replica;
await Bun.sleep(Math.max(0, DOWN_S * 1000 - (performance.now() - killedAt))); // the outage's length (not synchronisation)

await redis.restart();
phase = "restarted";
const restartedAt = performance.now();
await until(
  async () => (await Promise.all([status(a), status(b)])).every((s) => s.cluster?.state === "up" && s.cluster.backlog_events === 0),
  "both instances back in sync",
  30_000,
);
const syncedMs = performance.now() - restartedAt;
phase = "synced";
const pinned = (await turn(b, away, "third")).replica === awayOwner;
await until(() => counts.synced.requests >= 200 || undefined, "traffic after the instances are back in sync", 60_000);
stop = true;
await Promise.all(workers);

console.log(`Redis (${values.redis}) SIGKILLed after ${counts.before.requests} requests, down ${DOWN_S} s, restarted empty; 2 instances, ${WORKERS} conversations at a time alternating between them`);
console.log("conversations started   requests  failed  turns off the first turn's replica (route)");
const label: Record<Phase, string> = { before: "before the outage", down: "during the outage", restarted: "restarted, not synced", synced: "back in sync" };
for (const [p, c] of Object.entries(counts) as [Phase, (typeof counts)[Phase]][]) {
  const why = Object.entries(c.why).map(([r, n]) => `${r} ${n}`).join(", ");
  console.log(`${label[p].padEnd(22)} ${String(c.requests).padStart(9)} ${String(c.failed).padStart(7)} ${String(c.moved).padStart(8)}${why ? ` (${why})` : ""}`);
}
console.log(`outage noticed by both instances after ${(noticedMs / 1000).toFixed(1)} s (requests kept flowing meanwhile)`);
console.log(`after the restart: both instances connected with an empty backlog in ${(syncedMs / 1000).toFixed(2)} s; the conversation learned by r0 during the outage ${pinned ? "is pinned" : "is NOT pinned"} by r1`);
await killAll();
await redis.stop();
process.exit(0);
