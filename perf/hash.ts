/**
 * What hashing a prompt's identity costs: the real chain (src/route/chain.ts: one xxhash64
 * per 1,024-character link, each seeded with the one before) over a 90k-token agent chat
 * and an 8k one, with Bun's built-in xxHash64, the router's hasher. With hash-wasm installed
 * (`npm i --no-save hash-wasm`; it is no longer a dependency) it adds hash-wasm's xxhash64
 * used in bulk the way the router once did — one WASM instance, one update of
 * "previous digest ‖ link text" per link — for the same links. hash-wasm takes its seed only
 * when an instance is created, so it cannot produce today's seeded identities cheaply; the
 * row measures its hashing speed, not a drop-in replacement.
 *
 *   npx bun perf/hash.ts
 */
import { quantile } from "../src/bench/stats.ts";
import { prefixChains } from "../src/route/chain.ts";
import { createHasher } from "../src/route/hash.ts";
import { shapeOf } from "../src/route/shape.ts";
import { agentChat } from "./lib/bodies.ts";

const SAMPLES = 200;

function timeEach(f: () => void): { medianMs: number; p90Ms: number } {
  const samples: number[] = [];
  for (let i = -20; i < SAMPLES; i++) {
    const t0 = performance.now();
    f();
    if (i >= 0) samples.push(performance.now() - t0);
  }
  return { medianMs: quantile(samples, 0.5), p90Ms: quantile(samples, 0.9) };
}

type XXHash64 = { init(): { update(s: string): { digest(f: "hex"): string } } };
async function hashWasm(): Promise<XXHash64 | string> {
  const specifier: string = "hash-wasm"; // not a dependency: resolved only when installed
  try {
    const { createXXHash64 } = (await import(specifier)) as { createXXHash64(): Promise<XXHash64> };
    return await createXXHash64();
  } catch (error) {
    return `hash-wasm is not installed (${(error as Error).message.split("\n")[0]}); \`npm i --no-save hash-wasm\` adds its rows`;
  }
}

const bun = createHasher();
const wasm = await hashWasm();
console.log(`prefix chain hashing (canonical shape → chain; JSON.parse excluded), n = ${SAMPLES} after 20 warm-up, median / p90 ms`);
for (const [label, body] of [
  ["90k-token chat (339 KB)", agentChat(0, 339_000)],
  ["8k-token chat (30 KB)", agentChat(1, 30_000, 4)],
] as const) {
  const shape = shapeOf("chat", JSON.parse(JSON.stringify(body)));
  const links = prefixChains(shape, bun, 1024)[0]!.length;
  const b = timeEach(() => prefixChains(shape, bun, 1024));
  console.log(`  Bun.hash.xxHash64, seeded chain       ${label.padEnd(24)} ${String(links).padStart(4)} links  ${b.medianMs.toFixed(3)} / ${b.p90Ms.toFixed(3)}`);
  if (typeof wasm === "string") continue;
  // The same link texts, hashed the earlier way.
  const texts: string[] = [];
  prefixChains(shape, { hash: (text, seed) => (texts.push(text), bun.hash(text, seed)) }, 1024);
  const w = timeEach(() => {
    let prev = "";
    for (const t of texts) prev = wasm.init().update(prev + "\u001f" + t).digest("hex");
  });
  console.log(`  hash-wasm xxhash64, prev ‖ text       ${label.padEnd(24)} ${String(links).padStart(4)} links  ${w.medianMs.toFixed(3)} / ${w.p90Ms.toFixed(3)}`);
}
if (typeof wasm === "string") console.log(`  ${wasm}`);
