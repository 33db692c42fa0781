/**
 * The router in front of a real engine: two llama.cpp `llama-server` replicas (one thread
 * each, 2 slots of 32,768 tokens), started by the tests from the engine
 * `npm run engine:llamacpp` builds, with llmroute in process between them and the official
 * `openai` client. What llama.cpp really does decides here, not the simulator:
 *
 * - the engine is recognised and read as llama.cpp (counters, slots, restart header, prefill rate);
 * - `llmroute check --probe` says the same, where health is checked, that a repeated prompt is
 *   cached, and which flag adds what is missing;
 * - an agent loop pins, and the engine reports the hits; a shared-document workload hits
 *   near its ceiling; the router's delivered count matches the engine's own counter;
 * - a client gets exactly the bytes the engine sent (nothing added, nothing stripped);
 * - slots that thrash (--cache-ram 0) are said to be the capacity wall, never "cache off",
 *   and a RAM prompt cache that restores is never contradicted by a capacity warning;
 * - two conversations taking turns at a unified KV's wall: one moves to the idle card once
 *   their waits cost as much as its prefill there, and hits there;
 * - a question on a document whose slot is busy waits for that slot (hybrid) and finds the
 *   document cached; sent at once, the engine prefills it again in another slot;
 * - an answer llama.cpp's chat parser rejects (a 500 after the prompt was computed) reaches
 *   the client as sent, and the prompt it computed is remembered where it is cached;
 * - a replica killed and restarted mid-traffic costs no client error before the first byte.
 *
 * Random weights make the text nonsense: nothing here reads it. Sizes are small (a few
 * thousand tokens) so the file fits CI on two cores; timeouts are sized for a loaded box.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { parseConfig } from "../../src/config.ts";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { memoryLog } from "../../src/log.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { killAll, runCli } from "../helpers/proc.ts";
import { startRecorder, type Recorder } from "../helpers/recorder.ts";
import { until } from "../helpers/wait.ts";
import { DEFAULT_LLAMA_FLAGS, startLlamaReplica, startLlamaReplicas, WORDS_ONLY } from "./_llamacpp.ts";

const TIMEOUT = 600_000;

const routers: RouterServer[] = [];
const recorders: Recorder[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  await Promise.all(routers.map((r) => r.stop()));
  await Promise.all(recorders.map((r) => r.stop()));
  await killAll();
});

/** llmroute in process in front of `replicas` (no kv_tokens: the router asks the engines). */
async function router(replicas: { name: string; url: string }[], toml = ""): Promise<RouterServer & { log: ReturnType<typeof memoryLog> }> {
  const text = `${toml}\n[server]\nlisten = "127.0.0.1:0"\n${replicas.map((r) => `[[replica]]\nname = "${r.name}"\nurl = "${r.url}"\n`).join("")}`;
  const log = memoryLog();
  const server = await startRouter(parseConfig(text, "<llamacpp system test>", { env: {} }), { log });
  routers.push(server);
  return Object.assign(server, { log });
}

const clientOf = (url: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: TIMEOUT });

const status = async (url: string) => (await (await fetch(`${url}/status`)).json()) as StatusDocument;
async function engineMetric(url: string, name: string): Promise<number> {
  const samples = parsePrometheus(await (await fetch(`${url}/metrics`)).text()).get(name);
  return samples?.[0]?.value ?? 0;
}

