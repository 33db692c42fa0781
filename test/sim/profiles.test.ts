/**
 * What a client sees of each engine profile (`--engine`), over real sockets with the official
 * openai client where a client is involved and raw bytes where the bytes are the point:
 * usage fields present or absent, stream chunk shapes with include_usage on and off, metric
 * names, capacity endpoints, restart signals and the model-name rule.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import type { StartSimOptions } from "../../src/sim/index.ts";
import { until } from "../helpers/wait.ts";
import { metric, nextEnd, nextSubmit, openai, rejection, scrape, sim, state, stopAll, words } from "./_helpers.ts";

afterAll(stopAll);

const SMALL = { profile: "tiny", decodeTps: 400 } as const satisfies StartSimOptions;

type Json = Record<string, any>;

async function post(url: string, path: string, body: unknown): Promise<Response> {
  return fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** The JSON objects of an SSE body (no `[DONE]`), and whether it ended with `[DONE]`. */
async function sse(res: Response): Promise<{ chunks: Json[]; done: boolean }> {
  const events = (await res.text()).split("\n\n").filter(Boolean);
  const done = events.at(-1) === "data: [DONE]";
  return { chunks: events.filter((e) => e !== "data: [DONE]").map((e) => JSON.parse(e.slice("data: ".length))), done };
}

const chatBody = (content: string, extra: Json = {}) => ({ model: "sim-model", messages: [{ role: "user", content }], max_tokens: 3, ...extra });

describe("vllm (no --enable-prompt-tokens-details)", () => {
  it("has no cached-token figure on chat or completions, but reports it in the Responses API", async () => {
    const s = await sim({ ...SMALL, engine: "vllm" });
    const prompt = words(600, "vllm-plain");
    const client = openai(s);
    for (let i = 0; i < 2; i++) {
      const r = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: prompt }], max_tokens: 2 });
      // model_dump() writes the absent details as null
      expect(r.usage as unknown).toEqual({ prompt_tokens: r.usage!.prompt_tokens, total_tokens: r.usage!.prompt_tokens + 2, completion_tokens: 2, prompt_tokens_details: null });
    }
    const input = words(600, "vllm-responses");
    const first = await client.responses.create({ model: "sim-model", input, max_output_tokens: 2 });
    const again = await client.responses.create({ model: "sim-model", input, max_output_tokens: 2 });
    expect(first.usage!.input_tokens_details.cached_tokens).toBe(0);
    expect(again.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(500);
  });

  it("stream_options present means include_usage (default true): one choices-less usage chunk, no usage key elsewhere", async () => {
    const s = await sim({ ...SMALL, engine: "vllm" });
    const asked = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: {} })));
    expect(asked.done).toBe(true);
    const usage = asked.chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    // exclude_none: no prompt_tokens_details without the flag
    expect(usage.usage).toEqual({ prompt_tokens: 13, total_tokens: 16, completion_tokens: 3 }); // "hi" in ChatML is 13 tokens
    expect(asked.chunks.slice(0, -1).every((c) => !("usage" in c))).toBe(true);
    // the finish reason rides on the last token's chunk
    expect(asked.chunks.slice(0, -1).map((c) => c.choices[0].finish_reason)).toEqual([null, null, null, "length"]);
    expect(asked.chunks.at(-2)!.choices[0].delta.content).toHaveLength(4);

    const off = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: { include_usage: false } })));
    expect(off.chunks.some((c) => "usage" in c)).toBe(false);
    const none = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true })));
    expect(none.chunks.some((c) => "usage" in c)).toBe(false);
  });

  it("exports process_start_time_seconds and the KV capacity in vllm:cache_config_info; /health answers 200 with no body", async () => {
    const before = Date.now() / 1000;
    const s = await sim({ ...SMALL, engine: "vllm", blockTokens: 32 });
    const text = await scrape(s);
    const started = metric(text, "process_start_time_seconds");
    expect(started).toBeGreaterThanOrEqual(Math.floor(before));
    expect(started).toBeLessThanOrEqual(Date.now() / 1000);
    // CacheConfig's fields, the group-aware pool among them (one KV cache group: 128 × 32)
    expect(text).toContain(
      'vllm:cache_config_info{block_size="32",enable_prefix_caching="True",num_gpu_blocks="128",kv_cache_size_tokens="4096",kv_cache_max_concurrency="1.0",kv_offloading_size="None",kv_offloading_backend="native",engine="0"} 1.0',
    );
    const health = await fetch(`${s.url}/health`);
    expect([health.status, await health.text()]).toEqual([200, ""]);
    expect(await rejection(openai(s).chat.completions.create({ ...chatBody("x"), model: "other" } as OpenAI.ChatCompletionCreateParamsNonStreaming))).toMatchObject({
      status: 404,
      error: { message: "The model `other` does not exist.", type: "NotFoundError", code: 404 },
    });
  });
});

