import { describe, expect, it } from "bun:test";
import { ResponseTap } from "../../src/proxy/tap.ts";

const enc = new TextEncoder();

/** Feed `text` to a tap in pieces of `size` bytes (network chunks split anywhere). */
function tap(contentType: string, text: string, size = 7) {
  const t = new ResponseTap(contentType);
  const bytes = enc.encode(text);
  for (let i = 0; i < bytes.length; i += size) t.push(bytes.subarray(i, i + size));
  return t.finish();
}

const sse = (...events: unknown[]) => events.map((e) => (typeof e === "string" ? e : `data: ${JSON.stringify(e)}\n\n`)).join("");

describe("ResponseTap reads usage from every engine's shape, whatever the chunking", () => {
  it.each([
    [
      "OpenAI chat stream with include_usage",
      "text/event-stream",
      sse({ choices: [{ delta: { content: "hi" } }] }, { choices: [], usage: { prompt_tokens: 900, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 880 } } }, "data: [DONE]\n\n"),
      { promptTokens: 900, cachedTokens: 880, completionTokens: 3 },
    ],
    [
      "Anthropic stream (input_tokens excludes cache reads)",
      "text/event-stream",
      `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { usage: { input_tokens: 20, cache_read_input_tokens: 880, output_tokens: 1 } } })}\n\n` +
        `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", usage: { output_tokens: 5 } })}\n\n`,
      { promptTokens: 900, cachedTokens: 880, completionTokens: 5 },
    ],
    [
      "Responses stream (id from response.created, usage from response.completed)",
      "text/event-stream",
      `event: response.created\ndata: ${JSON.stringify({ type: "response.created", response: { id: "resp_1" } })}\n\n` +
        `event: response.completed\ndata: ${JSON.stringify({ type: "response.completed", response: { id: "resp_1", usage: { input_tokens: 50, output_tokens: 2, input_tokens_details: { cached_tokens: 32 } } } })}\n\n`,
      { responseId: "resp_1", promptTokens: 50, cachedTokens: 32, completionTokens: 2 },
    ],
    [
      "llama.cpp timings",
      "application/json",
      JSON.stringify({ choices: [], timings: { prompt_n: 12, cache_n: 500, predicted_n: 4 } }),
      { promptTokens: 512, cachedTokens: 500 },
    ],
    [
      "a non-streamed Responses body",
      "application/json; charset=utf-8",
      JSON.stringify({ object: "response", id: "resp_2", usage: { input_tokens: 9, output_tokens: 1 } }),
      { responseId: "resp_2", promptTokens: 9, completionTokens: 1 },
    ],
  ])("%s", (_name, type, text, expected) => {
    expect(tap(type, text)).toEqual(expected);
    expect(tap(type, text, 1)).toEqual(expected);
  });

  it("a stream cut before its final event reports what it saw, and garbage is ignored", () => {
    expect(tap("text/event-stream", "data: {not json}\n\ndata: {\"usage\":{\"prompt_tokens\":4}}")).toEqual({ promptTokens: 4 });
    expect(tap("text/plain", "usage prompt_tokens 5")).toEqual({});
  });
});