/** `n` lines of text no other request sends: about 20 tokens a line with Qwen2's tokenizer. */
const lines = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${label} line ${i}: replica ${i % 7} holds ${i * 13} tokens of ${label}.`).join("\n");

type Message = OpenAI.ChatCompletionMessageParam;

/** llama-server without --parallel: 4 slots sharing one unified KV of 8,192 tokens (kv_unified). */
const UNIFIED_FLAGS = ["-t", "1", "-c", "8192", "--metrics", "--slots", "--no-ui", "-a", "tiny"];

describe("what the router reads from llama.cpp", () => {
  it(
    "recognised as llama.cpp from its own endpoints: version, slots × per-slot context, counters; and any model name is served",
    async () => {
      const [a] = await startLlamaReplicas(1, { prefix: "read" });
      const r = await router([{ name: "a", url: a!.url }]);
      const s = await status(r.url);
      const facts = s.replicas[0]!.facts as Record<string, any>;
      expect(facts.family).toBe("llamacpp");
      expect(facts.version).toMatch(/^b\d+-[0-9a-f]{7}/);
      expect(facts.capacity).toMatchObject({ kvTokens: 65536, slots: 2, source: "/props" });
      expect(facts.cache_counters).toBe(true);
      // llama-server answers any model name: so does the router in front of it.
      const answer = await clientOf(r.url).chat.completions.create({ model: "a-name-the-engine-never-heard", messages: [{ role: "user", content: "hello" }], max_tokens: 2, ...WORDS_ONLY });
      expect(answer.model).toBe("tiny");
      // llamacpp:n_tokens_max is the largest sequence seen, never taken for a capacity
      expect(s.replicas[0]!.kv.published).toEqual({ tokens: 65536, from: "/props" });
    },
    TIMEOUT,
  );
});

describe("llmroute check --probe against llama-server", () => {
  it(
    "one replica with --metrics, one without: each recognised, checked at /health, its cache seen in a repeated prompt; the one without metrics is told the flag",
    async () => {
      const withMetrics = await startLlamaReplica({ name: "probe-m" });
      const without = await startLlamaReplica({ name: "probe-n", flags: DEFAULT_LLAMA_FLAGS.filter((f) => f !== "--metrics") });
      const dir = mkdtempSync(join(tmpdir(), "llmroute-check-probe-"));
      dirs.push(dir);
      writeFileSync(join(dir, "router.toml"), `[[replica]]\nname = "m"\nurl = "${withMetrics.url}"\n\n[[replica]]\nname = "n"\nurl = "${without.url}"\n`);
      const { code, stdout, stderr } = await runCli(["check", "--probe", "--config", join(dir, "router.toml")]);
      expect({ code, stderr: stderr.includes("asking 2 replica(s)") }).toEqual({ code: 0, stderr: true });
      // A replica's block: its name line and the indented lines under it.
      const block = (name: string) => {
        const all = stdout.split("\n");
        const from = all.findIndex((l) => l.startsWith(`${name}  http`));
        const rest = all.slice(from + 1);
        const end = rest.findIndex((l) => !l.startsWith("  "));
        return (end < 0 ? rest : rest.slice(0, end)).join("\n");
      };
      expect(block("m")).toMatch(/^ {2}engine {5}llama\.cpp b\d+-[0-9a-f]{7}\S* \(from \/metrics \(llamacpp:\*\)\)$/m);
      expect(block("n")).toMatch(/^ {2}engine {5}llama\.cpp b\d+-[0-9a-f]{7}\S* \(from \/v1\/models owned_by "llamacpp"\)$/m);
      for (const name of ["m", "n"]) {
        const lines = block(name);
        expect(lines).toContain("  health     /health: HTTP 200");
        expect(lines).toContain("  KV         65,536 tokens (/props), 2 slots of 32,768");
        // The second of two identical prompts finds all of it cached but the last token.
        expect(lines).toMatch(/^ {2}cached {5}usage\.prompt_tokens_details\.cached_tokens = \d+ on a repeated \d+-token prompt$/m);
        const [, cached, prompt] = /cached_tokens = (\d+) on a repeated (\d+)-token prompt/.exec(lines)!;
        expect({ name, cached: Number(cached) }).toEqual({ name, cached: Number(prompt) - 1 });
      }
      expect(block("m")).not.toContain("no engine metrics");
      expect(block("n")).toContain("→ start llama.cpp with --metrics");
    },
    TIMEOUT,
  );
});

describe("an agent loop through the router", () => {
  it(
    "4 conversations × 6 turns to ~6k tokens: every warm turn on its owner, the engine delivers ≥ 90 % of the previous prompt, and the router's delivered count is the engine's",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "agent" });
      const r = await router(replicas.map((x, i) => ({ name: `gpu${i}`, url: x.url })));
      const client = clientOf(r.url);
      const before = await Promise.all(replicas.map((x) => engineMetric(x.url, "llamacpp:prompt_tokens_cached_total")));
      const converse = async (c: number) => {
        const messages: Message[] = [{ role: "system", content: lines(`agent ${c} ${crypto.randomUUID()}`, 50) }];
        const turns: { replica: string; route: string; prompt: number; cached: number }[] = [];
        for (let t = 0; t < 6; t++) {
          messages.push({ role: "user", content: lines(`tool result ${c}.${t}`, 40) });
          const { data, response } = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 4, temperature: 0, ...WORDS_ONLY }).withResponse();
          turns.push({
            replica: response.headers.get("x-llmroute-replica")!,
            route: response.headers.get("x-llmroute-route")!,
            prompt: data.usage!.prompt_tokens,
            cached: data.usage!.prompt_tokens_details?.cached_tokens ?? 0,
          });
          messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" });
        }
        return turns;
      };
      // Two conversations per replica at a time: no more than the 2 slots each has.
      const conversations = await Promise.all([0, 1, 2, 3].map(converse));
      for (const turns of conversations) {
        expect(turns.at(-1)!.prompt).toBeGreaterThan(4_500);
        for (let t = 1; t < turns.length; t++) {
          expect({ turn: t, replica: turns[t]!.replica, route: turns[t]!.route }).toEqual({ turn: t, replica: turns[t - 1]!.replica, route: "pin" });
          expect(turns[t]!.cached).toBeGreaterThanOrEqual(0.9 * turns[t - 1]!.prompt);
        }
      }
      // Requests went only through the router: its delivered count per replica is the engine's counter.
      const metrics = parsePrometheus(await (await fetch(`${r.url}/metrics`)).text()).get("llmroute_cached_tokens_total") ?? [];
      for (const [i, x] of replicas.entries()) {
        const engine = (await engineMetric(x.url, "llamacpp:prompt_tokens_cached_total")) - before[i]!;
        const routed = metrics.find((m) => m.labels.replica === `gpu${i}`)?.value ?? 0;
        expect(Math.abs(routed - engine)).toBeLessThanOrEqual(0.01 * engine);
      }
      // No false verdicts: nothing read as an eviction or a cache that is off.
      const s = await status(r.url);
      for (const rep of s.replicas) expect(rep.hit.predictions.miss).toBe(0);
      expect(s.warnings).toEqual([]);
      // The prefill rate is the engine's own (llamacpp:prompt_tokens_total / prompt_seconds_total), not the 4,000 guess.
      await Promise.all(r.fleet.replicas.map((x) => r.fleet.watch.scrape(x)));
      for (const [i, x] of replicas.entries()) {
        const rate = (await engineMetric(x.url, "llamacpp:prompt_tokens_total")) / (await engineMetric(x.url, "llamacpp:prompt_seconds_total"));
        const believed = r.fleet.replicas[i]!.prefill.rate;
        expect(believed).not.toBe(4_000);
        expect(believed / rate).toBeGreaterThan(0.5);
        expect(believed / rate).toBeLessThan(2);
      }
    },
    TIMEOUT,
  );
});

describe("shared documents through the router", () => {
  it(
    "4 documents × 4 questions each: the hit rate is ≥ 95 % of its ceiling (each document's first request must miss)",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "docs" });
      const r = await router(replicas.map((x, i) => ({ name: `gpu${i}`, url: x.url })));
      const client = clientOf(r.url);
      const salt = crypto.randomUUID();
      const docs = [0, 1, 2, 3].map((d) => lines(`document ${d} ${salt}`, 120));
      const order = [0, 1, 2, 3, 0, 1, 2, 3, 2, 0, 3, 1, 1, 3, 0, 2];
      let prompt = 0;
      let cached = 0;
      let ceiling = 0;
      const docTokens = new Map<number, number>();
      const seen = new Set<number>();
      for (const [i, d] of order.entries()) {
        const data = await client.chat.completions.create({
          model: "tiny",
          messages: [
            { role: "system", content: docs[d]! },
            { role: "user", content: `question ${i}: what does line ${i * 7} say?` },
          ],
          max_tokens: 2,
          ...WORDS_ONLY,
        });
        prompt += data.usage!.prompt_tokens;
        cached += data.usage!.prompt_tokens_details?.cached_tokens ?? 0;
        // The ceiling: a document's first request computes it; every later one could reuse it.
        if (!seen.has(d)) docTokens.set(d, data.usage!.prompt_tokens - 30);
        else ceiling += docTokens.get(d)!;
        seen.add(d);
      }
      const hit = cached / prompt;
      const best = ceiling / prompt;
      expect(hit / best).toBeGreaterThanOrEqual(0.95);
    },
    TIMEOUT,
  );
});

describe("a document whose slot is busy (llama.cpp never gives a request a busy slot)", () => {
  /**
   * Three questions on one ~10,000-token document through `policy`: the first (4 tokens, EOS
   * ignored) warms a card and times its generations; the second runs there (48 tokens); the
   * third is sent at the second's first token, while its slot is busy. Returns the third's
   * route, the tokens the engine found cached for it, and whether its first token came after
   * the second's last.
   */
  async function thirdQuestion(policy: string) {
    const replicas = await startLlamaReplicas(2, { prefix: `busy-${policy}` });
    const r = await router(replicas.map((x, i) => ({ name: `gpu${i}`, url: x.url })), `[routing]\npolicy = "${policy}"\n`);
    await until(async () => ((await status(r.url)).replicas.every((x) => x.engine?.family === "llamacpp") ? true : undefined), "discovery of both llama-servers");
    const client = clientOf(r.url);
    const doc = lines(`busy document ${crypto.randomUUID()}`, 120);
    const events: string[] = [];
    const ask = async (q: string, maxTokens: number, onFirst?: () => void) => {
      const { data, response } = await client.chat.completions
        .create({ model: "tiny", messages: [{ role: "system", content: doc }, { role: "user", content: `${q}: what does it say?` }], max_tokens: maxTokens, stream: true, stream_options: { include_usage: true }, ignore_eos: true, ...WORDS_ONLY } as OpenAI.ChatCompletionCreateParamsStreaming)
        .withResponse();
      let cached = 0;
      let prompt = 0;
      for await (const chunk of data) {
        if (chunk.choices[0]?.delta?.content && !events.includes(`${q} first`)) {
          events.push(`${q} first`);
          onFirst?.();
        }
        if (chunk.usage) [prompt, cached] = [chunk.usage.prompt_tokens, chunk.usage.prompt_tokens_details?.cached_tokens ?? 0];
      }
      events.push(`${q} end`);
      return { replica: response.headers.get("x-llmroute-replica"), route: response.headers.get("x-llmroute-route")!, prompt, cached };
    };
    const q1 = await ask("q1", 4);
    let third: ReturnType<typeof ask> | undefined;
    const q2 = await ask("q2", 48, () => (third = ask("q3", 4)));
    const q3 = await third!;
    return { q1, q2, q3, afterSecond: events.indexOf("q2 end") < events.indexOf("q3 first") };
  }

  it(
    "hybrid holds the next question until that slot frees: the engine then finds the whole document cached; sent at once (affinity), it prefills it again in another slot",
    async () => {
      const held = await thirdQuestion("hybrid");
      expect(held.q2.replica).toBe(held.q1.replica);
      expect(held.q3).toMatchObject({ replica: held.q1.replica, route: "cache,held" });
      expect(held.afterSecond).toBe(true);
      expect(held.q1.prompt).toBeGreaterThan(8_000);
      // The document is what the questions share: all of it but the question's own ~10 tokens.
      expect(held.q3.cached).toBeGreaterThanOrEqual(held.q3.prompt - 30);

      const atOnce = await thirdQuestion("affinity");
      expect(atOnce.q3.replica).toBe(atOnce.q1.replica);
      expect(atOnce.q3.route).not.toContain("held");
      expect(atOnce.q3.cached).toBeLessThan(0.1 * atOnce.q3.prompt);
    },
    TIMEOUT,
  );
});

describe("the bytes a client receives are the engine's", () => {
  it(
    "streamed and not, chat and completions, with and without stream_options: the client gets every byte the engine sent, and the engine gets the client's body",
    async () => {
      const engine = await startLlamaReplica({ name: "bytes" });
      const recorder = startRecorder(engine.url);
      recorders.push(recorder);
      const r = await router([{ name: "gpu0", url: recorder.url }]);
      const cases: [string, Record<string, unknown>][] = [
        ["/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "a streamed chat, no stream_options" }], max_tokens: 4, stream: true, ...WORDS_ONLY }],
        ["/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "a streamed chat with usage" }], max_tokens: 4, stream: true, stream_options: { include_usage: true }, ...WORDS_ONLY }],
        ["/v1/chat/completions", { model: "tiny", messages: [{ role: "user", content: "a whole chat" }], max_tokens: 4, ...WORDS_ONLY }],
        ["/v1/completions", { model: "tiny", prompt: "a streamed completion", max_tokens: 4, stream: true, ...WORDS_ONLY }],
        ["/v1/completions", { model: "tiny", prompt: "a whole completion", max_tokens: 4, ...WORDS_ONLY }],
      ];
      const answered: string[] = [];
      for (const [path, body] of cases) {
        const sent = JSON.stringify(body);
        const res = await fetch(`${r.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: sent });
        const received = new Uint8Array(await res.arrayBuffer());
        const exchange = recorder.to(path).at(-1)!;
        expect({ path, status: res.status }).toEqual({ path, status: 200 });
        expect(exchange.status).toBe(200);
        expect(new TextDecoder().decode(exchange.requestBody)).toBe(sent);
        expect(new TextDecoder().decode(received)).toBe(new TextDecoder().decode(exchange.responseBody));
        expect(Buffer.compare(Buffer.from(received), Buffer.from(exchange.responseBody))).toBe(0);
        answered.push(new TextDecoder().decode(exchange.responseBody));
      }
      // The stream without stream_options kept llama.cpp's timings on its last chunk, and the
      // completions stream its usage: what the router needs came unasked.
      expect(answered[0]).toContain('"timings":{"cache_n"');
      expect(answered[3]).toContain('"usage":{');
      const s = await status(r.url);
      expect(s.replicas[0]!.prompt_tokens).toBeGreaterThan(0);
    },
    TIMEOUT,
  );
});

