/**
 * Usage on every response, seen from both ends: the router learns prompt and cached tokens
 * of streams that did not ask for usage, and the official client sees exactly what it
 * would see talking to the engine directly.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { logRecords, startRouterInProcess, startSimInProcess, until, type LocalSim, type Router } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

let sim: LocalSim;
let router: Router;

beforeAll(async () => {
  sim = await startSimInProcess("gpu0");
  router = await startRouterInProcess([sim]);
});
afterAll(killAll);

const SALT = `usage ${crypto.randomUUID()}`;
/** Ids and timestamps differ per request; everything else must not. */
const normalise = (text: string) => text.replace(/"(chatcmpl|cmpl)-[0-9a-f]+"/g, '"ID"').replace(/"created":\d+/g, '"created":0');

async function collect(client: OpenAI, body: OpenAI.ChatCompletionCreateParamsStreaming) {
  const chunks: OpenAI.ChatCompletionChunk[] = [];
  for await (const chunk of await client.chat.completions.create(body)) chunks.push(chunk);
  return chunks;
}

describe("a stream that did not ask for usage", () => {
  it("looks the same to the official client as the engine's own stream, and the router still learns its usage", async () => {
    const direct = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: `${SALT} ${"a shared instruction block ".repeat(40)}` },
      { role: "user", content: "first" },
    ];
    const body = { model: "sim-model", stream: true as const, max_tokens: 5, messages };
    const viaRouter = await collect(router.client(), body);
    const fromEngine = await collect(direct, body);
    expect(viaRouter.length).toBe(6); // role, 5 tokens (the last carries finish_reason, as vLLM's does)
    expect(viaRouter.some((c) => "usage" in c)).toBe(false);
    expect(normalise(JSON.stringify(viaRouter))).toBe(normalise(JSON.stringify(fromEngine)));

    const line = await until(() => logRecords(router, "request").at(-1), "the request's log line");
    expect(line.prompt_tokens).toBeGreaterThan(100);
    // the engine reported cached tokens although the client never asked for usage
    expect(line.cached_tokens).toBe(0);
    await collect(router.client(), body);
    const second = await until(() => logRecords(router, "request").at(1), "the second log line");
    expect(second.cached_tokens).toBeGreaterThan(100);
  });

  it.each([
    ["/v1/chat/completions", { messages: [{ role: "user", content: `${SALT} bytes` }] }],
    ["/v1/completions", { prompt: `${SALT} bytes` }],
  ])("%s: the bytes on the wire are the engine's, but for ids and timestamps", async (path, extra) => {
    const body = JSON.stringify({ model: "sim-model", stream: true, max_tokens: 4, ...extra });
    const post = (base: string) => fetch(`${base}${path}`, { method: "POST", body, headers: { "content-type": "application/json" } }).then((r) => r.text());
    const viaRouter = await post(router.url);
    expect(viaRouter).toEndWith("data: [DONE]\n\n");
    expect(viaRouter).not.toContain("usage");
    expect(normalise(viaRouter)).toBe(normalise(await post(sim.url)));
  });

  it("the router's token counters include streams that did not ask", async () => {
    const metrics = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text());
    const prompt = metrics.get("llmroute_prompt_tokens_total")!.reduce((n, s) => n + s.value, 0);
    const requests = metrics.get("llmroute_requests_total")!.reduce((n, s) => n + s.value, 0);
    expect(requests).toBe(4);
    expect(prompt).toBeGreaterThan(200);
  });
});

