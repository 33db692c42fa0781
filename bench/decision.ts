/**
 * What one routing decision costs, without HTTP: parse the body, build the prefix chain,
 * look it up on every replica, choose and record — for short chats up to the seed's 90k-
 * token agent context, over 8 replicas, with an empty and a full index. SageMaker quotes
 * 1.3–1.9 ms per request for its routing.
 *
 *   npx bun bench/decision.ts
 */
import { prefixChains } from "../src/route/chain.ts";
import { createHasher } from "../src/route/hash.ts";
import { DEFAULT_CACHE_AWARE, type PolicyName } from "../src/route/options.ts";
import { createPolicy } from "../src/route/policies/index.ts";
import { PrefixIndex } from "../src/route/prefix.ts";
import { Router, type FleetView } from "../src/route/router.ts";
import { shapeOf } from "../src/route/shape.ts";

const REPLICAS = 8;
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

function measure(policy: PolicyName, tokens: number, turns: number, indexFill: number) {
  const index = new PrefixIndex({ maxEntries: 1_000_000, ttlMs: 3_600_000, windowMs: 300_000 });
  const router = new Router({ policy: createPolicy(policy), index, hasher, maxInflight: 0, cacheAware: DEFAULT_CACHE_AWARE });
  // fill the index with other conversations first
  for (let i = 0; index.size < indexFill; i++) {
    const shape = shapeOf("chat", JSON.parse(body(2000, 4, `fill ${i}`)));
    router.commit({ shape, chains: prefixChains(shape, hasher, 1024) }, { replica: `gpu${i % REPLICAS}`, reason: "spread" }, i);
  }
  const text = body(tokens, turns, "measured");
  const samples: number[] = [];
  let links = 0;
  for (let i = -20; i < 60; i++) {
    const t0 = performance.now();
    const shape = shapeOf("chat", JSON.parse(text));
    const input = { shape, chains: prefixChains(shape, hasher, 1024) };
    const d = router.route(input, replicas, 1e9 + i)!;
    router.commit(input, d, 1e9 + i);
    if (i >= 0) samples.push(performance.now() - t0);
    links = input.chains[0]!.length;
  }
  samples.sort((a, b) => a - b);
  return { median: samples[30]!, p90: samples[54]!, chars: text.length, links };
}

console.log(`routing decision cost (parse + chain + lookup on ${REPLICAS} replicas + choose + record), n = 60 per row after 20 warm-up decisions, median / p90 in ms`);
console.log("policy        context   body KiB  links  index entries   median     p90");
for (const policy of ["hybrid", "cache-aware"] as PolicyName[]) {
  for (const [tokens, turns] of [[1_000, 2], [8_000, 4], [90_000, 30]] as const) {
    for (const fill of [0, 200_000]) {
      const r = measure(policy, tokens, turns, fill);
      console.log(
        `${policy.padEnd(12)} ${String(tokens).padStart(8)} ${(r.chars / 1024).toFixed(0).padStart(10)} ${String(r.links).padStart(6)} ${String(fill).padStart(14)} ${r.median.toFixed(3).padStart(8)} ${r.p90.toFixed(3).padStart(7)}`,
      );
    }
  }
}
