/**
 * The small pure parts: SSE framing, per-request truth from response bodies, engine error
 * messages, flag parsing, progress lines and the table layout.
 */
import { describe, expect, it } from "bun:test";
import { LlmrouteError } from "../../src/errors.ts";
import { parseProbeArgs } from "../../src/probe/args.ts";
import { errorMessage, usageOf } from "../../src/probe/client.ts";
import { createProgress } from "../../src/probe/progress.ts";
import { captureUi } from "../helpers/ui.ts";
import { SseParser } from "../../src/engines/sse.ts";

describe("SseParser", () => {
  const stream = 'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":2}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n';

  it.each([1, 2, 3, 7, 1_000])("yields the same events whatever the chunk size (%d)", (size) => {
    const p = new SseParser();
    const events: string[] = [];
    for (let i = 0; i < stream.length; i += size) events.push(...p.push(stream.slice(i, i + size)));
    events.push(...p.end());
    expect(events).toEqual(['{"a":1}', '{"b":2}', "line1\nline2", "[DONE]"]);
  });

  it("an unterminated last event still counts at end of stream", () => {
    const p = new SseParser();
    expect(p.push('data: {"x":1}')).toEqual([]);
    expect(p.end()).toEqual(['{"x":1}']);
  });
});

describe("usageOf: per-request truth", () => {
  it.each([
    [{ usage: { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: 96 } } }, { promptTokens: 100, cachedTokens: 96, cachedSource: "usage" }],
    [{ usage: { prompt_tokens: 100, prompt_tokens_details: null } }, { promptTokens: 100 }],
    [{ usage: { prompt_tokens: 100 }, timings: { cache_n: 80, prompt_n: 20 } }, { promptTokens: 100, cachedTokens: 80, cachedSource: "timings" }],
    [{ choices: [] }, {}],
    [null, {}],
  ])("%j", (body, expected) => {
    expect(usageOf(body)).toEqual(expected as never);
  });
});

describe("errorMessage", () => {
  it.each([
    ['{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","code":404}}', "The model `x` does not exist."],
    ['{"detail":"Not Found"}', "Not Found"],
    ['{"error":"unauthorized"}', "unauthorized"],
    ["plain text\n", "plain text"],
    ["", "(empty body)"],
  ])("%s → %s", (body, message) => {
    expect(errorMessage(body)).toBe(message);
  });
});

describe("parseProbeArgs", () => {
  it("defaults: 16k tokens, one pair, four turns, 600 s, router.toml", () => {
    expect(parseProbeArgs({ url: "http://h:8000/v1/" })).toEqual({
      mode: { kind: "url", url: "http://h:8000" },
      config: "router.toml",
      tokens: 16_000,
      repeat: 1,
      turns: 4,
      timeoutMs: 600_000,
      json: false,
    });
  });

  it("keeps a URL's credentials (sent as Basic auth) and never echoes them in an error", () => {
    expect(parseProbeArgs({ url: "http://u:p%40w@h:8000/v1" }).mode).toEqual({ kind: "url", url: "http://u:p%40w@h:8000" });
    expect(() => parseProbeArgs({ via: "ftp://u:pw@h" })).toThrow('probe: --via "ftp://***@h": must be http:// or https://');
  });

  it("reads --api-key env:NAME from the environment, so the key stays out of argv", () => {
    expect(parseProbeArgs({ via: "http://r:8080", "api-key": "env:K" }, { K: "sk-1" }).apiKey).toBe("sk-1");
  });

  it.each([
    [{}, "say what to probe"],
    [{ url: "http://a", via: "http://b" }, "exclude each other"],
    [{ url: "localhost:8000" }, "must be http"],
    [{ url: "not a url" }, "not a URL"],
    [{ all: true, tokens: "lots" }, "--tokens"],
    [{ all: true, repeat: "0" }, "--repeat"],
    [{ via: "http://r", turns: "1" }, "--turns"],
    [{ url: "http://a", "metrics-path": "metrics" }, "--metrics-path"],
    [{ url: "http://a", "api-key": "env:MISSING" }, "MISSING is not set"],
  ])("%j is a usage error (exit 2) mentioning %s", (raw, text) => {
    let error: unknown;
    try {
      parseProbeArgs(raw, {});
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(LlmrouteError);
    expect((error as LlmrouteError).exitCode).toBe(2);
    expect((error as LlmrouteError).message).toContain(text);
  });
});

describe("progress", () => {
  it("off a TTY: one line when a step starts and one with its result", () => {
    const seen = captureUi();
    try {
      let t = 0;
      const p = createProgress({ now: () => t });
      const done = p.step("cold request (90,000 tokens)");
      t = 22_300;
      done("TTFT 22.3 s");
      p.note("warning: busy");
      expect(seen.text).toBe("cold request (90,000 tokens)...\ncold request (90,000 tokens): TTFT 22.3 s (22.3 s)\nwarning: busy\n");
      expect(seen.logs.map((l) => l.type)).toEqual(["start", "success", "info"]);
    } finally {
      seen.restore();
    }
  });
});