describe("the usage chunk arriving on its own", () => {
  it("is taken out and the stream still ends: the relay reads on until it has something for the client", async () => {
    // An engine whose usage chunk and [DONE] reach the router in separate reads (found by the
    // soak: 11 of 64,000 streams hung until the client gave up, with no error and no timeout).
    const events = [
      `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n`,
      `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
      `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}\n\n`,
      "data: [DONE]\n\n",
    ];
    const engine = Bun.serve({
      port: 0,
      fetch(req) {
        if (new URL(req.url).pathname === "/health") return new Response("ok");
        let i = 0;
        return new Response(
          new ReadableStream({
            async pull(controller) {
              // each event in its own write, a moment apart, so each is its own read upstream
              if (i > 0) await Bun.sleep(30);
              if (i === events.length) return controller.close();
              controller.enqueue(new TextEncoder().encode(events[i++]!));
            },
          }),
          { headers: { "content-type": "text/event-stream" } },
        );
      },
    });
    try {
      const own = await startRouterInProcess([{ name: "engine", url: `http://127.0.0.1:${engine.port}`, extra: `models = ["m"]\n` }]);
      const chunks = await collect(own.client(), { model: "m", stream: true, messages: [{ role: "user", content: "x" }] });
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? null)).toEqual(["hi", null]);
      expect(chunks.some((c) => c.usage)).toBe(false);
      expect(await until(() => logRecords(own, "request").at(-1), "the request's log line")).toMatchObject({ status: 200, prompt_tokens: 7 });
    } finally {
      engine.stop(true);
    }
  });
});

describe("a stream that asked for usage", () => {
  it("gets its usage chunk, as from the engine", async () => {
    const chunks = await collect(router.client(), {
      model: "sim-model",
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 3,
      messages: [{ role: "user", content: `${SALT} asked` }],
    });
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage).toMatchObject({ completion_tokens: 3, prompt_tokens_details: { cached_tokens: 0 } });
    // vLLM writes no usage key on the other chunks (model_dump_json(exclude_unset=True))
    expect(chunks.slice(0, -1).every((c) => c.usage === undefined)).toBe(true);
  });
});

/** A router in front of one sim of `engine`, once it has recognised the engine's family. */
async function engineFleet(engine: "ollama" | "vllm") {
  const own = await startSimInProcess(`${engine}0`, { engine });
  const ownRouter = await startRouterInProcess([own]);
  await until(
    async () => (((await (await fetch(`${ownRouter.url}/status`)).json()) as { replicas: { facts: { family: string | null } | null }[] }).replicas[0]!.facts?.family === engine ? true : undefined),
    `the router's discovery of the ${engine} engine`,
  );
  return { own, ownRouter };
}

describe("Ollama: a completions stream that did not ask for usage", () => {
  it("gets the engine's own bytes (Ollama puts a zero usage in every chunk once asked: taken out), and later streams there still teach the router their usage", async () => {
    const { own, ownRouter } = await engineFleet("ollama");
    const body = JSON.stringify({ model: "sim-model", stream: true, max_tokens: 4, prompt: `${SALT} ollama completions` });
    const post = (base: string) => fetch(`${base}/v1/completions`, { method: "POST", body, headers: { "content-type": "application/json" } }).then((r) => r.text());
    const viaRouter = await post(ownRouter.url);
    expect(viaRouter).not.toContain("usage");
    expect(normalise(viaRouter)).toBe(normalise(await post(own.url)));
    // The router still asks for usage there: a chat stream that did not ask reports its prompt tokens.
    await collect(ownRouter.client(), { model: "sim-model", stream: true, max_tokens: 2, messages: [{ role: "user", content: `${SALT} ollama chat` }] });
    const line = await until(() => logRecords(ownRouter, "request").find((r) => r.endpoint === "chat"), "the chat stream's log line");
    expect(line.prompt_tokens).toBeGreaterThan(0);
  });
});

describe("vLLM: stream_options {} (include_usage defaults to true there)", () => {
  it("the client asked for usage as vLLM reads it: it gets the usage chunk, the engine's bytes", async () => {
    const { own, ownRouter } = await engineFleet("vllm");
    const body = JSON.stringify({ model: "sim-model", stream: true, stream_options: {}, max_tokens: 3, messages: [{ role: "user", content: `${SALT} vllm` }] });
    const post = (base: string) => fetch(`${base}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" } }).then((r) => r.text());
    const viaRouter = await post(ownRouter.url);
    expect(viaRouter).toContain(`"choices":[],"usage":{`);
    expect(normalise(viaRouter)).toBe(normalise(await post(own.url)));
  });
});
