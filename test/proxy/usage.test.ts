/**
 * Usage on every response: the one edit of the client's bytes (stream_options added) and
 * its undoing in the stream. Byte-exact tables; the end-to-end check with the official
 * client is in test/proxy/usage-relay.test.ts.
 */
import { describe, expect, it } from "bun:test";
import { nestingDepth, topLevelMembers } from "../../src/proxy/_json-members.ts";
import { VLLM } from "../../src/engines/vllm.ts";
import { UsageStripper, withUsageRequested } from "../../src/proxy/usage.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

function inject(endpoint: "chat" | "completions" | "responses" | "messages", text: string, asked?: (options: unknown) => boolean): string | undefined {
  const out = withUsageRequested(endpoint, JSON.parse(text), enc(text), asked);
  return out === undefined ? undefined : dec(out);
}

describe("withUsageRequested: only stream_options is written, every other byte is the client's", () => {
  it.each([
    ["no stream_options", `{"model":"m","stream":true,"messages":[]}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}`],
    ["whitespace and key order kept", `{ "stream" : true ,\n  "model":"m" }`, `{"stream_options":{"include_usage":true}, "stream" : true ,\n  "model":"m" }`],
    ["stream_options null", `{"stream":true,"stream_options":null,"x":1}`, `{"stream":true,"stream_options":{"include_usage":true},"x":1}`],
    ["include_usage false", `{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":true}}`],
    ["other stream options kept", `{"stream":true,"stream_options":{"continuous_usage_stats":false}}`, `{"stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`],
    ["a key inside a string is not a key", `{"prompt":"\\"stream_options\\": 1","stream":true}`, `{"stream_options":{"include_usage":true},"prompt":"\\"stream_options\\": 1","stream":true}`],
    ["non-ASCII text around it", `{"messages":[{"role":"user","content":"héllo 🌍 \\u00e9"}],"stream":true}`, `{"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"héllo 🌍 \\u00e9"}],"stream":true}`],
    ["duplicate keys: the last one, as JSON.parse reads it", `{"stream":true,"stream_options":{"a":1},"stream_options":null}`, `{"stream":true,"stream_options":{"a":1},"stream_options":{"include_usage":true}}`],
  ])("%s", (_name, body, expected) => {
    expect(inject("chat", body)).toBe(expected);
    expect(JSON.parse(inject("chat", body)!).stream_options.include_usage).toBe(true);
  });

  it.each([
    ["not streamed", "chat", `{"model":"m","messages":[]}`],
    ["stream false", "chat", `{"stream":false}`],
    ["usage already asked for", "chat", `{"stream":true,"stream_options":{"include_usage":true}}`],
    ["stream_options the engine will reject", "chat", `{"stream":true,"stream_options":"yes"}`],
    ["the Responses API reports usage anyway", "responses", `{"stream":true,"input":"x"}`],
    ["so does Anthropic's", "messages", `{"stream":true,"messages":[]}`],
  ] as const)("untouched: %s", (_name, endpoint, body) => {
    expect(inject(endpoint, body)).toBeUndefined();
  });

  // vLLM reads `include_usage` as true once stream_options is sent (engine/protocol.py
  // StreamOptions): the engine's profile says so, and such a client asked.
  it.each([
    ["stream_options {}", `{"stream":true,"stream_options":{}}`, undefined],
    ["only continuous_usage_stats", `{"stream":true,"stream_options":{"continuous_usage_stats":true}}`, undefined],
    ["include_usage false", `{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":true}}`],
    ["include_usage null (None: no usage)", `{"stream":true,"stream_options":{"include_usage":null}}`, `{"stream":true,"stream_options":{"include_usage":true}}`],
    ["no stream_options", `{"stream":true}`, `{"stream_options":{"include_usage":true},"stream":true}`],
  ])("vLLM's rule: %s", (_name, body, expected) => {
    expect(inject("chat", body, VLLM.stream.usageAsked)).toBe(expected);
  });

  it("OpenAI's rule where the engine says none: stream_options {} did not ask", () => {
    expect(inject("chat", `{"stream":true,"stream_options":{}}`)).toBe(`{"stream":true,"stream_options":{"include_usage":true}}`);
  });

  it("completions get it too", () => {
    expect(inject("completions", `{"stream":true,"prompt":"x"}`)).toBe(`{"stream_options":{"include_usage":true},"stream":true,"prompt":"x"}`);
  });
});