describe("capacity as llama.cpp has it", () => {
  /** Four conversations taking turns, each turn after the other three. */
  async function interleave(url: string, turns: number): Promise<number[][]> {
    const client = clientOf(url);
    const salt = crypto.randomUUID();
    const histories: Message[][] = [0, 1, 2, 3].map((c) => [{ role: "system", content: lines(`conversation ${c} ${salt}`, 40) }]);
    const cached: number[][] = [[], [], [], []];
    for (let t = 0; t < turns; t++) {
      for (const [c, messages] of histories.entries()) {
        messages.push({ role: "user", content: lines(`turn ${c}.${t}`, 10) });
        const data = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 2, temperature: 0, ...WORDS_ONLY });
        cached[c]!.push(data.usage!.prompt_tokens_details?.cached_tokens ?? 0);
        messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" });
      }
    }
    return cached;
  }

  it(
    "--cache-ram 0: four conversations on two slots thrash; the router says so as the slot wall, never that the cache may be off",
    async () => {
      const engine = await startLlamaReplica({ name: "thrash", extraFlags: ["--cache-ram", "0"] });
      const r = await router([{ name: "gpu0", url: engine.url }], `[routing]\ncapacity_window = "10m"\n`);
      const cached = await interleave(r.url, 4);
      // the engine: warm turns found next to nothing (their slots were taken)
      const warm = cached.flatMap((c) => c.slice(1));
      expect(warm.filter((n) => n > 200)).toHaveLength(0);
      const s = await status(r.url);
      const text = s.warnings.join("\n");
      expect(text).not.toMatch(/cache may be off/);
      expect(s.replicas[0]!.hit.predictions.miss).toBeGreaterThan(0);
      expect(text).toMatch(/gpu0: \d+ conversations active on 2 slots/);
    },
    TIMEOUT,
  );

  it(
    "the default RAM prompt cache: six documents on two slots come back from RAM on revisit, and no capacity warning says otherwise",
    async () => {
      const engine = await startLlamaReplica({ name: "ram" });
      const r = await router([{ name: "gpu0", url: engine.url }], `[routing]\ncapacity_window = "10m"\n`);
      const client = clientOf(r.url);
      const salt = crypto.randomUUID();
      const ask = (d: number, q: string) =>
        client.chat.completions.create({
          model: "tiny",
          messages: [
            { role: "system", content: lines(`document ${d} ${salt}`, 120) },
            { role: "user", content: q },
          ],
          max_tokens: 2,
          ...WORDS_ONLY,
        });
      for (let d = 0; d < 6; d++) await ask(d, "first");
      const revisits = [];
      for (let d = 0; d < 6; d++) revisits.push(await ask(d, "again"));
      for (const data of revisits) expect(data.usage!.prompt_tokens_details!.cached_tokens!).toBeGreaterThan(0.9 * (data.usage!.prompt_tokens - 20));
      const s = await status(r.url);
      expect(s.warnings).toEqual([]);
      expect(s.replicas[0]!.hit.predictions.miss).toBe(0);
    },
    TIMEOUT,
  );
});