describe("vllm-details (--enable-prompt-tokens-details, the default)", () => {
  it("reports cached_tokens on every response, 0 included, streamed or not", async () => {
    const s = await sim(SMALL);
    expect(s.app.options.engine).toBe("vllm-details");
    const prompt = words(600, "vllm-details");
    const client = openai(s);
    const cold = await client.completions.create({ model: "sim-model", prompt, max_tokens: 2 });
    expect(cold.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    const warm = await sse(await post(s.url, "/v1/completions", { model: "sim-model", prompt, max_tokens: 2, stream: true, stream_options: { include_usage: true } }));
    expect(warm.chunks.at(-1)!.usage).toEqual({ prompt_tokens: 600, total_tokens: 602, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 592 } });
  });
});

describe("sglang (--enable-cache-report --enable-metrics)", () => {
  it("puts prompt_tokens_details only when something was cached", async () => {
    const s = await sim({ ...SMALL, engine: "sglang" });
    const client = openai(s);
    const prompt = words(600, "sglang-usage");
    const cold = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: prompt }], max_tokens: 2 });
    expect(cold.usage).toEqual({ prompt_tokens: cold.usage!.prompt_tokens, total_tokens: cold.usage!.prompt_tokens + 2, completion_tokens: 2, prompt_tokens_details: null, reasoning_tokens: 0 } as never);
    const warm = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: prompt }], max_tokens: 2 });
    expect(warm.usage!.prompt_tokens_details).toEqual({ cached_tokens: expect.any(Number) });
    expect(warm.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(500);
  });

  it("streams: usage only when include_usage is true (default false), a separate finish chunk, reasoning_content null in deltas", async () => {
    const s = await sim({ ...SMALL, engine: "sglang" });
    const plain = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: {} })));
    expect(plain.chunks.some((c) => "usage" in c)).toBe(false);
    expect(plain.chunks.map((c) => c.choices[0].finish_reason)).toEqual([null, null, null, null, "length"]);
    expect(plain.chunks[0]!.choices[0].delta).toEqual({ reasoning_content: null, role: "assistant", content: "" });
    expect(plain.chunks.at(-1)!.choices[0]).toEqual({ index: 0, delta: { reasoning_content: null }, logprobs: null, finish_reason: "length", matched_stop: null });
    const asked = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: { include_usage: true } })));
    expect(asked.chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 13, total_tokens: 16, completion_tokens: 3, prompt_tokens_details: null, reasoning_tokens: 0 } });
    expect(asked.chunks.slice(0, -1).some((c) => "usage" in c)).toBe(false);
  });

  it("accepts any model name and echoes it; errors are top-level {object: error}", async () => {
    const s = await sim({ ...SMALL, engine: "sglang" });
    const r = await openai(s).chat.completions.create({ ...chatBody("hi"), model: "whatever-name" } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(r.model).toBe("whatever-name");
    const tooLong = await post(s.url, "/v1/chat/completions", chatBody(words(5_000, "long")));
    expect(tooLong.status).toBe(400);
    expect(await tooLong.json()).toEqual({
      object: "error",
      message: expect.stringMatching(/^The input \(\d+ tokens\) is longer than the model's context length \(4096 tokens\)\.$/),
      type: "BadRequestError",
      param: null,
      code: 400,
    });
  });

  it("/metrics: SGLang's names and labels, counters of cached and prompt tokens, cache_hit_rate of the last prefill batch, capacity; no start time", async () => {
    const s = await sim({ ...SMALL, engine: "sglang" });
    const client = openai(s);
    const prompt = words(800, "sglang-metrics");
    await client.completions.create({ model: "sim-model", prompt, max_tokens: 2 });
    const afterCold = await scrape(s);
    expect(metric(afterCold, "sglang:cache_hit_rate")).toBe(0);
    await client.completions.create({ model: "sim-model", prompt, max_tokens: 2 });
    const text = await scrape(s);
    const labels = '{engine_type="unified",model_name="sim-model",moe_ep_rank="0",pp_rank="0",tp_rank="0"}';
    expect(text).toContain(`sglang:max_total_num_tokens${labels} 4096.0`);
    expect(text).toContain(`sglang:page_size${labels} 16.0`);
    expect(text).toContain(`sglang:num_pages${labels} 256.0`);
    expect(text).toContain(`sglang:num_running_reqs${labels} 0.0`);
    expect(metric(text, 'sglang:prompt_tokens_total{model_name="sim-model"}')).toBe(1_600);
    // by cache tier, "device" (the GPU's radix cache) the only one the sim has
    expect(metric(text, 'sglang:cached_tokens_total{model_name="sim-model",cache_source="device"}')).toBe(784);
    expect(metric(text, "sglang:cache_hit_rate")).toBeCloseTo(784 / 800, 9);
    expect(metric(text, 'sglang:time_to_first_token_seconds_bucket{model_name="sim-model",le="400.0"}')).toBe(2);
    expect(text).not.toContain("process_start_time_seconds");
    expect(text).not.toContain("vllm:");
  });
});

