/**
 * The router as users meet it: sim replicas and the router on ephemeral loopback ports
 * (in this process), driven by the official openai and Anthropic clients.
 */
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { startRouterInProcess, startSimInProcess, type LocalSim, type Router } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

let sims: LocalSim[];
let router: Router;
let client: OpenAI;

beforeAll(async () => {
  sims = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
  router = await startRouterInProcess(sims, { toml: `[server]\nmax_body = "64KiB"\n` });
  client = router.client();
});
afterAll(killAll);

const SALT = `run ${crypto.randomUUID()}`;
const headersOf = (r: Response) => ({ replica: r.headers.get("x-llmroute-replica"), route: r.headers.get("x-llmroute-route") });

describe("routing through the router", () => {
  it("a batch of one-shots alternates the replicas, and every response names replica and reason", async () => {
    const seen: { replica: string | null; route: string | null }[] = [];
    for (let i = 0; i < 6; i++) {
      const { response, data } = await client.chat.completions
        .create({ model: "sim-model", messages: [{ role: "system", content: "be brief" }, { role: "user", content: `${SALT} q${i}` }], max_tokens: 2 })
        .withResponse();
      expect(data.choices[0]!.message.role).toBe("assistant");
      seen.push(headersOf(response));
    }
    expect(seen.every((h) => h.route === "spread")).toBe(true);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.replica).not.toBe(seen[i - 1]!.replica);
    expect(new Set(seen.map((h) => h.replica))).toEqual(new Set(["gpu0", "gpu1"]));
  });

  it.each([
    ["a long shared prefix", "You are a careful agent. ".repeat(120)],
    ["a tiny shared prefix (a few hundred bytes)", "Be brief."],
  ])("a growing conversation with %s stays on turn one's replica, and its warm turns hit the cache", async (_name, system) => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: `${SALT} ${system}` },
      { role: "user", content: "Start the task." },
    ];
    const turns: { replica: string | null; route: string | null; cached: number }[] = [];
    for (let t = 0; t < 5; t++) {
      const { data, response } = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 4 }).withResponse();
      turns.push({ ...headersOf(response), cached: data.usage?.prompt_tokens_details?.cached_tokens ?? 0 });
      messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" }, { role: "user", content: `tool output ${t}: ${"x".repeat(200)}` });
    }
    expect(new Set(turns.map((t) => t.replica)).size).toBe(1);
    expect(turns.map((t) => t.route)).toEqual(["spread", "pin", "pin", "pin", "pin"]);
    for (const t of turns.slice(1)) expect(t.cached).toBeGreaterThan(0);
  });

  it("streams chunk by chunk with the final usage, and the headers", async () => {
    const { data: stream, response } = await client.chat.completions
      .create({ model: "sim-model", stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: `${SALT} stream` }], max_tokens: 6 })
      .withResponse();
    expect(response.headers.get("content-type")).toContain("text/event-stream");
    expect(headersOf(response).replica).toMatch(/^gpu[01]$/);
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.filter((c) => c.choices[0]?.delta?.content).length).toBe(6);
    expect(chunks.at(-1)!.usage).toMatchObject({ completion_tokens: 6 });
  });

  it("the Anthropic client works through /v1/messages", async () => {
    const anthropic = new Anthropic({ baseURL: router.url, apiKey: "unused", maxRetries: 0 });
    const { data, response } = await anthropic.messages
      .create({ model: "sim-model", max_tokens: 3, system: "be brief", messages: [{ role: "user", content: `${SALT} hi` }] })
      .withResponse();
    expect(data.type).toBe("message");
    expect(data.usage.output_tokens).toBe(3);
    expect(headersOf(response).route).toBe("spread");

    const stream = anthropic.messages.stream({ model: "sim-model", max_tokens: 3, messages: [{ role: "user", content: `${SALT} stream` }] });
    const final = await stream.finalMessage();
    expect(final.usage.output_tokens).toBe(3);
  });

  it("previous_response_id goes to the replica that holds the response (sticky)", async () => {
    const first = await client.responses.create({ model: "sim-model", input: `${SALT} remember me`, max_output_tokens: 2 }).withResponse();
    const owner = headersOf(first.response).replica;
    for (let i = 0; i < 3; i++) {
      const next = await client.responses
        .create({ model: "sim-model", input: `and ${i}`, previous_response_id: first.data.id, max_output_tokens: 2 })
        .withResponse();
      expect(headersOf(next.response)).toEqual({ replica: owner, route: "sticky" });
      expect(next.data.usage?.input_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
    }
  });

  it("a tenant key separates identical conversations", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: `${SALT} tenant` },
      { role: "assistant", content: "ok" },
      { role: "user", content: "go on" },
    ];
    const as = (tenant: string) => ({ headers: { "x-llmroute-tenant": tenant } });
    const a = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }, as("team-a")).withResponse();
    const b = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }, as("team-b")).withResponse();
    expect([headersOf(a.response).route, headersOf(b.response).route]).toEqual(["spread", "spread"]);
    const again = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 }, as("team-a")).withResponse();
    expect(headersOf(again.response)).toEqual({ replica: headersOf(a.response).replica, route: "pin" });
  });

  it("/v1/models is the union of the replicas' models; /health is 200", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["sim-model"]);
    const health = await fetch(`${router.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", healthy: ["gpu0", "gpu1"] });
  });

  it("other /v1/* paths and the engines' /tokenize pass through to a replica", async () => {
    const res = await fetch(`${router.url}/v1/models/sim-model`);
    expect(res.headers.get("x-llmroute-replica")).toMatch(/^gpu[01]$/);
    const tok = await fetch(`${router.url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-model", prompt: "x".repeat(400) }),
    });
    expect(tok.status).toBe(200);
    expect(tok.headers.get("x-llmroute-replica")).toMatch(/^gpu[01]$/);
    expect(((await tok.json()) as { count: number }).count).toBe(100);
    const unknown = await fetch(`${router.url}/tokenize`, { method: "POST", body: JSON.stringify({ model: "nope", prompt: "x" }), headers: { "content-type": "application/json" } });
    expect(unknown.status).toBe(404);
  });
});

