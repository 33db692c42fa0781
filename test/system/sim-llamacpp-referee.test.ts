/**
 * The real llama-server referees the sim's llamacpp profile (DESIGN decision 11): the same
 * requests to both, and the shapes a client or a router reads must agree — body and chunk
 * keys in order, where usage and timings ride with include_usage on and off, the /v1/models,
 * /props and /slots shapes, the /metrics names, the restart header, the overflow error — and
 * so must the capacity a router reads: the slot engine started with the real server's
 * `-c 8192 --parallel 2` shows the same slots with the same n_ctx. Output text is random on
 * the tiny model, so only shapes are compared.
 *
 * Runs the engine `npm run engine:llamacpp` made (or LLMROUTE_LLAMA_SERVER and
 * LLMROUTE_LLAMA_MODEL), started by test/system/_llamacpp.ts; missing, the test fails and
 * says what to run.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { startSim, type SimServer } from "../../src/sim/index.ts";
import { killAll } from "../helpers/proc.ts";
import { startLlamaReplica, WORDS_ONLY, type LlamaReplica } from "./_llamacpp.ts";

/** Sized for a loaded box: the launcher alone may wait 120 s for the engine to be ready. */
const TIMEOUT = 600_000;

/** The sims the tests start (the llama-servers are the launcher's: killAll stops them). */
const sims: SimServer[] = [];

afterAll(async () => {
  await Promise.all(sims.map((x) => x.stop()));
  await killAll();
});

/** A real llama-server: `-c 8192 --parallel 2` unless `args` say otherwise. */
const startReal = (args: readonly string[] = ["-c", "8192", "--parallel", "2"]): Promise<LlamaReplica> =>
  startLlamaReplica({ name: "referee", flags: ["-t", "1", ...args, "--metrics", "--slots", "--no-ui", "-a", "sim-model"] });

async function sim(options: Parameters<typeof startSim>[0]): Promise<SimServer> {
  const server = await startSim(options);
  sims.push(server);
  return server;
}

type Json = Record<string, any>;

const post = (url: string, path: string, body: unknown) => fetch(`${url}${path}`, { method: "POST", body: JSON.stringify(body) });

async function chunks(res: Response): Promise<Json[]> {
  return (await res.text())
    .split("\n\n")
    .filter((e) => e.startsWith("data: {"))
    .map((e) => JSON.parse(e.slice(6)));
}

/** Key paths of a JSON value, in order (values dropped: the text is random). */
function shape(value: unknown): unknown {
  if (Array.isArray(value)) return value.length === 0 ? [] : [shape(value[0])];
  if (value && typeof value === "object") return Object.entries(value).map(([k, v]) => [k, shape(v)]);
  return value === null ? null : typeof value;
}

