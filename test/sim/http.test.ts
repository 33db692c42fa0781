/**
 * Real sims on ephemeral ports, driven by the official clients.
 */
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { until } from "../helpers/wait.ts";
import { faults, metric, nextEnd, nextSubmit, openai, rejection, scrape, sim, state, stopAll, streamChat, words } from "./_helpers.ts";

afterAll(stopAll);

/** The seed-calibrated card, 100× faster than real time. */
const CARD = { profile: "3090", timeScale: 0.01 } as const;
/** A small card: 4,096 KV tokens, fast prefill; slow decode so requests can be caught running. */
const SMALL = { profile: "tiny", decodeTps: 200 } as const;

describe("prefix cache over HTTP", () => {
  it("the same long prompt twice: the second TTFT is far lower and cached_tokens covers the prefix", async () => {
    const s = await sim(CARD);
    const client = openai(s);
    const system = words(40_000, "agent-system");
    // TTFT in the card's own (modelled) time: real time also holds tokenising 40k words,
    // which a loaded machine stretches as it likes.
    const coldEnd = nextEnd(s);
    const cold = await streamChat(client, { messages: [{ role: "system", content: system }, { role: "user", content: "turn one" }], max_tokens: 4 });
    const coldModelMs = (await coldEnd).ttftModelMs!;
    const warmEnd = nextEnd(s);
    const warm = await streamChat(client, { messages: [{ role: "system", content: system }, { role: "user", content: "turn two" }], max_tokens: 4 });
    const warmModelMs = (await warmEnd).ttftModelMs!;
    expect(cold.usage.prompt_tokens_details?.cached_tokens).toBe(0);
    const cached = warm.usage.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThan(40_000 - 16);
    expect(cached).toBeLessThan(warm.usage.prompt_tokens);
    expect(warm.usage.completion_tokens).toBe(4);
    // ~10 s cold (40k tokens at 4,000/s) vs ~0.5 s warm (cached tokens cost 5%).
    expect(coldModelMs).toBeGreaterThan(9_000);
    expect(warmModelMs).toBeLessThan(coldModelMs / 4);
  });

  it("a working set larger than kv_tokens evicts the oldest prefixes", async () => {
    const s = await sim(SMALL); // 256 blocks of 16 tokens
    const client = openai(s);
    const docs = ["a", "b", "c", "d"].map((tag) => words(2_000, `doc-${tag}`)); // 125 blocks each
    const ask = async (doc: string) =>
      (await client.completions.create({ model: "sim-model", prompt: doc, max_tokens: 1 })).usage!.prompt_tokens_details!.cached_tokens!;
    for (const doc of docs) expect(await ask(doc)).toBe(0);
    expect((await state(s)).evicted_blocks_total).toBeGreaterThan(0);
    expect(await ask(docs[3]!)).toBe(1_984); // the newest is intact (its last block is always recomputed)
    expect(await ask(docs[0]!)).toBe(0); // the oldest is gone
  });

  it.each([
    [400, 1_000, 800], // hybrid attention/Mamba block sizes: only the two full blocks are reused
    [1_568, 3_500, 3_136],
    [1, 1_000, 999], // token-granular (SGLang's page_size 1): all but the last token
  ])("--block-tokens %i: a repeated %i-token prompt reuses %i tokens (full blocks only, the last token recomputed)", async (blockTokens, tokens, cached) => {
    const s = await sim({ profile: "tiny", blockTokens, kvTokens: 8_192 });
    const client = openai(s);
    const prompt = words(tokens, `blocks-${blockTokens}`);
    await client.completions.create({ model: "sim-model", prompt, max_tokens: 1 });
    const { data, response } = await client.completions.create({ model: "sim-model", prompt, max_tokens: 1 }).withResponse();
    expect(data.usage!.prompt_tokens_details!.cached_tokens).toBe(cached);
    expect(response.headers.get("x-sim-prefix")).toBe(`cached=${cached}; stop=full`);
    expect(metric(await scrape(s), "vllm:cache_config_info")).toBe(1);
    expect(await scrape(s)).toContain(`block_size="${blockTokens}"`);
  });

  it("with --no-prefix-cache nothing is reused", async () => {
    const s = await sim({ ...SMALL, prefixCache: false });
    const client = openai(s);
    const body = { model: "sim-model", messages: [{ role: "user" as const, content: words(1_000, "same") }], max_tokens: 1 };
    await client.chat.completions.create(body);
    const second = await client.chat.completions.create(body);
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    const st = await state(s);
    expect(st.prefix_cache).toBe(false);
    expect(st.cached_blocks).toBe(0);
    expect(metric(await scrape(s), "vllm:prefix_cache_hits_total")).toBe(0);
  });

  it("/sim/match answers how much of a body is cached, without running it", async () => {
    const s = await sim(SMALL);
    const body = { model: "sim-model", messages: [{ role: "user", content: words(800, "probe") }], max_tokens: 1 };
    const match = async (b: unknown, endpoint = "/v1/chat/completions") =>
      (await (await fetch(`${s.url}/sim/match?endpoint=${endpoint}`, { method: "POST", body: JSON.stringify(b) })).json()) as Record<string, number>;
    const cold = await match(body);
    expect(cold).toMatchObject({ cached_tokens: 0, running: 0, waiting: 0 });
    const served = await openai(s).chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(cold.prompt_tokens).toBe(served.usage!.prompt_tokens);
    expect((await match(body)).cached_tokens).toBe(800);
    expect((await match({ ...body, cache_salt: "other" })).cached_tokens).toBe(0);
    expect((await match({ prompt: words(800, "probe") }, "/v1/completions")).cached_tokens).toBe(0);
    expect((await state(s)).requests_total).toBe(1);
    const bad = await fetch(`${s.url}/sim/match?endpoint=/v1/embeddings`, { method: "POST", body: "{}" });
    expect(bad.status).toBe(400);
  });

  it("reset clears the cache, the counters and stored responses", async () => {
    const s = await sim(SMALL);
    const client = openai(s);
    const body = { model: "sim-model", messages: [{ role: "user" as const, content: words(500, "r") }], max_tokens: 1 };
    await client.chat.completions.create(body);
    await client.responses.create({ model: "sim-model", input: "hello" });
    const res = await fetch(`${s.url}/sim/reset`, { method: "POST" });
    const st = (await res.json()) as Record<string, number>;
    expect(st).toMatchObject({ cached_blocks: 0, requests_total: 0, completed_total: 0, stored_responses: 0 });
    expect((await client.chat.completions.create(body)).usage!.prompt_tokens_details!.cached_tokens).toBe(0);
  });
});

