/**
 * A zero-think engine for the overhead benchmark: it reads every request body whole (as any
 * engine must), spends nothing on a model, and answers at once — a chat completion with
 * usage (so a router's response tap does its usual work), or for a streamed request a
 * fixed number of SSE chunks a fixed gap apart, the usage chunk and `[DONE]`. What is left
 * to measure in front of it is HTTP and routing work.
 *
 * Not `llmroute sim`: the sim tokenises and runs a block cache per request, CPU that would
 * sit on the same two cores as the proxies under test and blur their difference.
 *
 *   npx bun perf/engine.ts [--port 0] [--chunks 40] [--gap-ms 5]
 */
import { parseArgs } from "node:util";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    port: { type: "string", default: "0" },
    chunks: { type: "string", default: "40" },
    "gap-ms": { type: "string", default: "5" },
  },
});
const CHUNKS = Number(values.chunks);
const GAP_MS = Number(values["gap-ms"]);
const STREAM = Buffer.from('"stream":true');
const encoder = new TextEncoder();

const completion = (promptTokens: number) =>
  `{"id":"chatcmpl-perf","object":"chat.completion","created":1700000000,"model":"perf-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok ok ok ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":${promptTokens},"completion_tokens":4,"total_tokens":${promptTokens + 4},"prompt_tokens_details":{"cached_tokens":0}}}`;
const chunk = (delta: string) =>
  encoder.encode(`data: {"id":"chatcmpl-perf","object":"chat.completion.chunk","created":1700000000,"model":"perf-model","choices":[{"index":0,"delta":{"content":"${delta}"},"finish_reason":null}]}\n\n`);
const usageChunk = (promptTokens: number) =>
  encoder.encode(
    `data: {"id":"chatcmpl-perf","object":"chat.completion.chunk","created":1700000000,"model":"perf-model","choices":[],"usage":{"prompt_tokens":${promptTokens},"completion_tokens":${CHUNKS},"total_tokens":${promptTokens + CHUNKS},"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: [DONE]\n\n`,
  );
const TOKEN = chunk(" tok");

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: Number(values.port),
  idleTimeout: 0,
  async fetch(req) {
    // A replica's path prefix (/r3/v1/…: perf/memory.ts lists this one engine as 8 replicas) is not the engine's.
    const path = new URL(req.url).pathname.replace(/^\/r\d+(?=\/)/, "");
    if (path === "/health") return new Response("ok");
    if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "perf-model", object: "model", owned_by: "perf" }] });
    if (req.method !== "POST") return new Response("not found", { status: 404 });
    const body = Buffer.from(await req.arrayBuffer());
    // ~4 bytes of JSON per token; the figure only has to look like an engine's.
    const promptTokens = Math.round(body.byteLength / 4);
    if (body.indexOf(STREAM) < 0) return new Response(completion(promptTokens), { headers: { "content-type": "application/json" } });
    let sent = 0;
    return new Response(
      new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (sent > 0) await Bun.sleep(GAP_MS);
          if (sent++ < CHUNKS) controller.enqueue(TOKEN);
          else {
            controller.enqueue(usageChunk(promptTokens));
            controller.close();
          }
        },
      }),
      { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } },
    );
  },
});
console.log(`perf engine listening on http://127.0.0.1:${server.port}`);
