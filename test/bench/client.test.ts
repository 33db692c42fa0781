import { describe, expect, it } from "bun:test";
import { parseSimPrefix, sendChat } from "../../src/bench/client.ts";
import { SseParser } from "../../src/engines/sse.ts";

const enc = new TextEncoder();

/** A fetch that answers with `chunks` (strings), one per read (no read-ahead), advancing a fake clock by 10 ms each. */
function fakeFetch(chunks: string[], init: ResponseInit = { headers: { "content-type": "text/event-stream", "x-llmroute-replica": "gpu1", "x-llmroute-route": "pin" } }) {
  let t = 0;
  const now = () => t;
  const fetch = async () => {
    t += 10;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = chunks.shift();
        t += 10;
        if (next === undefined) controller.close();
        else controller.enqueue(enc.encode(next));
      },
    }, { highWaterMark: 0 });
    return new Response(body, init);
  };
  return { fetch, now };
}

const role = 'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n';
const delta = (text: string) => `data: {"choices":[{"delta":{"content":${JSON.stringify(text)}}}]}\n\n`;
const usage = 'data: {"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":640}}}\n\n';

describe("sendChat", () => {
  it("times TTFT at the first content chunk, not the role chunk, and reads usage and headers", async () => {
    const { fetch, now } = fakeFetch([role, delta("ab "), delta("cd "), usage, "data: [DONE]\n\n"]);
    const out = await sendChat("http://x", {}, { fetch, now });
    expect(out).toMatchObject({ replica: "gpu1", route: "pin", status: 200, text: "ab cd ", promptTokens: 900, cachedTokens: 640, completionTokens: 2 });
    // fetch +10, role chunk +10, first content +10.
    expect(out.ttftMs).toBe(30);
    expect(out.totalMs).toBe(70);
    expect(out.error).toBeUndefined();
  });

  it("usage without prompt_tokens_details reports no cached figure: 0, and says it was not reported", async () => {
    const bare = 'data: {"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":2}}\n\n';
    const { fetch, now } = fakeFetch([delta("ab"), bare]);
    expect(await sendChat("http://x", {}, { fetch, now })).toMatchObject({ promptTokens: 900, cachedTokens: 0, cachedReported: false });
    const { fetch: f2, now: n2 } = fakeFetch([delta("ab"), usage]);
    expect((await sendChat("http://x", {}, { fetch: f2, now: n2 })).cachedReported).toBe(true);
  });

  it("reads a sim's own account of its cache hit from x-sim-prefix", async () => {
    const headers = { "content-type": "text/event-stream", "x-llmroute-replica": "gpu0", "x-llmroute-route": "pin", "x-sim-prefix": "cached=6320; stop=evicted; held=8000" };
    const { fetch, now } = fakeFetch([delta("ab"), usage], { headers });
    expect((await sendChat("http://x", {}, { fetch, now })).sim).toEqual({ cachedTokens: 6_320, stop: "evicted", heldTokens: 8_000 });
    const { fetch: plain, now: n2 } = fakeFetch([delta("ab"), usage]);
    expect((await sendChat("http://x", {}, { fetch: plain, now: n2 })).sim).toBeUndefined();
  });

  it.each([
    ["reasoning_content", "vLLM, SGLang, llama.cpp"],
    ["reasoning", "Ollama"],
  ] as const)("collects reasoning deltas (%s, as %s stream it) apart from content; TTFT is the first reasoning token", async (field, _engines) => {
    const thinking = (text: string) => `data: {"choices":[{"delta":{${JSON.stringify(field)}:${JSON.stringify(text)}}}]}\n\n`;
    const { fetch, now } = fakeFetch([role, thinking("let me "), thinking("see"), delta("ok"), usage]);
    const out = await sendChat("http://x", {}, { fetch, now });
    expect(out.reasoning).toEqual({ text: "let me see", field });
    expect(out.text).toBe("ok");
    expect(out.ttftMs).toBe(30);
    // A reply that is all reasoning (a tiny max_tokens) is still an answer.
    const { fetch: f2, now: n2 } = fakeFetch([thinking("hmm"), usage]);
    expect((await sendChat("http://x", {}, { fetch: f2, now: n2 })).error).toBeUndefined();
  });

  it("parses events split anywhere across network chunks", async () => {
    const whole = role + delta("x ") + usage + "data: [DONE]\n\n";
    const pieces = whole.match(/.{1,7}/gs)!;
    const { fetch, now } = fakeFetch(pieces);
    const out = await sendChat("http://x", {}, { fetch, now });
    expect(out.text).toBe("x ");
    expect(out.cachedTokens).toBe(640);
  });

  it("reports HTTP errors and streams without content as errors", async () => {
    const failing = async () => new Response(JSON.stringify({ error: { message: "no replica" } }), { status: 503 });
    const out = await sendChat("http://x", {}, { fetch: failing, replica: "r" });
    expect(out.status).toBe(503);
    expect(out.error).toContain("HTTP 503");
    const { fetch, now } = fakeFetch([role, usage]);
    expect((await sendChat("http://x", {}, { fetch, now })).error).toBe("the stream carried no content");
  });

  it("a reply whose first token ends it (a finish chunk, no content) is an answer: TTFT at the finish chunk", async () => {
    const finish = 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n';
    const { fetch, now } = fakeFetch([role, finish, usage]);
    const out = await sendChat("http://x", {}, { fetch, now });
    expect(out.error).toBeUndefined();
    expect(out.text).toBe("");
    expect(out.ttftMs).toBe(30);
    expect(out.cachedTokens).toBe(640);
  });

  it("reports an error event in the stream (the router's mid-stream failure)", async () => {
    const { fetch, now } = fakeFetch([delta("a "), 'data: {"error":{"message":"replica gpu0 failed mid-stream"}}\n\n']);
    expect((await sendChat("http://x", {}, { fetch, now })).error).toBe("replica gpu0 failed mid-stream");
  });

  it("reports a refused connection", async () => {
    const refused = async () => {
      throw new Error("connect ECONNREFUSED");
    };
    expect((await sendChat("http://x", {}, { fetch: refused })).error).toContain("ECONNREFUSED");
  });
});