describe("llamacpp (--metrics --slots)", () => {
  it("always reports cached_tokens and timings (cache_n the same)", async () => {
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    const client = openai(s);
    const prompt = words(600, "llama-usage");
    const cold = await client.chat.completions.create({ model: "anything", messages: [{ role: "user", content: prompt }], max_tokens: 2 });
    expect(cold.model).toBe("sim-model"); // any model is accepted; the alias is named
    expect(cold.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    const res = await post(s.url, "/v1/chat/completions", { messages: [{ role: "user", content: prompt }], max_tokens: 2 });
    const body = (await res.json()) as Json;
    expect(Object.keys(body)).toEqual(["choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"]);
    expect(body.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(500);
    expect(body.timings).toMatchObject({ cache_n: body.usage.prompt_tokens_details.cached_tokens, prompt_n: body.usage.prompt_tokens - body.timings.cache_n, predicted_n: 2 });
  });

  it("chat stream: timings on the finish chunk without include_usage; with it, usage and timings on a choices-less chunk", async () => {
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    const plain = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true })));
    expect(plain.done).toBe(true);
    expect(plain.chunks[0]!.choices[0].delta).toEqual({ role: "assistant", content: null });
    for (const c of plain.chunks.slice(0, -1)) expect(Object.keys(c)).toEqual(["choices", "created", "id", "model", "system_fingerprint", "object"]);
    const last = plain.chunks.at(-1)!;
    expect(Object.keys(last)).toEqual(["choices", "created", "id", "model", "system_fingerprint", "object", "timings"]);
    expect(last.choices).toEqual([{ finish_reason: "length", index: 0, delta: {} }]);
    expect(plain.chunks.some((c) => "usage" in c)).toBe(false);

    const asked = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: { include_usage: true } })));
    const usage = asked.chunks.at(-1)!;
    expect(Object.keys(usage)).toEqual(["choices", "created", "id", "model", "system_fingerprint", "object", "usage", "timings"]);
    expect(usage.choices).toEqual([]);
    // The first stream left the same prompt in its slot: all of it is reused but the last token,
    // which is always computed (server-context.cpp pre_decode, [TAG_PROMPT_LOGITS]).
    expect(usage.usage).toEqual({ completion_tokens: 3, prompt_tokens: 13, total_tokens: 16, prompt_tokens_details: { cached_tokens: 12 } });
    expect(asked.chunks.at(-2)).not.toHaveProperty("timings");
  });

  it("completions stream: the final chunk carries usage and timings unasked", async () => {
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    const { chunks } = await sse(await post(s.url, "/v1/completions", { prompt: "once upon a time", max_tokens: 2, stream: true }));
    expect(chunks.map((c) => c.choices[0].finish_reason)).toEqual([null, null, "length"]);
    expect(Object.keys(chunks.at(-1)!)).toEqual(["choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"]);
    expect(chunks.at(-1)!.id).toStartWith("chatcmpl-");
  });

  it("capacity: /props, /slots and /v1/models in llama.cpp's shape; context overflow is 400 exceed_context_size_error", async () => {
    // llama-server's default --parallel -1: 4 slots sharing one unified KV, each up to all of it.
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    const props = (await (await fetch(`${s.url}/props`)).json()) as Json;
    expect(props).toMatchObject({ total_slots: 4, default_generation_settings: { n_ctx: 4096 }, model_alias: "sim-model" });
    expect(await (await fetch(`${s.url}/slots`)).json()).toEqual([0, 1, 2, 3].map((id) => ({ id, n_ctx: 4096, speculative: false, is_processing: false })));
    const models = (await (await fetch(`${s.url}/v1/models`)).json()) as Json;
    expect(models.models[0]).toMatchObject({ name: "sim-model", model: "sim-model" });
    expect(models.data[0]).toMatchObject({ id: "sim-model", object: "model", owned_by: "llamacpp", meta: { n_ctx: 4096 } });
    expect(await (await fetch(`${s.url}/health`)).json()).toEqual({ status: "ok" });
    const overflow = await post(s.url, "/v1/chat/completions", chatBody(words(5_000, "long")));
    expect(overflow.status).toBe(400);
    const error = ((await overflow.json()) as Json).error;
    expect(Object.keys(error)).toEqual(["code", "message", "type", "n_prompt_tokens", "n_ctx"]);
    expect(error).toMatchObject({ code: 400, type: "exceed_context_size_error", n_ctx: 4096 });
    expect(error.message).toBe(`request (${error.n_prompt_tokens} tokens) exceeds the available context size (4096 tokens), try increasing it`);
    const stateless = await post(s.url, "/v1/responses", { input: "x", previous_response_id: "resp_1" });
    expect([stateless.status, ((await stateless.json()) as Json).error.message]).toEqual([400, "llama.cpp does not support 'previous_response_id'."]);
    expect(await (await fetch(`${s.url}/nope`)).json()).toEqual({ error: { message: "File Not Found", type: "not_found_error", code: 404 } });
  });

  it("a unified KV that overflows fails the running requests as llama-server does: 500 JSON, or a stream of one error event", async () => {
    // 4 slots sharing 4,096 tokens: two concurrent 2,500-token prompts do not fit together
    // (the first decodes for 2.5 s, so the second arrives while it runs, however slow the box).
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    const [plain, streamed] = await Promise.all([
      post(s.url, "/v1/chat/completions", chatBody(words(2_500, "first"), { max_tokens: 1_000 })),
      post(s.url, "/v1/chat/completions", chatBody(words(2_500, "second"), { stream: true })),
    ]);
    const error = { error: { code: 500, message: "Context size has been exceeded.", type: "server_error" } };
    expect(plain.status).toBe(500);
    expect(await plain.text()).toBe(JSON.stringify(error));
    expect([streamed.status, streamed.headers.get("content-type")]).toEqual([200, "text/event-stream; charset=utf-8"]);
    expect(await streamed.text()).toBe(`data: ${JSON.stringify(error)}\n\n`);
    // Alone, each fits.
    expect((await post(s.url, "/v1/chat/completions", chatBody(words(2_500, "third")))).status).toBe(200);
  });

  it("/props, /slots and /metrics show the slot engine's slots: --parallel 2 splits -c, and a running request holds one slot", async () => {
    const s = await sim({ ...SMALL, engine: "llamacpp", parallel: 2, kvTokens: 8192 });
    const props = (await (await fetch(`${s.url}/props`)).json()) as Json;
    expect(props).toMatchObject({ total_slots: 2, default_generation_settings: { n_ctx: 4096 } });
    const controller = new AbortController();
    const stream = await openai(s).chat.completions.create(
      { model: "sim-model", messages: [{ role: "user", content: "keep going" }], max_tokens: 3_000, stream: true },
      { signal: controller.signal },
    );
    await stream[Symbol.asyncIterator]().next();
    // The first request takes the least recently used slot; llama.cpp's ties go to the last one.
    expect(await (await fetch(`${s.url}/slots`)).json()).toEqual([
      { id: 0, n_ctx: 4096, speculative: false, is_processing: false },
      { id: 1, n_ctx: 4096, speculative: false, is_processing: true },
    ]);
    expect(metric(await scrape(s), "llamacpp:requests_processing")).toBe(1);
    const ended = nextEnd(s);
    controller.abort();
    expect((await ended).reason).toBe("cancelled");
    expect(((await (await fetch(`${s.url}/slots`)).json()) as Json[]).map((slot) => slot.is_processing)).toEqual([false, false]);
    expect(metric(await scrape(s), "llamacpp:requests_processing")).toBe(0);
  });

  it("/metrics: llama.cpp's names; Process-Start-Time-Unix is fixed for a process and differs for another", async () => {
    const a = await sim({ ...SMALL, engine: "llamacpp" });
    await openai(a).completions.create({ model: "x", prompt: words(300, "m"), max_tokens: 3 });
    await openai(a).completions.create({ model: "x", prompt: words(300, "m"), max_tokens: 3 });
    const res = await fetch(`${a.url}/metrics`);
    const started = res.headers.get("process-start-time-unix");
    expect(started).toMatch(/^\d+$/);
    const text = await res.text();
    // The repeat reuses its slot's 300 tokens but the last, which is always computed.
    expect(text).toContain("# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total 299\n");
    expect(text).toContain("llamacpp:prompt_tokens_total 301\n");
    expect(text).toContain("llamacpp:tokens_predicted_total 6\n");
    expect(text).toContain("llamacpp:n_tokens_max 303\n");
    expect(text).toContain("llamacpp:requests_processing 0\n");
    expect((await fetch(`${a.url}/metrics`)).headers.get("process-start-time-unix")).toBe(started);
    const b = await sim({ ...SMALL, engine: "llamacpp", name: "gpu1" });
    const other = (await fetch(`${b.url}/metrics`)).headers.get("process-start-time-unix");
    expect(BigInt(other!)).toBeGreaterThan(BigInt(started!));
  });
});

