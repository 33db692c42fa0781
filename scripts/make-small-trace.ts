/**
 * Writes test/fixtures/trace/small.jsonl: a small trace in the Mooncake format (timestamp
 * ms, input_length, output_length, hash_ids) for the tests and the system suite, which
 * never download a public trace. Deterministic: the same bytes every run.
 *
 *   bun scripts/make-small-trace.ts [--out FILE] [--check]
 *
 * Its blocks are 64 tokens (replay it with --trace-block-tokens 64), so prompts stay small
 * enough for two CPU llama-servers. What it holds, as the public traces do:
 * - a 2-block preamble every request starts with (a system prompt);
 * - 4 shared documents of 6 blocks, each opening about a third of the conversations;
 * - 60 conversations of 1–5 turns over 10 minutes: each turn re-sends the previous one's
 *   full blocks, then the previous prompt's partial tail, the previous reply and a new
 *   question as new blocks (the next turn's blocks at the partial block's place hold more
 *   text, so they get a new id), 5–40 s apart;
 * - every last block partial unless the prompt ends on a block boundary.
 * --check exits 1 when the file differs from what this script writes.
 */
import { rng } from "../src/bench/workloads.ts";

export const SMALL_TRACE_BLOCK_TOKENS = 64;

interface Line {
  timestamp: number;
  input_length: number;
  output_length: number;
  hash_ids: number[];
}

export function smallTrace(seed = 7): Line[] {
  const B = SMALL_TRACE_BLOCK_TOKENS;
  const next = rng(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  let ids = 0;
  const fresh = (n: number) => Array.from({ length: n }, () => ids++);
  const preamble = fresh(2);
  const docs = Array.from({ length: 4 }, () => fresh(6));
  const lines: Line[] = [];
  for (let c = 0; c < 60; c++) {
    let at = between(0, 540_000);
    const doc = next() < 0.35 ? docs[between(0, docs.length - 1)]! : [];
    // The first turn: preamble, perhaps a document, a question ending in a partial block.
    const tail = between(40, 200);
    let blocks = [...preamble, ...doc];
    let input = blocks.length * B + tail;
    let hashIds = [...blocks, ...fresh(Math.ceil(tail / B))];
    const turns = between(1, 5);
    for (let t = 0; t < turns; t++) {
      const output = between(8, 120);
      lines.push({ timestamp: at, input_length: input, output_length: output, hash_ids: hashIds });
      // The next turn: this one's full blocks, then its partial tail + the reply + a question.
      const full = Math.floor(input / B);
      blocks = hashIds.slice(0, full);
      const added = (input - full * B) + output + between(30, 160);
      input = full * B + added;
      hashIds = [...blocks, ...fresh(Math.ceil(added / B))];
      at += between(5_000, 40_000);
    }
  }
  return lines.sort((a, b) => a.timestamp - b.timestamp);
}

export function smallTraceText(): string {
  return smallTrace()
    .map((l) => JSON.stringify(l))
    .join("\n")
    .concat("\n");
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const out = args.includes("--out") ? args[args.indexOf("--out") + 1]! : new URL("../test/fixtures/trace/small.jsonl", import.meta.url).pathname;
  const text = smallTraceText();
  if (args.includes("--check")) {
    const now = await Bun.file(out).text().catch(() => "");
    if (now !== text) {
      console.error(`${out} differs from what scripts/make-small-trace.ts writes: run it again`);
      process.exit(1);
    }
  } else {
    await Bun.write(out, text);
    console.error(`${out}: ${text.split("\n").length - 1} requests`);
  }
}