describe("parseSimPrefix", () => {
  it.each([
    ["cached=0; stop=new", { cachedTokens: 0, stop: "new", heldTokens: 0 }],
    ["cached=122624; stop=full", { cachedTokens: 122_624, stop: "full", heldTokens: 122_624 }],
    [" cached=16; stop=evicted ", { cachedTokens: 16, stop: "evicted", heldTokens: 16 }],
    ["cached=16; stop=elsewhere; held=2000", { cachedTokens: 16, stop: "elsewhere", heldTokens: 2_000 }],
    ["cached=0; stop=elsewhere; held=6032; computed=7229", { cachedTokens: 0, stop: "elsewhere", heldTokens: 6_032, computedTokens: 7_229 }],
    ["cached=16; stop=elsewhere; held=", undefined],
    ["cached=16; stop=elsewhere; held=20; computed=", undefined],
    ["cached=16; stop=gone", undefined],
    ["cached=x; stop=new", undefined],
    [null, undefined],
  ] as const)("%p → %p", (header, expected) => {
    expect(parseSimPrefix(header)).toEqual(expected);
  });
});

describe("SseParser (as the bench uses it)", () => {
  it.each([
    [["data: a\n\n"], ["a"]],
    [["data: a\r\n\r\n"], ["a"]],
    [["da", "ta: a\n", "\ndata:b\n\n"], ["a", "b"]],
    [[": comment\n\nevent: x\ndata: 1\ndata: 2\n\n"], ["1\n2"]],
  ])("%j → %j", (chunks, expected) => {
    const p = new SseParser();
    expect([...chunks.flatMap((c) => p.push(c)), ...p.end()]).toEqual(expected);
  });

  it("an unterminated last event still counts at the end", () => {
    const p = new SseParser();
    expect(p.push("data: tail")).toEqual([]);
    expect(p.end()).toEqual(["tail"]);
  });
});