describe("a unified KV that overflows (llama-server's default without --parallel)", () => {
  it(
    "two prompts that do not fit its KV together: what llama.cpp turns away is sent again once the other is done, and both clients get answers",
    async () => {
      // No --parallel: 4 slots sharing one pool of 8,192 tokens (kv_unified). Two ~6.6k-token
      // prompts on one card fail there with "Context size has been exceeded." when sent at once:
      // llama-server packs up to 2,048 prompt tokens a step across its slots and frees the first
      // request's KV a step after its prompt ends, when the two hold about 10,240 tokens whatever
      // the arrival order (with ~4.4k-token prompts, 8,192 — all of it — and on CI both were served).
      const [a, b] = await Promise.all([startLlamaReplica({ name: "unified0", flags: UNIFIED_FLAGS }), startLlamaReplica({ name: "unified1", flags: UNIFIED_FLAGS })]);
      // affinity: the two share their first message, so both go to the card it hashes to.
      const r = await router([{ name: "gpu0", url: a.url }, { name: "gpu1", url: b.url }], `[routing]\npolicy = "affinity"\n`);
      const client = clientOf(r.url);
      // Two words (WORDS_ONLY): llama.cpp's chat output parser never sees a broken character,
      // so every 500 here is the KV's.
      const ask = (label: string) =>
        client.chat.completions
          .create({ model: "tiny", messages: [{ role: "system", content: "Answer briefly." }, { role: "user", content: lines(label, 330) }], max_tokens: 2, temperature: 0, ...WORDS_ONLY })
          .withResponse();
      const answers = await Promise.all([ask("first"), ask("second")]);
      expect(answers.map((x) => x.response.status)).toEqual([200, 200]);
      expect(answers.every((x) => x.data.usage!.prompt_tokens > 4_000)).toBe(true);
      // The engine did turn one away at least once (the point of the test), and the router
      // sent it again rather than pass the 500 on; the card stayed up.
      const s = await status(r.url);
      const card = s.replicas.find((x) => x.name === answers[0]!.response.headers.get("x-llmroute-replica"))!;
      expect(card.kv_full).toBeGreaterThanOrEqual(1);
      expect(s.replicas.map((x) => x.state)).toEqual(["up", "up"]);
      const failovers = r.log.records.filter((x) => x.msg === "failover");
      expect(failovers.length).toBe(card.kv_full);
      expect(failovers.every((x) => String(x.fields.reason).startsWith('its KV is full ("Context size has been exceeded."'))).toBe(true);
    },
    TIMEOUT,
  );
});

