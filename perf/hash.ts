/**
 * Why the router hashes with Bun's built-in xxHash64 and not hash-wasm (the package the
 * design card named): the router's own identity chain (src/route/chain.ts — one xxhash64
 * per canonical segment head and per 1,024-character link, each seeded with the hash
 * before it) for a 90k-token agent chat and a short chat, computed three ways:
 *
 *   Bun.hash.xxHash64(text, seed)                 what src/route/hash.ts calls;
 *   hash-wasm xxhash64(text, seedLo, seedHi)      its one-shot call (a Promise, hex out);
 *   hash-wasm createXXHash64(seedLo, seedHi)      its streaming hasher: the seed is fixed
 *     .update(text).digest()                      when the hasher is created, so a chain
 *                                                 of seeds needs one hasher per link;
 *   hash-wasm, one streaming hasher reused        the best case for its API, the way the
 *     .init().update(prev).update(text)           router once used it: the previous hash
 *                                                 folded into the text instead of the seed.
 *                                                 Other values by construction (not the
 *                                                 router's identities): a speed row only.
 *
 * Each hash-wasm chain is seeded from its own previous output (not from Bun's), and the
 * three seeded arms must give the same hashes, call by call, or the script stops. Samples are whole
 * prompts, the arms interleaved in rotating order; per-call figures are a sample's time ÷
 * its calls. hash-wasm is a devDependency for this script only: nothing is installed at
 * run time and the router never imports it.
 *
 *   npm run perf:hash [-- --samples 51]     (about two minutes on two busy cores)
 */
import { parseArgs } from "node:util";
import { createXXHash64, xxhash64 } from "hash-wasm";
import { quantile } from "../src/bench/stats.ts";
import { prefixChains } from "../src/route/chain.ts";
import { createHasher, hex64 } from "../src/route/hash.ts";
import { shapeOf } from "../src/route/shape.ts";
import { agentChat, smallChat } from "./lib/bodies.ts";

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { samples: { type: "string", default: "51" } } });
const SAMPLES = Number(values.samples);
const WARMUP = 10;
const CHUNK_CHARS = 1024; // routing.chunk_chars' default
const MASK32 = 0xffffffffn;

/**
 * One call of the chain: its text, and how its seed follows from the previous call's hash
 * (seed = previous XOR delta; the first call's seed is 0). Recorded from the router's own
 * chain code, so the replays hash exactly what the router hashes.
 */
interface Call {
  text: string;
  delta: bigint;
}

function callsOf(body: unknown): { calls: Call[]; hashes: bigint[] } {
  const shape = shapeOf("chat", JSON.parse(JSON.stringify(body)));
  const bun = createHasher();
  const calls: Call[] = [];
  const hashes: bigint[] = [];
  prefixChains(shape, {
    hash(text, seed) {
      const prev = hashes.at(-1);
      calls.push({ text, delta: prev === undefined ? 0n : seed ^ prev });
      const h = bun.hash(text, seed);
      hashes.push(h);
      return h;
    },
  }, CHUNK_CHARS);
  if (hashes[0] === undefined || calls[0]!.delta !== 0n) throw new Error("expected the chain's root to be hashed first with seed 0");
  return { calls, hashes };
}

type Chain = (calls: readonly Call[], out: bigint[]) => Promise<void> | void;

const bunChain: Chain = (calls, out) => {
  let prev = 0n;
  for (let i = 0; i < calls.length; i++) {
    const { text, delta } = calls[i]!;
    prev = Bun.hash.xxHash64(text, i === 0 ? 0n : prev ^ delta) as bigint;
    out[i] = prev;
  }
};

const wasmOneShot: Chain = async (calls, out) => {
  let prev = 0n;
  for (let i = 0; i < calls.length; i++) {
    const { text, delta } = calls[i]!;
    const seed = i === 0 ? 0n : prev ^ delta;
    prev = BigInt(`0x${await xxhash64(text, Number(seed & MASK32), Number(seed >> 32n))}`);
    out[i] = prev;
  }
};