describe("first-token times by sequence", () => {
  it("each answer names its sequence (x-sim-sequence); GET /sim/first-tokens gives that sequence's time to first token in model time, and /sim/reset clears them", async () => {
    const s = await sim(CARD);
    const client = openai(s);
    const firsts = async () => ((await (await fetch(`${s.url}/sim/first-tokens`)).json()) as { first_token_model_ms: Record<string, number> }).first_token_model_ms;
    const ids: string[] = [];
    for (const tag of ["one", "two"]) {
      const ended = nextEnd(s);
      const { response } = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: words(4_000, `first-${tag}`) }], max_tokens: 2 }).withResponse();
      const result = await ended;
      const id = response.headers.get("x-sim-sequence")!;
      expect(id).toBe(String(result.id));
      // 4,000 tokens at the card's 4,000 a second: at least a model second, whatever the machine's load.
      expect(result.ttftModelMs!).toBeGreaterThanOrEqual(1_000);
      expect((await firsts())[id]).toBe(result.ttftModelMs!);
      ids.push(id);
    }
    expect(ids[0]).not.toBe(ids[1]);
    expect(Object.keys(await firsts()).sort()).toEqual([...ids].sort());
    await fetch(`${s.url}/sim/reset`, { method: "POST" });
    expect(await firsts()).toEqual({});
  });
});

