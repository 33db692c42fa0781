/**
 * What one routing decision costs, without HTTP: parse the body, build the prefix chain,
 * look it up on every replica, choose and record — for short chats up to the 90k-
 * token agent context, over 8 replicas, with an empty index and one filled to the default
 * bound (routing.index_max_entries). SageMaker quotes 1.3–1.9 ms per request for its
 * routing; the router's targets are ≤ 0.5 ms for the 90k chat and ≤ 0.1 ms for the 8k one.
 *
 *   npx bun perf/decision.ts [--json]
 */
import { parseArgs } from "node:util";
import { quantile } from "../src/bench/stats.ts";
import { parseConfig } from "../src/config.ts";
import { prefixChains } from "../src/route/chain.ts";
import { createHasher } from "../src/route/hash.ts";
import { DEFAULT_CACHE_AWARE, type PolicyName } from "../src/route/options.ts";
import { createPolicy } from "../src/route/policies/index.ts";
import { PrefixIndex } from "../src/route/prefix.ts";
import { Router, type FleetView } from "../src/route/router.ts";
import { shapeOf } from "../src/route/shape.ts";
import type { DecisionResults } from "./lib/report.ts";

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { json: { type: "boolean", default: false } } });

const REPLICAS = 8;
const SAMPLES = 200;
const BOUND = parseConfig('[[replica]]\nname = "a"\nurl = "http://127.0.0.1:9"\n', "<perf>", { env: {} }).routing.index_max_entries;
const CHUNK_CHARS = 1024;
const hasher = createHasher();
const replicas: FleetView[] = Array.from({ length: REPLICAS }, (_, i) => ({
  name: `gpu${i}`,
  healthy: true,
  inflight: i % 3,
  load: i % 3,
  queuedTokens: 1000 * (i % 3),
  prefillRate: 4000,
  charsPerToken: 4,
  budgetChars: 122_636 * 4,
}));

function body(tokens: number, turns: number, salt: string): string {
  const perTurn = Math.floor((tokens * 4) / (turns * 2));
  const messages = [{ role: "system", content: `${salt} you are an agent` }];
  for (let t = 0; t < turns; t++) {
    messages.push({ role: "user", content: `tool output ${t}: ${"lorem ipsum ".repeat(perTurn / 12)}` });
    messages.push({ role: "assistant", content: `step ${t}: ${"dolor sit ".repeat(perTurn / 10)}` });
  }
  messages.push({ role: "user", content: "continue" });
  return JSON.stringify({ model: "m", stream: true, messages });
}

/** A router whose index holds `fill` entries of other conversations. */
function routerWith(policy: PolicyName, fill: number): Router {
  const index = new PrefixIndex({ maxEntries: BOUND, ttlMs: 3_600_000, windowMs: 300_000 });
  const router = new Router({ policy: createPolicy(policy), index, hasher, maxInflight: 0, cacheAware: DEFAULT_CACHE_AWARE });
  // Each card's KV, as the fleet gives it to the index (src/proxy/server.ts `syncBudgets`):
  // a full card makes `hybrid` walk what the request would push out of it.
  for (const r of replicas) index.setBudget(r.name, r.budgetChars);
  for (let i = 0; index.size < fill; i++) {
    const shape = shapeOf("chat", JSON.parse(body(2000, 4, `fill ${i}`)));
    router.commit({ shape, chains: prefixChains(shape, hasher, CHUNK_CHARS) }, { replica: `gpu${i % REPLICAS}`, reason: "spread" }, i);
  }
  return router;
}

function measure(router: Router, tokens: number, turns: number) {
  const text = body(tokens, turns, `measured ${tokens}`);
  const samples: number[] = [];
  let links = 0;
  for (let i = -20; i < SAMPLES; i++) {
    const t0 = performance.now();
    const shape = shapeOf("chat", JSON.parse(text));
    const input = { shape, chains: prefixChains(shape, hasher, CHUNK_CHARS) };
    const d = router.route(input, replicas, 1e9 + i)!;
    router.commit(input, d, 1e9 + i);
    if (i >= 0) samples.push(performance.now() - t0);
    links = input.chains[0]!.length;
  }
  return { medianMs: quantile(samples, 0.5), p90Ms: quantile(samples, 0.9), bodyKiB: Math.round(text.length / 1024), links };
}

const rows: DecisionResults["rows"] = [];
if (!values.json) {
  console.log(`routing decision cost (parse + chain + lookup on ${REPLICAS} replicas + choose + record), n = ${SAMPLES} per row after 20 warm-up decisions, median / p90 in ms`);
  console.log("policy        context   body KiB  links  index entries   median     p90");
}
for (const policy of ["hybrid", "cache-aware"] as PolicyName[]) {
  for (const fill of [0, BOUND]) {
    const router = routerWith(policy, fill);
    for (const [tokens, turns] of [[1_000, 2], [8_000, 4], [90_000, 30]] as const) {
      const r = measure(router, tokens, turns);
      rows.push({ policy, tokens, indexEntries: fill, ...r });
      if (!values.json) {
        console.log(
          `${policy.padEnd(12)} ${String(tokens).padStart(8)} ${String(r.bodyKiB).padStart(10)} ${String(r.links).padStart(6)} ${String(fill).padStart(14)} ${r.medianMs.toFixed(3).padStart(8)} ${r.p90Ms.toFixed(3).padStart(7)}`,
        );
      }
    }
  }
}
if (values.json) console.log(JSON.stringify({ replicas: REPLICAS, indexEntries: BOUND, rows } satisfies DecisionResults));