describe("ollama", () => {
  it("usage has no cached field; include_usage adds a choices-less chunk after the finish chunk", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    const prompt = words(600, "ollama");
    const client = openai(s);
    for (let i = 0; i < 2; i++) {
      const r = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: prompt }], max_tokens: 2 });
      expect(Object.keys(r.usage!)).toEqual(["prompt_tokens", "completion_tokens", "total_tokens"]);
      expect(r.system_fingerprint).toBe("fp_ollama");
    }
    const { chunks } = await sse(await post(s.url, "/v1/chat/completions", chatBody("hi", { stream: true, stream_options: { include_usage: true } })));
    expect(chunks[0]!.choices[0].delta).toEqual({ role: "assistant", content: expect.any(String) });
    expect(chunks.at(-2)!.choices).toEqual([{ index: 0, delta: {}, finish_reason: "length" }]);
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 13, completion_tokens: 3, total_tokens: 16 } });
    expect(chunks.slice(0, -1).some((c) => "usage" in c)).toBe(false);
  });

  it("runs on llama-server's slots with Ollama's defaults: one slot (OLLAMA_NUM_PARALLEL 1), so a second request waits", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    expect(s.app.options).toMatchObject({ parallel: 1, kvUnified: false, batchSize: 512, cacheRam: 8192 });
    const controller = new AbortController();
    const stream = await openai(s).chat.completions.create(
      { model: "sim-model", messages: [{ role: "user", content: "keep going" }], max_tokens: 3_000, stream: true },
      { signal: controller.signal },
    );
    await stream[Symbol.asyncIterator]().next();
    const submitted = nextSubmit(s);
    const second = openai(s).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "me next" }], max_tokens: 2 });
    await submitted;
    expect(await state(s)).toMatchObject({ max_seqs: 1, running: 1, waiting: 1 });
    controller.abort();
    expect((await second).choices[0]!.finish_reason).toBe("length");
    expect(await state(s)).toMatchObject({ running: 0, waiting: 0, cancelled_total: 1, completed_total: 1 });
  });

  it("the Responses API reports cached_tokens 0 although the prefix was cached", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    const client = openai(s);
    const input = words(600, "ollama-responses");
    await client.responses.create({ model: "sim-model", input, max_output_tokens: 2 });
    const { data, response } = await client.responses.create({ model: "sim-model", input, max_output_tokens: 2 }).withResponse();
    expect(data.usage!.input_tokens_details.cached_tokens).toBe(0);
    expect(response.headers.get("x-sim-prefix")).toMatch(/^cached=(\d+); stop=full$/);
    expect(Number(/cached=(\d+)/.exec(response.headers.get("x-sim-prefix")!)![1])).toBeGreaterThan(500);
  });

  it("no /metrics and no /health; / says Ollama is running; /api/version, /api/tags and /api/ps (context_length); model names and errors", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    for (const path of ["/metrics", "/health"]) {
      const res = await fetch(`${s.url}${path}`);
      expect([res.status, await res.text()]).toEqual([404, "404 page not found"]);
    }
    expect(await (await fetch(`${s.url}/`)).text()).toBe("Ollama is running");
    expect(await (await fetch(`${s.url}/api/version`)).json()).toEqual({ version: expect.stringMatching(/^\d+\.\d+\.\d+$/) });
    expect(((await (await fetch(`${s.url}/api/tags`)).json()) as Json).models[0]).toMatchObject({ name: "sim-model:latest", model: "sim-model:latest" });
    // Nothing is loaded before a request asks for the model.
    expect(await (await fetch(`${s.url}/api/ps`)).json()).toEqual({ models: [] });
    const client = openai(s);
    expect((await client.chat.completions.create({ ...chatBody("x"), model: "sim-model:latest" } as OpenAI.ChatCompletionCreateParamsNonStreaming)).model).toBe("sim-model:latest");
    expect(((await (await fetch(`${s.url}/api/ps`)).json()) as Json).models[0]).toMatchObject({ name: "sim-model:latest", context_length: 4096 });
    expect(await rejection(client.chat.completions.create({ ...chatBody("x"), model: "llama3" } as OpenAI.ChatCompletionCreateParamsNonStreaming))).toMatchObject({
      status: 404,
      error: { message: "model 'llama3' not found", type: "not_found_error", param: null, code: null },
    });
  });

  it("unloads its model after keep_alive idle: /api/ps lists it no more and every cached prompt is gone; the next request loads it again", async () => {
    const s = await sim({ ...SMALL, engine: "ollama", keepAlive: 0.4 });
    const client = openai(s);
    const messages = [{ role: "user" as const, content: words(600, "keep-alive") }];
    const sentAt = Date.now();
    await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2 });
    const listed = ((await (await fetch(`${s.url}/api/ps`)).json()) as Json).models;
    expect(listed).toHaveLength(1);
    // expires_at: the end of the last request + keep_alive (0.4 s at time scale 1).
    const expires = Date.parse(listed[0].expires_at);
    expect(expires).toBeGreaterThan(sentAt + 400);
    expect(expires).toBeLessThan(Date.now() + 400 + 50);
    const match = async () => (await (await post(s.url, "/sim/match", { model: "sim-model", messages })).json()) as Json;
    expect((await match()).cached_tokens).toBeGreaterThan(500);
    await until(async () => (((await (await fetch(`${s.url}/api/ps`)).json()) as Json).models.length === 0 ? true : undefined), "the model unloaded after keep_alive");
    expect((await match()).cached_tokens).toBe(0);
    expect(await state(s)).toMatchObject({ model_loads: 1, model_unloads: 1 });
    // Computed here and lost with the runner: the engine's truth is an eviction, not a new prompt.
    const { response } = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2 }).withResponse();
    expect(response.headers.get("x-sim-prefix")).toMatch(/^cached=0; stop=evicted/);
    expect(await state(s)).toMatchObject({ model_loads: 2, model_unloads: 1 });
  });

  it("a chat longer than the context loses its oldest messages, answered 200 as whole: the next turn's prompt starts elsewhere, and only the system prompt is found cached", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    const client = openai(s);
    // tiny: a 4,096-token context (one slot); eight exchanges of ~600 tokens do not fit.
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: words(300, "cut-system") }];
    for (let i = 0; i < 8; i++) messages.push({ role: "user", content: words(300, `cut-u${i}`) }, { role: "assistant", content: words(300, `cut-a${i}`) });
    messages.push({ role: "user", content: "and now?" });
    const whole = (await (await post(s.url, "/sim/match", { model: "sim-model", messages: messages.slice(0, 3) })).json()) as Json;
    const first = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2 });
    expect(first.choices[0]!.finish_reason).toBe("length");
    expect(first.usage!.prompt_tokens).toBeLessThan(4096);
    expect(first.usage!.prompt_tokens).toBeGreaterThan(4096 - 2 * 700);
    expect(await state(s)).toMatchObject({ prompts_cut: 1 });
    // One more exchange: more of the oldest messages go, so the kept part starts at another message.
    messages.push({ role: "assistant", content: words(300, "cut-a8") }, { role: "user", content: "and then?" });
    const { response } = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2 }).withResponse();
    const cached = Number(/cached=(\d+)/.exec(response.headers.get("x-sim-prefix")!)![1]);
    expect(whole.prompt_tokens).toBeGreaterThan(cached);
    expect(cached).toBeLessThan(400);
    expect(await state(s)).toMatchObject({ prompts_cut: 2 });
    // chatPrompt measures the prompt alone: a max_tokens beyond the room left is not refused,
    // the answer stops at the context's end.
    const long = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 5000 });
    expect(long.choices[0]!.finish_reason).toBe("length");
    expect(long.usage!.prompt_tokens + long.usage!.completion_tokens).toBeLessThanOrEqual(4096);
  });

  it("keep_alive -1 keeps the model loaded for ever; a bad --keep-alive is refused", async () => {
    const s = await sim({ ...SMALL, engine: "ollama", keepAlive: -1 });
    await openai(s).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    const listed = ((await (await fetch(`${s.url}/api/ps`)).json()) as Json).models;
    expect(Date.parse(listed[0].expires_at)).toBeGreaterThan(Date.now() + 100 * 365 * 24 * 3600 * 1000);
    expect(await rejection(sim({ ...SMALL, engine: "ollama", keepAlive: -2 }))).toMatchObject({ message: expect.stringContaining("keep-alive") });
  });
});