describe("API shapes", () => {
  it("chat: non-streaming body, finish reasons, and no usage chunk unless asked", async () => {
    const s = await sim(SMALL);
    const client = openai(s);
    const r = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hi" }] });
    expect(r.object).toBe("chat.completion");
    expect(r.choices[0]!.finish_reason).toBe("stop");
    expect(r.usage!.completion_tokens).toBe(8); // the tiny profile's default
    expect(r.choices[0]!.message.content).toHaveLength(32);
    const limited = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(limited.choices[0]!.finish_reason).toBe("length");

    const stream = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 3 });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("length");
    expect(chunks.every((c) => c.usage === undefined)).toBe(true);
  });

  it("completions stream with include_usage: a final choices-less usage chunk before [DONE]", async () => {
    const s = await sim(SMALL);
    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "sim-model", prompt: "once upon", max_tokens: 2, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    expect(res.headers.get("x-sim-replica")).toBe("gpu0");
    const events = (await res.text()).split("\n\n").filter(Boolean);
    expect(events.at(-1)).toBe("data: [DONE]");
    const usage = JSON.parse(events.at(-2)!.slice("data: ".length));
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it("Anthropic messages via the Anthropic client: events and cache_read_input_tokens", async () => {
    const s = await sim(SMALL);
    const client = new Anthropic({ baseURL: s.url, apiKey: "unused", maxRetries: 0 });
    const system = words(600, "anthropic-system");
    const first = await client.messages.create({ model: "sim-model", max_tokens: 3, system, messages: [{ role: "user", content: "one" }] });
    expect(first.stop_reason).toBe("max_tokens");
    expect(first.usage.cache_read_input_tokens).toBe(0);
    const events: string[] = [];
    const stream = await client.messages.create({
      model: "sim-model",
      max_tokens: 3,
      system,
      messages: [{ role: "user", content: "two" }],
      stream: true,
    });
    let usage: Anthropic.MessageDeltaUsage | undefined;
    for await (const ev of stream) {
      events.push(ev.type);
      if (ev.type === "message_delta") usage = ev.usage;
    }
    expect(events[0]).toBe("message_start");
    expect(events.at(-1)).toBe("message_stop");
    expect(events.filter((e) => e === "content_block_delta")).toHaveLength(3);
    expect(usage!.cache_read_input_tokens).toBeGreaterThan(590);
    expect(usage!.output_tokens).toBe(3);
  });

  it("Responses API: previous_response_id works only on the replica that stored it, and hits its cache", async () => {
    const [a, b] = [await sim({ ...SMALL, name: "gpu0" }), await sim({ ...SMALL, name: "gpu1" })];
    const first = await openai(a).responses.create({ model: "sim-model", instructions: words(400, "rules"), input: "turn one" });
    expect(first.status).toBe("completed");
    expect(first.output_text).toHaveLength(32);
    const follow = await openai(a).responses.create({ model: "sim-model", instructions: words(400, "rules"), input: "turn two", previous_response_id: first.id });
    expect(follow.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(400);
    expect(follow.previous_response_id).toBe(first.id);

    const elsewhere = openai(b).responses.create({ model: "sim-model", input: "turn two", previous_response_id: first.id });
    expect(await rejection(elsewhere)).toMatchObject({ status: 404, error: { type: "NotFoundError", param: "previous_response_id" } });

    // Instructions are not inherited from the previous response (as on OpenAI): send them again.
    const stream = await openai(a).responses.create({
      model: "sim-model",
      instructions: words(400, "rules"),
      input: "streamed",
      previous_response_id: follow.id,
      stream: true,
    });
    const types: string[] = [];
    let completed: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "response.completed") completed = ev.response;
    }
    expect(types[0]).toBe("response.created");
    expect(types).toContain("response.output_text.delta");
    expect(completed!.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect((await state(a)).stored_responses).toBe(3);
  });

  it("models, tokenize, health, and errors in OpenAI's shape", async () => {
    const s = await sim({ ...SMALL, model: "qwen-sim" });
    const client = openai(s);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["qwen-sim"]);
    expect(models.data[0]).toMatchObject({ object: "model", owned_by: "vllm", root: "qwen-sim", max_model_len: 4096 });

    const post = (path: string, body: unknown) => fetch(`${s.url}${path}`, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body) });
    expect(await (await post("/tokenize", { model: "qwen-sim", prompt: "abcdefgh" })).json()).toMatchObject({ count: 2, max_model_len: 4096 });
    expect(((await (await post("/tokenize", { content: "abcdefghi" })).json()) as { tokens: number[] }).tokens).toHaveLength(3);
    expect((await fetch(`${s.url}/health`)).status).toBe(200);

    expect(await rejection(client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }))).toMatchObject({
      status: 404,
      error: { message: "The model `nope` does not exist.", type: "NotFoundError", param: "model", code: 404 },
    });
    const invalid = await post("/v1/chat/completions", "{not json");
    expect(invalid.status).toBe(400);
    expect(((await invalid.json()) as { error: { code: number } }).error.code).toBe(400);
    expect(await rejection(
      client.completions.create({ model: "qwen-sim", prompt: words(5_000, "too-long") }),
    )).toMatchObject({ status: 400, error: { message: expect.stringContaining("maximum context length is 4096 tokens") } });
    expect(await rejection(client.completions.create({ model: "qwen-sim", prompt: "x", max_tokens: 5_000 }))).toMatchObject({ status: 400 });
    expect((await fetch(`${s.url}/v1/nothing`)).status).toBe(404);
    expect((await state(s)).rejected_total).toBe(4);
  });
});