describe("the llamacpp profile against a real llama-server", () => {
  it("agrees on bodies, chunks, capacity endpoints, metrics and the restart header", async () => {
    const [real, simulated] = await Promise.all([startReal(), sim({ port: 0, profile: "tiny", engine: "llamacpp", kvTokens: 8192, parallel: 2 })]);
    const urls = [real.url, simulated.url] as const;
    const both = async <T>(f: (url: string) => Promise<T>): Promise<[T, T]> => [await f(urls[0]), await f(urls[1])];
    const chat = { messages: [{ role: "user", content: "hello there" }], max_tokens: 3, ...WORDS_ONLY };

    const [rb, sb] = await both(async (u) => (await post(u, "/v1/chat/completions", chat)).json() as Promise<Json>);
    expect(shape(sb)).toEqual(shape(rb));

    for (const extra of [{}, { stream_options: { include_usage: true } }]) {
      const [rc, sc] = await both(async (u) => chunks(await post(u, "/v1/chat/completions", { ...chat, stream: true, ...extra })));
      // first chunk (role), a token chunk, and the last two: the same keys in the same order
      for (const pick of [(c: Json[]) => c[0], (c: Json[]) => c[1], (c: Json[]) => c.at(-2), (c: Json[]) => c.at(-1)]) {
        expect(shape(pick(sc))).toEqual(shape(pick(rc)));
      }
    }
    const [rcomp, scomp] = await both(async (u) => chunks(await post(u, "/v1/completions", { prompt: "once upon a time there", max_tokens: 2, stream: true, ...WORDS_ONLY })));
    expect(shape(scomp.at(-1))).toEqual(shape(rcomp.at(-1)));

    const [rm, sm] = await both(async (u) => (await fetch(`${u}/v1/models`)).json() as Promise<Json>);
    expect(Object.keys(sm)).toEqual(Object.keys(rm));
    expect(Object.keys(sm.data[0])).toEqual(Object.keys(rm.data[0]));
    expect(Object.keys(sm.data[0].meta)).toEqual(Object.keys(rm.data[0].meta));
    expect(sm.data[0].owned_by).toBe(rm.data[0].owned_by);

    const [rp, sp] = await both(async (u) => (await fetch(`${u}/props`)).json() as Promise<Json>);
    // The same capacity: slots, and n_ctx per slot (8192 split in two, llama-context.cpp n_ctx_seq).
    // (Before toMatchObject below: Bun 1.4.5's writes its expect.any() matchers into the object it reads.)
    expect([sp.total_slots, sp.default_generation_settings.n_ctx]).toEqual([rp.total_slots, rp.default_generation_settings.n_ctx]);
    for (const p of [rp, sp]) expect(p).toMatchObject({ total_slots: expect.any(Number), default_generation_settings: { n_ctx: expect.any(Number) } });
    const [rs, ss] = await both(async (u) => (await fetch(`${u}/slots`)).json() as Promise<Json[]>);
    for (const key of ["id", "n_ctx", "is_processing"]) {
      expect(rs[0]).toHaveProperty(key);
      expect(ss[0]).toHaveProperty(key);
    }
    const capacity = (slots: Json[]) => slots.map((s) => [s.id, s.n_ctx, s.is_processing]);
    expect(capacity(ss)).toEqual(capacity(rs));

    const [rx, sx] = await both(async (u) => {
      const res = await fetch(`${u}/metrics`);
      const names = (await res.text()).split("\n").filter((l) => l.startsWith("# TYPE ")).map((l) => l.split(" ").slice(2).join(" "));
      return { names, start: res.headers.get("process-start-time-unix") };
    });
    expect(sx.names).toEqual(rx.names);
    for (const x of [rx, sx]) expect(x.start).toMatch(/^\d+$/);

    const long = { messages: [{ role: "user", content: Array.from({ length: 9000 }, (_, i) => `w${i}`).join(" ") }], max_tokens: 2 };
    const [ro, so] = await both(async (u) => {
      const res = await post(u, "/v1/chat/completions", long);
      return { status: res.status, body: (await res.json()) as Json };
    });
    expect(so.status).toBe(ro.status);
    expect(Object.keys(so.body.error)).toEqual(Object.keys(ro.body.error));
    expect(so.body.error.type).toBe(ro.body.error.type);
  }, TIMEOUT);

  it("agrees on a unified KV that overflows: two prompts that fit alone but not together are failed with the same 500 body", async () => {
    // llama-server's default (no --parallel): 4 slots sharing one KV of 8,192 tokens.
    const [unified, simUnified] = await Promise.all([startReal(["-c", "8192"]), sim({ port: 0, profile: "tiny", engine: "llamacpp", kvTokens: 8192, prefillTps: 2_000 })]);
    // ~6.6k tokens each on both tokenizers (Qwen2's ~20 a line here; the sim's 4 characters a
    // token). llama-server packs up to n_batch (2,048) prompt tokens a step across its slots, and
    // frees the first request's KV only after its second token, a step after its prompt ends:
    // by then the two hold about 4 × 2,048 + 2,048 = 10,240 tokens, whatever the arrival order,
    // against 8,192. (With ~4.4k-token prompts that figure is 8,192 — exactly the KV — and on
    // CI both were served.) Two words (WORDS_ONLY): llama.cpp's chat output parser never sees
    // a broken character, so every 500 here is the KV's.
    const prompt = (url: string, label: string) =>
      url === unified.url
        ? Array.from({ length: 330 }, (_, i) => `${label} line ${i}: replica ${i % 7} holds ${i * 13} tokens of ${label}.`).join("\n")
        : `${label} ${"x".repeat(4 * 6_600)}`;
    const pair = async (url: string) =>
      Promise.all(
        ["first", "second"].map(async (label) => {
          const res = await post(url, "/v1/chat/completions", { messages: [{ role: "user", content: prompt(url, label) }], max_tokens: 2, temperature: 0, ...WORDS_ONLY });
          return { status: res.status, body: await res.text() };
        }),
      );
    const [r, s] = [await pair(unified.url), await pair(simUnified.url)];
    const failed = (x: { status: number; body: string }[]) => x.filter((y) => y.status === 500);
    expect(failed(r).length).toBeGreaterThanOrEqual(1);
    expect(failed(s).length).toBeGreaterThanOrEqual(1);
    expect(failed(s)[0]!.body).toBe(failed(r)[0]!.body);
    expect(JSON.parse(failed(r)[0]!.body)).toEqual({ error: { code: 500, message: "Context size has been exceeded.", type: "server_error" } });
  }, TIMEOUT);
});