const chunk = (extra: string) => `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a"}}]${extra}}\n\n`;
const usageChunk = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}}}\n\n`;

describe("UsageStripper: the stream the client would have received", () => {
  it.each([
    ["the final usage chunk is dropped (vLLM)", chunk("") + usageChunk + "data: [DONE]\n\n", chunk("") + "data: [DONE]\n\n"],
    ['"usage":null in every chunk is cut out (OpenAI, the sim)', chunk(`,"usage":null`) + chunk(`,"usage":null`) + usageChunk + "data: [DONE]\n\n", chunk("") + chunk("") + "data: [DONE]\n\n"],
    // Ollama's completions, asked for usage, put a zero usage in every chunk (middleware/openai.go
    // CompleteWriter.writeResponse): the ask brought it, the client did not ask: cut out.
    [
      "a usage beside the choices, brought by the ask, is cut out (Ollama's completions)",
      `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"a","index":0,"finish_reason":null}],"model":"m","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}\n\ndata: {"id":"cmpl-1","object":"text_completion","choices":[],"model":"m","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\ndata: [DONE]\n\n`,
      `data: {"id":"cmpl-1","object":"text_completion","choices":[{"text":"a","index":0,"finish_reason":null}],"model":"m","system_fingerprint":"fp_ollama"}\n\ndata: [DONE]\n\n`,
    ],
    // vLLM with stream_options.continuous_usage_stats (and include_usage false): once the router
    // sets include_usage, every chunk carries usage (chat_completion/serving.py
    // chat_completion_stream_generator, include_continuous_usage) and the usage chunk follows.
    ["continuous usage the ask turned on is cut from every chunk, the usage chunk dropped (vLLM)", `data: {"choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}\n\n${usageChunk}data: [DONE]\n\n`, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n`],
    ["usage first in the object", `data: {"usage":null,"choices":[]}\n\n`, `data: {"choices":[]}\n\n`],
    ["CRLF line endings kept", chunk("").replace(/\n/g, "\r\n") + usageChunk.replace(/\n/g, "\r\n"), chunk("").replace(/\n/g, "\r\n")],
    ["comments, keep-alives and other events pass", `: ping\n\nevent: x\ndata: {"usage":1,"choices":[]}\n\n` + chunk(""), `: ping\n\nevent: x\ndata: {"usage":1,"choices":[]}\n\n` + chunk("")],
    ['"usage" inside generated text is text', `data: {"choices":[{"delta":{"content":"\\"usage\\":null"}}]}\n\n`, `data: {"choices":[{"delta":{"content":"\\"usage\\":null"}}]}\n\n`],
    ["not JSON passes", `data: {"usage": [broken\n\n`, `data: {"usage": [broken\n\n`],
  ])("%s", (_name, input, expected) => {
    const s = new UsageStripper();
    expect(dec(s.push(enc(input))) + dec(s.end())).toBe(expected);
  });

  it("gives the same bytes however the stream is cut into chunks", () => {
    const input = enc(chunk(`,"usage":null`) + chunk(`,"usage":null`) + usageChunk + "data: [DONE]\n\n");
    const expected = chunk("") + chunk("") + "data: [DONE]\n\n";
    for (let cut = 1; cut < input.length; cut++) {
      const s = new UsageStripper();
      const out = dec(s.push(input.subarray(0, cut))) + dec(s.push(input.subarray(cut))) + dec(s.end());
      expect(out).toBe(expected);
    }
    const s = new UsageStripper();
    let bytewise = "";
    for (const b of input) bytewise += dec(s.push(new Uint8Array([b])));
    expect(bytewise + dec(s.end())).toBe(expected);
  });

  it("holds back only an unfinished event, and passes it at the end", () => {
    const s = new UsageStripper();
    expect(dec(s.push(enc(chunk("") + "data: {\"choi")))).toBe(chunk(""));
    expect(dec(s.end())).toBe('data: {"choi');
  });
});

describe("the byte scanner", () => {
  it.each([
    [`{}`, []],
    [` { "a" : 1 , "b":[1,{"c":"}"}], "c\\"d":"x\\\\" } `, ["a", "b", 'c"d']],
    [`{"a":true,"b":null,"c":-1.5e3}`, ["a", "b", "c"]],
  ])("members of %s", (text, keys) => {
    expect(topLevelMembers(enc(text))!.members.map((m) => m.key)).toEqual(keys);
  });

  it.each([`[1]`, `{"a"}`, `{"a":1`, `{"a":"x}`, `"str"`, ``])("not an object, or cut off: %j", (text) => {
    expect(topLevelMembers(enc(text))).toBeUndefined();
  });

  it("nesting depth skips strings and stops at the limit", () => {
    expect(nestingDepth(enc(`{"a":[[{"b":"[[[["}]]]}`), 100)).toBe(4);
    expect(nestingDepth(enc("[".repeat(10_000)), 128)).toBe(129);
  });
});