describe("/metrics", () => {
  it("moves with traffic: counters, the TTFT histogram and the running/KV gauges", async () => {
    const s = await sim(SMALL);
    const before = await scrape(s);
    expect(before).toContain('vllm:num_requests_running{engine="0",model_name="sim-model"} 0.0');
    expect(metric(before, "vllm:prompt_tokens_total")).toBe(0);
    const client = openai(s);
    const prompt = words(1_000, "metrics");
    await client.completions.create({ model: "sim-model", prompt, max_tokens: 2 });
    await client.completions.create({ model: "sim-model", prompt, max_tokens: 2 });
    const after = await scrape(s);
    expect(metric(after, "vllm:prompt_tokens_total")).toBe(2_000);
    expect(metric(after, "vllm:prefix_cache_queries_total")).toBe(2_000);
    expect(metric(after, "vllm:prefix_cache_hits_total")).toBe(992);
    expect(metric(after, "vllm:generation_tokens_total")).toBe(4);
    expect(metric(after, "vllm:time_to_first_token_seconds_count")).toBe(2);
    expect(metric(after, 'vllm:time_to_first_token_seconds_bucket{engine="0",model_name="sim-model",le="+Inf"}')).toBe(2);
    expect(metric(after, 'vllm:request_success_total{engine="0",model_name="sim-model",finished_reason="length"}')).toBe(2);

    // While a long generation runs: one running, KV in use. Then back to zero.
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "sim-model", messages: [{ role: "user", content: "go" }], max_tokens: 2_000, stream: true },
      { signal: controller.signal },
    );
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    const during = await scrape(s);
    expect(metric(during, "vllm:num_requests_running")).toBe(1);
    expect(metric(during, "vllm:kv_cache_usage_perc")).toBeGreaterThan(0);
    const ended = nextEnd(s);
    controller.abort();
    expect((await ended).reason).toBe("cancelled");
    const idle = await scrape(s);
    expect(metric(idle, "vllm:num_requests_running")).toBe(0);
    expect(metric(idle, "vllm:kv_cache_usage_perc")).toBe(0);
    expect(metric(idle, 'vllm:request_success_total{engine="0",model_name="sim-model",finished_reason="abort"}')).toBe(1);
  });
});

