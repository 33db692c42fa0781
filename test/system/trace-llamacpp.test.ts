/**
 * A trace replayed end to end through two real llama.cpp `llama-server`s: the small
 * generated trace (test/fixtures/trace/small.jsonl, 64-token blocks, chat-shaped) through
 * `llmroute bench --config`, the bench's own path for a user's replicas. The real engine
 * decides what is cached; the test checks that the report's delivered hit rate is the
 * engines' own: llamacpp:prompt_tokens_cached_total ÷ (it + llamacpp:prompt_tokens_total,
 * which counts only the tokens processed: server-common.h server_metrics), deltas over the
 * run, summed over both replicas.
 *
 * No warm-up (every request sent is measured, as the counters count them all) and one arm
 * (the counters cannot tell arms apart). Replies are one token: llama.cpp's output parser
 * never rejects a one-token answer of the tiny model (test/system/_llamacpp.ts WORDS_ONLY),
 * so no request fails after its prompt was counted. Five trace minutes at 5× speed: about
 * a minute of real arrivals.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { join } from "node:path";
import { parseBenchArgs } from "../../src/bench/args.ts";
import { bench, type BenchOutput } from "../../src/bench/command.ts";
import { loadTrace, TRACE_DEFAULTS } from "../../src/bench/trace.ts";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { killAll } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";
import { startLlamaReplicas } from "./_llamacpp.ts";

/** The real engine on two shared cores: the replay alone takes about a minute, and the machine may be loaded. */
const TIMEOUT = 600_000;
const SMALL = join(import.meta.dir, "../fixtures/trace/small.jsonl");

afterAll(killAll);

async function counters(url: string): Promise<{ cached: number; processed: number }> {
  const metrics = parsePrometheus(await (await fetch(`${url}/metrics`)).text());
  const value = (name: string) => metrics.get(name)?.[0]?.value ?? 0;
  return { cached: value("llamacpp:prompt_tokens_cached_total"), processed: value("llamacpp:prompt_tokens_total") };
}

describe("a trace through two llama-servers, with bench --config", () => {
  it(
    "every request answered; the report's delivered hit rate is the engines' own counters'",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "trace" });
      const dir = await tempDir("llmroute-trace-system-");
      const toml = join(dir, "router.toml");
      // kv_tokens: llama-server -c 65536 (DEFAULT_LLAMA_FLAGS), so the report has its pooled yardstick.
      await Bun.write(toml, replicas.map((r, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${r.url}"\nkv_tokens = 65536\n`).join(""));
      const window = { "trace-block-tokens": "64", "trace-minutes": "5", "trace-speed": "5", "trace-max-output": "1" };
      const before = await Promise.all(replicas.map((r) => counters(r.url)));
      const lines: string[] = [];
      const out: BenchOutput = await bench(parseBenchArgs({ trace: SMALL, config: toml, policies: "hybrid", ...window }), { out: () => {}, progress: { status: () => {}, line: (l) => lines.push(l) } });
      const after = await Promise.all(replicas.map((r) => counters(r.url)));

      expect(out.errors).toBe(0);
      const plan = await loadTrace({ ...TRACE_DEFAULTS, file: SMALL, blockTokens: 64, minutes: 5, speed: 5 });
      const summary = out.blocks[0]!.summaries[0]!;
      const hybrid = summary.arms[0]!;
      expect(hybrid.arm).toBe("hybrid");
      expect(hybrid.trace!.n).toBe(plan.requests.length);
      expect(hybrid.trace!.warmup).toBe(0);

      const cached = after.reduce((a, c, i) => a + c.cached - before[i]!.cached, 0);
      const processed = after.reduce((a, c, i) => a + c.processed - before[i]!.processed, 0);
      const engine = cached / (cached + processed);
      // The trace shares its preamble, documents and earlier turns: the engines found some of it.
      expect(engine).toBeGreaterThan(0.2);
      expect(Math.abs(hybrid.trace!.hitRate - engine)).toBeLessThanOrEqual(0.01);
      // Per card too: each card's share of the report's cached tokens is that card's counter.
      const samples = out.blocks[0]!.result.workloads[0]!.arms[0]!.samples;
      for (const [i] of replicas.entries()) {
        const reported = samples.filter((s) => s.replica === `gpu${i}`).reduce((a, s) => a + s.cachedTokens, 0);
        expect(Math.abs(reported - (after[i]!.cached - before[i]!.cached))).toBeLessThanOrEqual(0.01 * Math.max(1, after[i]!.cached - before[i]!.cached));
      }
      // The report's yardsticks: the cards' KV from router.toml, and the engines named.
      expect(summary.yardstick!.pooled!.kvTokens).toBe(2 * 65_536);
      expect(out.text).toContain("÷ pooled");
      expect(out.text).toMatch(/2 replicas from .*router\.toml \(llama\.cpp/);
    },
    TIMEOUT,
  );
});