describe("conversations taking turns at a unified KV's wall (the default policy's `wall`)", () => {
  it(
    "two conversations that do not fit one card's KV together: once their turns have waited as long as a prefill elsewhere, one moves to the idle card, once, and hits there",
    async () => {
      // As above: one pool of 8,192 tokens; conversations of ~6.5k tokens, two of which overflow
      // it when their turns run together. A third, on the other card, ends after its first turn.
      const [a, b] = await Promise.all([startLlamaReplica({ name: "wall0", flags: UNIFIED_FLAGS }), startLlamaReplica({ name: "wall1", flags: UNIFIED_FLAGS })]);
      const r = await router([{ name: "gpu0", url: a.url }, { name: "gpu1", url: b.url }]);
      const client = clientOf(r.url);
      const conversation = (label: string): Message[] => [{ role: "system", content: "Answer briefly." }, { role: "user", content: lines(label, 330) }];
      /** One turn: its answer (48 tokens, so a turn takes a while) and a short tool result are added. */
      const turn = async (messages: Message[], i: number) => {
        const { data, response } = await client.chat.completions
          .create({ model: "tiny", messages, max_tokens: 48, temperature: 0, ...WORDS_ONLY })
          .withResponse();
        messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" }, { role: "user", content: `tool output ${i}: ok` });
        return { route: `${response.headers.get("x-llmroute-replica")} ${response.headers.get("x-llmroute-route")}`, usage: data.usage! };
      };
      const [x, y, z] = [conversation("first"), conversation("second"), conversation("third")];
      // The counter spreads the first turns: x and z on gpu0, y on gpu1 (y is done after it).
      expect([(await turn(x, 1)).route, (await turn(y, 1)).route, (await turn(z, 1)).route]).toEqual(["gpu0 spread", "gpu1 spread", "gpu0 spread"]);
      // x and z then work at once, turn after turn: the first pair overflows gpu0's KV and the
      // router holds one below the wall; each turn then waits for the other's.
      const pairs: { route: string; usage: OpenAI.CompletionUsage }[][] = [];
      for (let i = 2; i <= 10; i++) pairs.push(await Promise.all([turn(x, i), turn(z, i)]));
      const routes = pairs.map((p) => p.map((t) => t.route));
      expect(routes.flat().filter((route) => route.includes("wall"))).toEqual(["gpu1 wall"]);
      const moved = routes.findIndex((p) => p.includes("gpu1 wall"));
      expect(moved).toBeGreaterThan(0); // a wall moves nothing before it has cost waits
      for (const p of routes.slice(moved + 1)) expect([...p].sort()).toEqual(["gpu0 pin", "gpu1 pin"]);
      // The engine confirms what the move bought: after its one prefill on gpu1, every turn
      // there and on gpu0 finds the conversation's whole previous prompt cached.
      for (let k = moved + 1; k < pairs.length; k++) {
        for (const j of [0, 1]) expect(pairs[k]![j]!.usage.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThanOrEqual(0.99 * pairs[k - 1]![j]!.usage.prompt_tokens);
      }
      const s = await status(r.url);
      const card0 = s.replicas.find((c) => c.name === "gpu0")!;
      expect(card0.kv_full).toBeGreaterThanOrEqual(1);
      expect(card0.kv_wall).toMatchObject({ waited_s: 0 }); // paid by the move; no one waited since
    },
    TIMEOUT,
  );
});

describe("an answer llama.cpp's chat parser rejects", () => {
  it(
    "its 500 reaches the client as the engine sent it, and the prompt it computed is remembered: the same chat again goes there and finds it cached",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "parser" });
      const r = await router(replicas.map((x, i) => ({ name: `gpu${i}`, url: x.url })));
      const content = `${crypto.randomUUID()} ${lines("parser", 80)}`;
      const send = (extra: Record<string, unknown>) =>
        fetch(`${r.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content }], max_tokens: 2, ...extra }),
        });
      // What WORDS_ONLY avoids, asked for: token 123516 of Qwen2's vocabulary is part of a
      // character (alone it detokenizes to U+FFFD), so two of it break one, and the parser fails.
      const rejected = await send({ logit_bias: { "123516": 100 } });
      expect(rejected.status).toBe(500);
      expect(await rejected.json()).toEqual({ error: { code: 500, message: "The model produced output that does not match the expected peg-native format", type: "server_error" } });
      // The same chat again, without the bias.
      const again = await send(WORDS_ONLY);
      expect(again.status).toBe(200);
      expect(again.headers.get("x-llmroute-replica")).toBe(rejected.headers.get("x-llmroute-replica"));
      const usage = ((await again.json()) as OpenAI.ChatCompletion).usage!;
      expect(usage.prompt_tokens_details!.cached_tokens!).toBe(usage.prompt_tokens - 1);
      expect((await status(r.url)).replicas.map((x) => x.state)).toEqual(["up", "up"]);
    },
    TIMEOUT,
  );
});

describe("a replica killed and restarted mid-traffic", () => {
  it(
    "requests fail over before the first byte (no client error), the restart is seen and the replica's prefixes forgotten, and it serves again",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "restart" });
      const r = await router(
        replicas.map((x, i) => ({ name: `gpu${i}`, url: x.url })),
        `[health]\ninterval = "1s"\ntimeout = "900ms"\n`,
      );
      const client = clientOf(r.url);
      const salt = crypto.randomUUID();
      const ask = (k: number) =>
        client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: `${salt} request ${k}: ${lines("traffic", 20)}` }], max_tokens: 2, ...WORDS_ONLY }).withResponse();
      const served: string[] = [];
      for (let k = 0; k < 4; k++) served.push((await ask(k)).response.headers.get("x-llmroute-replica")!);
      expect(new Set(served)).toEqual(new Set(["gpu0", "gpu1"]));
      await replicas[0]!.stop("SIGKILL");
      // While it is gone: every request is answered (failed over before its first byte).
      for (let k = 4; k < 8; k++) {
        const { response } = await ask(k);
        expect(response.status).toBe(200);
        expect(response.headers.get("x-llmroute-replica")).toBe("gpu1");
      }
      await replicas[0]!.restart();
      // The router notices it is back (its active check) and routes to it again.
      for (;;) {
        const s = await status(r.url);
        if (s.replicas[0]!.state === "up") break;
        await Bun.sleep(100);
      }
      const s = await status(r.url);
      expect(s.replicas[0]!.cache_losses).toBeGreaterThanOrEqual(1);
      expect(s.replicas[0]!.index_entries).toBe(0);
      const again = new Set<string>();
      for (let k = 8; k < 12; k++) again.add((await ask(k)).response.headers.get("x-llmroute-replica")!);
      expect(again.has("gpu0")).toBe(true);
    },
    TIMEOUT,
  );

  it(
    "a restart between two checks (no refused connection seen) shows as a new Process-Start-Time-Unix: the cache is forgotten, with the reason logged",
    async () => {
      const [engine] = await startLlamaReplicas(1, { prefix: "header" });
      const r = await router([{ name: "gpu0", url: engine!.url }], `[health]\ninterval = "10m"\n`);
      await clientOf(r.url).chat.completions.create({ model: "tiny", messages: [{ role: "user", content: lines("before the restart", 20) }], max_tokens: 2, ...WORDS_ONLY });
      expect((await status(r.url)).replicas[0]!.index_entries).toBeGreaterThan(0);
      await engine!.restart();
      await r.fleet.watch.check(r.fleet.replicas[0]!);
      const lost = r.log.records.find((x) => x.msg.startsWith("replica cache lost"));
      expect(String(lost?.fields.reason)).toMatch(/^engine restarted: process-start-time-unix \d+ → \d+$/);
      expect((await status(r.url)).replicas[0]!.index_entries).toBe(0);
    },
    TIMEOUT,
  );
});

describe("llmroute probe against llama.cpp", () => {
  it(
    "a replica with its cache: verdict 0, direct and --via; one started with --no-cache-prompt: verdict 1, direct and --via",
    async () => {
      const [cached, uncached] = await Promise.all([startLlamaReplica({ name: "probe-on" }), startLlamaReplica({ name: "probe-off", extraFlags: ["--no-cache-prompt"] })]);
      const on = await runCli(["probe", "--url", cached.url, "--tokens", "2000", "--repeat", "1"]);
      expect({ code: on.code, out: on.stdout }).toMatchObject({ code: 0, out: expect.stringContaining("prefix cache works") });
      const off = await runCli(["probe", "--url", uncached.url, "--tokens", "2000", "--repeat", "1"]);
      expect({ code: off.code, out: off.stdout }).toMatchObject({ code: 1, out: expect.stringContaining("no cache effect") });
      const viaOn = await router([{ name: "gpu0", url: cached.url }]);
      const viaOff = await router([{ name: "gpu0", url: uncached.url }]);
      const onVia = await runCli(["probe", "--via", viaOn.url, "--tokens", "2000", "--turns", "3"]);
      expect({ code: onVia.code, out: onVia.stdout + onVia.stderr }).toMatchObject({ code: 0 });
      const offVia = await runCli(["probe", "--via", viaOff.url, "--tokens", "2000", "--turns", "3"]);
      expect({ code: offVia.code, out: offVia.stdout + offVia.stderr }).toMatchObject({ code: 1 });
      // Its context check reads the slot's context: a prompt larger than a slot is refused before it is sent.
      const big = await runCli(["probe", "--url", cached.url, "--tokens", "40000"]);
      expect(big.code).toBe(2);
      expect(big.stdout + big.stderr).toContain("a slot's context, meta.n_ctx 32768");
    },
    TIMEOUT,
  );
});

describe("llmroute bench --config against llama.cpp", () => {
  it(
    "--small with the replicas of a router.toml: runs end to end, names the engine and its version, says real time, and hybrid pins every warm turn the engine then serves from cache",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "bench" });
      const dir = mkdtempSync(join(tmpdir(), "llmroute-bench-real-"));
      dirs.push(dir);
      const config = join(dir, "real.toml");
      writeFileSync(config, replicas.map((x, i) => `[[replica]]\nname = "llama${i}"\nurl = "${x.url}"\n`).join(""));
      const json = join(dir, "real.json");
      const run = await runCli(["bench", "--config", config, "--small", "--workload", "agent", "--policies", "roundrobin,hybrid", "--turns", "4", "--context-tokens", "4500", "--json", json]);
      expect({ code: run.code, stderr: run.stderr }).toMatchObject({ code: 0 });
      expect(run.stdout).toMatch(/2 replicas from .*real\.toml \(llama\.cpp b\d+-[0-9a-f]{7}\), model tiny: real time/);
      // No time scale applies to real replicas: nothing is called "model time".
      expect(run.stdout + run.stderr).not.toMatch(/ s model\b|model time/);
      const report = JSON.parse(readFileSync(json, "utf8"));
      type Sample = { group: number; index: number; replica: string; route: string; status: number; cachedTokens: number; promptTokens: number; error?: string };
      const arms = report.engines[0].runs[0].workloads[0].arms as { arm: string; samples: Sample[] }[];
      const hybrid = arms.find((a) => a.arm === "hybrid")!;
      expect(hybrid.samples.length).toBe(4);
      // Random weights can trip llama.cpp's own output parser after the prompt was computed
      // (a stream error now and then): such a turn still shows where it went, not its usage.
      const parsed = (s: Sample) => !s.error || !/does not match the expected/.test(s.error);
      for (const s of hybrid.samples) expect({ status: s.status, error: parsed(s) ? s.error : undefined }).toEqual({ status: 200, error: undefined });
      for (const [i, s] of hybrid.samples.entries()) {
        if (i === 0) continue;
        const previous = hybrid.samples[i - 1]!;
        expect({ turn: s.index, replica: s.replica, route: s.route }).toEqual({ turn: s.index, replica: previous.replica, route: "pin" });
        // usage's cached_tokens, as llama.cpp counted them: the previous turn's prompt, bar the last few tokens.
        if (parsed(s) && parsed(previous)) expect(s.cachedTokens).toBeGreaterThanOrEqual(0.9 * previous.promptTokens);
      }
    },
    TIMEOUT,
  );
});
