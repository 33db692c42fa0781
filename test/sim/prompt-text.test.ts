import { describe, expect, it } from "bun:test";
import { ApiError } from "../../src/sim/_api-error.ts";
import { parseRequest, renderChat, tokenizeText, type ChatMessage, type Endpoint } from "../../src/sim/prompt-text.ts";

const REPLY = "kaf bol tem ";

describe("rendering", () => {
  it("renders ChatML with a generation prompt", () => {
    expect(renderChat([{ role: "system", content: "S" }, { role: "user", content: "U" }])).toBe(
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  // The property the prefix cache depends on: turn 2 starts with exactly turn 1's prompt + reply.
  it.each<[Endpoint, Record<string, unknown>, (reply: string) => Record<string, unknown>]>([
    [
      "/v1/chat/completions",
      { messages: [{ role: "system", content: "rules" }, { role: "user", content: "q1" }], tools: [{ type: "function", function: { name: "f" } }] },
      (reply) => ({
        messages: [
          { role: "system", content: "rules" },
          { role: "user", content: "q1" },
          { role: "assistant", content: reply },
          { role: "user", content: "q2" },
        ],
        tools: [{ type: "function", function: { name: "f" } }],
      }),
    ],
    [
      "/v1/messages",
      { system: [{ type: "text", text: "rules" }], messages: [{ role: "user", content: "q1" }], max_tokens: 5 },
      (reply) => ({
        system: [{ type: "text", text: "rules" }],
        messages: [
          { role: "user", content: "q1" },
          { role: "assistant", content: [{ type: "text", text: reply }] },
          { role: "user", content: [{ type: "text", text: "q2" }] },
        ],
        max_tokens: 5,
      }),
    ],
    [
      "/v1/responses",
      { instructions: "rules", input: "q1" },
      (reply) => ({
        instructions: "rules",
        input: [
          { role: "user", content: "q1" },
          { role: "assistant", content: [{ type: "output_text", text: reply }] },
          { role: "user", content: "q2" },
        ],
      }),
    ],
  ])("%s: a continuation's prompt starts with the previous prompt and its reply", (endpoint, first, next) => {
    const one = parseRequest(endpoint, first).prompt;
    const two = parseRequest(endpoint, next(REPLY)).prompt;
    expect(two.startsWith(one + REPLY)).toBe(true);
  });

  it("renders tools and the Anthropic system prompt first, in the system area", () => {
    const p = parseRequest("/v1/messages", {
      system: "be brief",
      tools: [{ name: "ls", input_schema: {} }],
      messages: [{ role: "user", content: [{ type: "text", text: "hi" }, { type: "image", source: {} }] }],
    }).prompt;
    expect(p).toBe(`<|im_start|>system\nbe brief\n\n# Tools\n{"name":"ls","input_schema":{}}<|im_end|>\n<|im_start|>user\nhi\n<image><|im_end|>\n<|im_start|>assistant\n`);
  });

  it("renders tool calls and tool results into the conversation", () => {
    const p = parseRequest("/v1/chat/completions", {
      messages: [
        { role: "user", content: "list" },
        { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "ls", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c1", content: "a.txt" },
      ],
    }).prompt;
    expect(p).toContain(`<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>`);
    expect(p).toContain("<|im_start|>tool\n<tool_response>\na.txt\n</tool_response><|im_end|>");
  });

  it("uses a completion prompt as-is and reads each API's output-length field", () => {
    expect(parseRequest("/v1/completions", { prompt: "abc", max_tokens: 3 })).toMatchObject({ prompt: "abc", maxTokens: 3 });
    expect(parseRequest("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_completion_tokens: 7, max_tokens: 9 }).maxTokens).toBe(7);
    expect(parseRequest("/v1/responses", { input: "x", max_output_tokens: 4 }).maxTokens).toBe(4);
    expect(parseRequest("/v1/chat/completions", { messages: [{ role: "user", content: "x" }] }).maxTokens).toBeUndefined();
  });

  it("reads stream, stream_options and cache_salt", () => {
    const p = parseRequest("/v1/chat/completions", {
      messages: [{ role: "user", content: "x" }],
      stream: true,
      stream_options: { include_usage: true },
      cache_salt: "t1",
    });
    expect(p).toMatchObject({ stream: true, streamOptions: { include_usage: true }, salt: "t1" });
  });
});

describe("Responses API state", () => {
  it("prepends the stored conversation of previous_response_id after the instructions", () => {
    const stored: ChatMessage[] = [
      { role: "user", content: "q1" },
      { role: "assistant", content: REPLY },
    ];
    const p = parseRequest("/v1/responses", { instructions: "rules", input: "q2", previous_response_id: "resp_1" }, (id) =>
      id === "resp_1" ? stored : undefined,
    );
    expect(p.prompt).toBe(renderChat([{ role: "system", content: "rules" }, ...stored, { role: "user", content: "q2" }]));
    expect(p.conversation).toEqual([...stored, { role: "user", content: "q2" }]);
  });

  it("answers an unknown previous_response_id with 404", () => {
    const call = () => parseRequest("/v1/responses", { input: "q", previous_response_id: "resp_nope" });
    expect(call).toThrow(ApiError);
    expect(call).toThrow(/resp_nope/);
    try {
      call();
    } catch (error) {
      expect((error as ApiError).status).toBe(404);
    }
  });
});

describe("bad bodies are 400", () => {
  it.each<[Endpoint, unknown, RegExp]>([
    ["/v1/chat/completions", [], /JSON object/],
    ["/v1/chat/completions", { messages: [] }, /non-empty array/],
    ["/v1/chat/completions", { messages: [{ content: "x" }] }, /role/],
    ["/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 0 }, /max_tokens/],
    ["/v1/chat/completions", { messages: [{ role: "user", content: "x" }], n: 2 }, /n must be 1/],
    ["/v1/completions", { prompt: ["a", "b"] }, /one prompt/],
    ["/v1/completions", { prompt: [1, 2, 3] }, /token-id/],
    ["/v1/messages", { messages: "hi" }, /non-empty array/],
    ["/v1/responses", { input: 5 }, /input/],
    ["/v1/responses", { input: "x", model: 3 }, /model/],
  ])("%s %j", (endpoint, body, message) => {
    let caught: unknown;
    try {
      parseRequest(endpoint, body);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ApiError);
    expect((caught as ApiError).status).toBe(400);
    expect((caught as ApiError).message).toMatch(message);
  });
});

describe("tokenize bodies", () => {
  it.each<[unknown, { text: string; llamacpp: boolean }]>([
    [{ content: "abcd" }, { text: "abcd", llamacpp: true }],
    [{ model: "m", prompt: "abcd" }, { text: "abcd", llamacpp: false }],
    [{ messages: [{ role: "user", content: "u" }] }, { text: "<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n", llamacpp: false }],
    [{ messages: [{ role: "user", content: "u" }], add_generation_prompt: false }, { text: "<|im_start|>user\nu<|im_end|>\n", llamacpp: false }],
  ])("%j", (body, expected) => {
    expect(tokenizeText(body)).toEqual(expected);
  });
});