const wasmStreaming: Chain = async (calls, out) => {
  let prev = 0n;
  for (let i = 0; i < calls.length; i++) {
    const { text, delta } = calls[i]!;
    const seed = i === 0 ? 0n : prev ^ delta;
    const hasher = await createXXHash64(Number(seed & MASK32), Number(seed >> 32n));
    prev = BigInt(`0x${hasher.update(text).digest("hex")}`);
    out[i] = prev;
  }
};

const reused = await createXXHash64();
const wasmReused: Chain = (calls, out) => {
  let prev = "";
  for (let i = 0; i < calls.length; i++) {
    prev = reused.init().update(prev).update(calls[i]!.text).digest("hex");
    out[i] = BigInt(`0x${prev}`);
  }
};

const ARMS = [
  ["Bun.hash.xxHash64 (the router)", bunChain, true],
  ["hash-wasm xxhash64, one-shot", wasmOneShot, true],
  ["hash-wasm createXXHash64 per link", wasmStreaming, true],
  ["hash-wasm one hasher reused *", wasmReused, false],
] as const;

const fmt = (x: number, digits: number) => x.toFixed(digits);
const spread = (xs: number[], digits: number) => `${fmt(quantile(xs, 0.5), digits)} (${fmt(quantile(xs, 0.1), digits)}–${fmt(quantile(xs, 0.9), digits)})`;

console.log(`identity hashing: the router's prefix chain (src/route/chain.ts, ${CHUNK_CHARS.toLocaleString("en-US")}-character links, seeds chained), Bun ${Bun.version}, hash-wasm ${(await import("hash-wasm/package.json")).version}`);
console.log(`n = ${SAMPLES} prompts per arm after ${WARMUP} warm-up, arms interleaved; median (p10–p90); * = previous hash folded into the text, other values, speed only\n`);

for (const [label, body] of [
  ["90k-token agent chat (339 KB of JSON)", agentChat(0, 339_000)],
  ["short chat (4 messages, ~1 KB)", smallChat(1)],
] as const) {
  const { calls, hashes } = callsOf(body);
  const chars = calls.reduce((n, c) => n + c.text.length, 0);

  // Same values from every seeded arm, call by call.
  for (const [name, chain, seeded] of ARMS) {
    if (!seeded) continue;
    const out: bigint[] = [];
    await chain(calls, out);
    const bad = hashes.findIndex((h, i) => out[i] !== h);
    if (bad >= 0 || out.length !== hashes.length) throw new Error(`${name} differs from the router's chain at call ${bad}: ${hex64(out[bad] ?? 0n)} vs ${hex64(hashes[bad] ?? 0n)}`);
  }

  const us: number[][] = ARMS.map(() => []);
  const out: bigint[] = [];
  for (let s = -WARMUP; s < SAMPLES; s++) {
    for (let k = 0; k < ARMS.length; k++) {
      const a = (s + WARMUP + k) % ARMS.length;
      const t0 = Bun.nanoseconds();
      await ARMS[a]![1](calls, out);
      const elapsed = (Bun.nanoseconds() - t0) / 1000;
      if (s >= 0) us[a]!.push(elapsed);
    }
  }

  console.log(`${label}: ${calls.length} calls per prompt (${chars.toLocaleString("en-US")} characters); the three seeded arms gave the same ${calls.length} hashes`);
  console.log(`  ${"".padEnd(36)}${"µs per call".padEnd(26)}${"ms per prompt".padEnd(30)}÷ Bun, per sample`);
  for (let a = 0; a < ARMS.length; a++) {
    const perCall = us[a]!.map((t) => t / calls.length);
    const perPrompt = us[a]!.map((t) => t / 1000);
    const ratio = us[a]!.map((t, i) => t / us[0]![i]!);
    console.log(`  ${ARMS[a]![0].padEnd(36)}${spread(perCall, 2).padEnd(26)}${spread(perPrompt, 3).padEnd(30)}${a === 0 ? "1" : spread(ratio, 1)}×`);
  }
  console.log("");
}