describe("bad input gets the API's error JSON, and the router stays up", () => {
  it("unknown model → 404 not_found_error (OpenAI client)", async () => {
    const error = await client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect(error.status).toBe(404);
    expect(error.error).toMatchObject({ type: "not_found_error", param: "model", code: 404 });
  });

  it("unknown model on /v1/messages → Anthropic error JSON", async () => {
    const anthropic = new Anthropic({ baseURL: router.url, apiKey: "unused", maxRetries: 0 });
    const error = await anthropic.messages.create({ model: "nope", max_tokens: 1, messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(error).toBeInstanceOf(Anthropic.NotFoundError);
    expect(error.error).toMatchObject({ type: "error", error: { type: "not_found_error" } });
  });

  it("invalid JSON → 400", async () => {
    const res = await fetch(`${router.url}/v1/chat/completions`, { method: "POST", body: "{not json", headers: { "content-type": "application/json" } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { type: "invalid_request_error", code: 400 } });
  });

  it("a body over server.max_body → 413 without reading it all", async () => {
    const error = await client.chat.completions
      .create({ model: "sim-model", messages: [{ role: "user", content: "x".repeat(70 * 1024) }] })
      .catch((e) => e);
    expect(error.status).toBe(413);
    expect(error.error.message).toContain("server.max_body");
  });

  it("GET on a POST endpoint → 405; an unknown path → 404", async () => {
    expect((await fetch(`${router.url}/v1/chat/completions`)).status).toBe(405);
    expect((await fetch(`${router.url}/nope`)).status).toBe(404);
  });

  it("after all that, the router still serves", async () => {
    const r = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "still there?" }], max_tokens: 1 });
    expect(r.choices).toHaveLength(1);
  });
});