describe("client disconnect", () => {
  it("a streaming client that goes away stops its sequence promptly and frees its KV", async () => {
    const s = await sim(SMALL);
    const controller = new AbortController();
    const stream = await openai(s).chat.completions.create(
      { model: "sim-model", messages: [{ role: "user", content: words(500, "bye") }], max_tokens: 3_000, stream: true },
      { signal: controller.signal },
    );
    await stream[Symbol.asyncIterator]().next();
    const ended = nextEnd(s);
    controller.abort();
    const result = await ended;
    expect(result.reason).toBe("cancelled");
    expect(result.completionTokens).toBeLessThan(3_000);
    const st = await state(s);
    expect(st).toMatchObject({ cancelled_total: 1, completed_total: 0, running: 0, used_blocks: 0 });
    expect(st.generation_tokens_total).toBe(result.completionTokens);
  });

  it("a streaming client that goes away during prefill, before any byte, stops its sequence too", async () => {
    // A 40k-token cold prefill: ~10 s modelled, ~1 s real, ample for the abort to arrive
    // first on a loaded machine (the test ends at the abort, so it costs nothing).
    const s = await sim({ ...CARD, timeScale: 0.1 });
    const controller = new AbortController();
    const submitted = nextSubmit(s);
    const request = openai(s)
      .chat.completions.create(
        { model: "sim-model", messages: [{ role: "user", content: words(40_000, "early") }], max_tokens: 10, stream: true },
        { signal: controller.signal },
      )
      .catch((error: unknown) => error);
    const seq = await submitted;
    expect(seq.state).not.toBe("decode");
    const ended = nextEnd(s);
    controller.abort();
    const result = await ended;
    expect(result).toMatchObject({ reason: "cancelled", completionTokens: 0 });
    expect(await request).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(await state(s)).toMatchObject({ cancelled_total: 1, running: 0, used_blocks: 0 });
  });

  it("a non-streaming client that goes away stops its sequence too", async () => {
    const s = await sim(SMALL);
    const controller = new AbortController();
    const submitted = nextSubmit(s);
    const request = openai(s)
      .chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "wait" }], max_tokens: 3_000 }, { signal: controller.signal })
      .catch((error: unknown) => error);
    await submitted;
    const ended = nextEnd(s);
    controller.abort();
    expect((await ended).reason).toBe("cancelled");
    expect(await request).toBeInstanceOf(OpenAI.APIUserAbortError);
    expect(await state(s)).toMatchObject({ cancelled_total: 1, running: 0, used_blocks: 0 });
  });
});

describe("fault knobs", () => {
  it("fail_next fails exactly the next N generation requests with fail_status", async () => {
    const s = await sim(SMALL);
    expect((await faults(s, { fail_next: 2, fail_status: 503 })).status).toBe(200);
    const client = openai(s);
    const ask = () => client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    expect(await rejection(ask())).toMatchObject({ status: 503, error: { type: "ServiceUnavailableError", code: 503 } });
    const anthropic = new Anthropic({ baseURL: s.url, apiKey: "unused", maxRetries: 0 });
    expect(await rejection(anthropic.messages.create({ model: "sim-model", max_tokens: 1, messages: [{ role: "user", content: "x" }] }))).toMatchObject({
      status: 503,
      error: { type: "error", error: { type: "overloaded_error" } },
    });
    expect((await ask()).choices[0]!.finish_reason).toBe("length");
    expect(await state(s)).toMatchObject({ faulted_total: 2, completed_total: 1, requests_total: 3 });
  });

  it("fail_next also works as a start-up option with another status", async () => {
    const s = await sim({ ...SMALL, failNext: 1, failStatus: 500 });
    expect(await rejection(openai(s).completions.create({ model: "sim-model", prompt: "x", max_tokens: 1 }))).toMatchObject({ status: 500 });
    expect((await openai(s).completions.create({ model: "sim-model", prompt: "x", max_tokens: 1 })).usage!.completion_tokens).toBe(1);
  });

  it("stall_ms holds the first byte for that many real ms, for stall_next requests", async () => {
    const s = await sim(SMALL);
    await faults(s, { stall_ms: 150, stall_next: 1 });
    const t0 = performance.now();
    await openai(s).completions.create({ model: "sim-model", prompt: "x", max_tokens: 1 });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(149);
    expect((await state(s)).faults).toMatchObject({ stall_ms: 150, stall_next: 0 });
  });

  it("stall_ms: 0 lets the requests stalled now go on (a test holds a request, then releases it)", async () => {
    const s = await sim(SMALL);
    await faults(s, { stall_ms: 600_000 });
    const held = Promise.all([0, 1].map((i) => openai(s).completions.create({ model: "sim-model", prompt: `held ${i}`, max_tokens: 1 })));
    let answered = 0;
    void held.then(() => answered++);
    await until(async () => (await state(s)).requests_total === 2, "both requests at the sim");
    expect([(await state(s)).running, answered]).toEqual([0, 0]);
    await faults(s, { stall_ms: 0 });
    expect((await held).map((r) => r.usage!.completion_tokens)).toEqual([1, 1]);
    expect((await state(s)).faults).toMatchObject({ stall_ms: 0 });
  });

  it("close_after_chunks cuts the next streaming response after K events, stops generation, and only that one", async () => {
    const s = await sim(SMALL);
    await faults(s, { close_after_chunks: 3 });
    const client = openai(s);
    const received: OpenAI.ChatCompletionChunk[] = [];
    const ended = nextEnd(s);
    const consume = async () => {
      const stream = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 500, stream: true });
      for await (const chunk of stream) received.push(chunk);
    };
    expect(await rejection(consume())).toBeInstanceOf(Error);
    expect(received).toHaveLength(3); // role chunk + two tokens
    expect((await ended).reason).toBe("fault");
    expect(await state(s)).toMatchObject({ faulted_total: 1, running: 0, used_blocks: 0, cancelled_total: 0 });
    const next = await streamChat(client, { messages: [{ role: "user", content: "y" }], max_tokens: 5 });
    expect(next.usage.completion_tokens).toBe(5);
  });

  it("close_after_chunks 0 drops the connection before any byte", async () => {
    const s = await sim(SMALL);
    await faults(s, { close_after_chunks: 0, close_next: -1 });
    const client = openai(s);
    for (let i = 0; i < 2; i++) {
      expect(await rejection(
        client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], stream: true }).then(async (st) => {
          for await (const _ of st);
        }),
      )).toBeInstanceOf(OpenAI.APIConnectionError);
    }
    expect((await state(s)).faulted_total).toBe(2);
  });

  it("startup_delay_ms answers 503 loading on /health and the API until it has passed", async () => {
    const s = await sim(SMALL);
    await faults(s, { startup_delay_ms: 600_000 });
    const health = await fetch(`${s.url}/health`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ error: { message: "Loading model", code: 503 } });
    expect(await rejection(openai(s).models.list())).toMatchObject({ status: 503 });
    expect(await rejection(openai(s).completions.create({ model: "sim-model", prompt: "x" }))).toMatchObject({ status: 503 });
    expect((await fetch(`${s.url}/metrics`)).status).toBe(200);
    await faults(s, { startup_delay_ms: 0 });
    expect((await fetch(`${s.url}/health`)).status).toBe(200);
  });

  it("unparsable_next (llamacpp): the next chat is computed and kept, then answered with llama.cpp's parser 500; the same chat again finds its prompt cached", async () => {
    const s = await sim({ ...SMALL, engine: "llamacpp" });
    await faults(s, { unparsable_next: 1 });
    const body = JSON.stringify({ messages: [{ role: "user", content: words(300, "unparsable") }], max_tokens: 2 });
    const chat = () => fetch(`${s.url}/v1/chat/completions`, { method: "POST", body });
    const failed = await chat();
    expect(failed.status).toBe(500);
    expect(await failed.json()).toEqual({ error: { code: 500, message: "The model produced output that does not match the expected peg-native format", type: "server_error" } });
    const again = (await (await chat()).json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
    expect(again.usage.prompt_tokens_details.cached_tokens).toBe(again.usage.prompt_tokens - 1);
  });

  it("queue_full_next (ollama): the next request gets Ollama's 503 for a full scheduler queue, nothing computed; the one after is served", async () => {
    const s = await sim({ ...SMALL, engine: "ollama" });
    await faults(s, { queue_full_next: 1 });
    const body = JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: words(300, "queue-full") }], max_tokens: 2 });
    const chat = () => fetch(`${s.url}/v1/chat/completions`, { method: "POST", body });
    const busy = await chat();
    expect(busy.status).toBe(503);
    expect(await busy.json()).toEqual({ error: { message: "server busy, please try again.  maximum pending requests exceeded", type: "api_error", param: null, code: null } });
    const served = await chat();
    expect(served.status).toBe(200);
    // Nothing of the first was computed: the second finds nothing cached.
    expect(Number(/cached=(\d+)/.exec(served.headers.get("x-sim-prefix")!)![1])).toBe(0);
  });

  it.each([
    ["llamacpp", `data: {"error":{"code":500,"message":"sim fault: error_after_chunks","type":"server_error"}}\n\n`],
    ["vllm", `data: {"error": {"message": "sim fault: error_after_chunks", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n`],
  ] as const)("error_after_chunks (%s): the next stream ends after K events with the engine's error event, generation stopped", async (engine, ending) => {
    const s = await sim({ ...SMALL, engine });
    await faults(s, { error_after_chunks: 2 });
    const ended = nextEnd(s);
    const res = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 500, stream: true }) });
    expect(res.status).toBe(200);
    const events = (await res.text()).split(/(?<=\n\n)/);
    expect(events).toHaveLength(2 + (engine === "vllm" ? 2 : 1));
    expect(events.slice(2).join("")).toBe(ending);
    expect((await ended).reason).toBe("fault");
    expect(await state(s)).toMatchObject({ faulted_total: 1, running: 0 });
    const next = await streamChat(openai(s), { messages: [{ role: "user", content: "y" }], max_tokens: 3 });
    expect(next.usage.completion_tokens).toBe(3);
  });

  it("queue_full_next (vllm): the next request gets vLLM's admission-control 503, nothing computed; the one after is served", async () => {
    const s = await sim({ ...SMALL, engine: "vllm-details" });
    await faults(s, { queue_full_next: 1 });
    const body = JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: words(300, "admission") }], max_tokens: 2 });
    const chat = () => fetch(`${s.url}/v1/chat/completions`, { method: "POST", body });
    const busy = await chat();
    expect(busy.status).toBe(503);
    // vllm/exceptions.py QueueOverflowError, answered as an ErrorResponse
    expect(await busy.json()).toEqual({
      error: { message: "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.", type: "Service Unavailable", param: null, code: 503 },
    });
    const served = await chat();
    expect(served.status).toBe(200);
    expect(Number(/cached=(\d+)/.exec(served.headers.get("x-sim-prefix")!)![1])).toBe(0);
  });

  it("rejects unknown or malformed fault settings with 400", async () => {
    const s = await sim({ ...SMALL, engine: "sglang" });
    expect((await faults(s, { fail_nxt: 1 })).status).toBe(400);
    expect((await faults(s, { fail_status: 200 })).status).toBe(400);
    expect((await faults(s, { stall_ms: -5 })).status).toBe(400);
    // llama.cpp's parser fault, and a full queue (Ollama's, vLLM's admission control), on a profile that has neither
    expect((await faults(s, { unparsable_next: 1 })).status).toBe(400);
    expect((await faults(s, { queue_full_next: 1 })).status).toBe(400);
    // an engine error event mid-stream, on a profile (SGLang's) the sim does not end streams so for
    expect((await faults(await sim({ ...SMALL, engine: "sglang" }), { error_after_chunks: 1 })).status).toBe(400);
  });
});
