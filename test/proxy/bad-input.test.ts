/**
 * Whatever a client sends, it gets a clear 4xx and the router stays up. One table, raw
 * bytes on a real socket: each case's status, and the API's error JSON where the router
 * answers. Malformed HTTP (bare CR/LF in a header, obs-fold, NUL, both Content-Length and
 * Transfer-Encoding, oversized heads) is refused by Bun's HTTP parser before the router
 * sees a request: a bare 400/431 with no body, and the connection closed.
 *
 * The router runs in this process (startRouter) so the body deadline can be short; so
 * does its engine, a sim.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { parseConfig } from "../../src/config.ts";
import { memoryLog } from "../../src/log.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { startSimInProcess, until, type LocalSim } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { rawExchange } from "../helpers/raw-http.ts";

let sim: LocalSim;
let router: RouterServer;
let port: number;
const log = memoryLog();

beforeAll(async () => {
  sim = await startSimInProcess("gpu0");
  const config = parseConfig(
    `[server]\nlisten = "127.0.0.1:0"\nmax_body = "1MiB"\n[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "${sim.url}"\n`,
    "bad-input.toml",
  );
  // A body deadline the slow-loris case meets quickly, and a whole body sent at once never does.
  router = await startRouter(config, { log, bodyTimeoutMs: 2_000 });
  port = router.port;
});
afterAll(async () => {
  await router.stop();
  await killAll();
});

/** A raw HTTP/1.1 request with a correct Content-Length (unless `headers` say otherwise). */
function http(method: string, path: string, body: string | Uint8Array = "", headers: string[] = ["Content-Type: application/json"]): Uint8Array {
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const length = headers.some((h) => /^(content-length|transfer-encoding):/i.test(h)) || (method === "GET" && bytes.length === 0) ? [] : [`Content-Length: ${bytes.length}`];
  const head = [`${method} ${path} HTTP/1.1`, "Host: router.test", ...headers, ...length, "", ""].join("\r\n");
  return new Uint8Array([...new TextEncoder().encode(head), ...bytes]);
}

const chat = (fields: Record<string, unknown>) => JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 1, ...fields });
const nested = (depth: number) => `{"model":"sim-model","messages":[{"role":"user","content":${"[".repeat(depth)}${"]".repeat(depth)}}]}`;
const utf8 = (s: string) => new TextEncoder().encode(s);

/** status, then the error JSON's type and a fragment of its message; "parser" = Bun's bare reply, "closed" = no reply. */
type Expect = [number, string, RegExp] | [number, "parser"] | ["closed"];

const CASES: [string, Uint8Array | Uint8Array[], Expect][] = [
  // bodies
  ["invalid JSON", http("POST", "/v1/chat/completions", "{not json"), [400, "invalid_request_error", /not valid JSON/]],
  ["truncated JSON", http("POST", "/v1/chat/completions", `{"model":"sim-model","messages":[`), [400, "invalid_request_error", /not valid JSON/]],
  ["invalid UTF-8", http("POST", "/v1/chat/completions", new Uint8Array([...utf8(`{"model":"sim-model","messages":[{"role":"user","content":"`), 0xff, 0xfe, ...utf8(`"}]}`)])), [400, "invalid_request_error", /not valid UTF-8/]],
  ["an empty body", http("POST", "/v1/chat/completions", ""), [400, "invalid_request_error", /empty/]],
  ["a JSON array", http("POST", "/v1/chat/completions", "[]"), [400, "invalid_request_error", /must be a JSON object/]],
  ["a JSON string", http("POST", "/v1/completions", `"hello"`), [400, "invalid_request_error", /must be a JSON object/]],
  ["JSON null", http("POST", "/v1/responses", "null"), [400, "invalid_request_error", /must be a JSON object/]],
  ["a JSON number", http("POST", "/v1/embeddings", "42"), [400, "invalid_request_error", /must be a JSON object/]],
  ["model is a number", http("POST", "/v1/chat/completions", chat({ model: 5 })), [400, "invalid_request_error", /`model` must be a string, not number/]],
  ["messages is a string", http("POST", "/v1/chat/completions", chat({ messages: "hi" })), [400, "invalid_request_error", /`messages` must be an array, not string/]],
  ["stream is a string", http("POST", "/v1/chat/completions", chat({ stream: "yes" })), [400, "invalid_request_error", /`stream` must be a boolean/]],
  ["stream_options is a string", http("POST", "/v1/chat/completions", chat({ stream: true, stream_options: "usage" })), [400, "invalid_request_error", /`stream_options` must be an object/]],
  ["previous_response_id is a number", http("POST", "/v1/responses", JSON.stringify({ model: "sim-model", input: "x", previous_response_id: 42 })), [400, "invalid_request_error", /`previous_response_id` must be a string/]],
  ["prompt_cache_key is an object", http("POST", "/v1/chat/completions", chat({ prompt_cache_key: {} })), [400, "invalid_request_error", /`prompt_cache_key` must be a string/]],
  ["10,000 levels of nesting", http("POST", "/v1/chat/completions", nested(10_000)), [400, "invalid_request_error", /deeper than 128 levels/]],
  ["129 levels of nesting", http("POST", "/v1/chat/completions", nested(127)), [400, "invalid_request_error", /deeper than 128 levels/]],
  ["invalid JSON on /v1/messages (Anthropic's error shape)", http("POST", "/v1/messages", "{"), [400, "invalid_request_error", /not valid JSON/]],
  // a lone surrogate: not text (llama.cpp answers 500; Go's JSON, Ollama's, would change it to U+FFFD)
  ["a lone high surrogate in a chat message", http("POST", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"a\\ud800b"}]}`), [400, "invalid_request_error", /lone UTF-16 surrogate/]],
  ["a lone low surrogate in a prompt", http("POST", "/v1/completions", `{"model":"sim-model","prompt":"\\uDC00","max_tokens":1}`), [400, "invalid_request_error", /lone UTF-16 surrogate/]],
  ["a lone surrogate in a key, on /v1/messages", http("POST", "/v1/messages", `{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{"\\ud83d":1}}`), [400, "invalid_request_error", /lone UTF-16 surrogate/]],
  // each endpoint's required field (required by the API, refused by every engine)
  ["a chat without messages", http("POST", "/v1/chat/completions", JSON.stringify({ model: "sim-model", max_tokens: 1 })), [400, "invalid_request_error", /^`messages` is required$/]],
  ["a completion without a prompt", http("POST", "/v1/completions", JSON.stringify({ model: "sim-model", max_tokens: 1 })), [400, "invalid_request_error", /^`prompt` is required \(or `prompt_embeds`\)$/]],
  ["an Anthropic message without messages", http("POST", "/v1/messages", JSON.stringify({ model: "sim-model", max_tokens: 1 })), [400, "invalid_request_error", /^`messages` is required$/]],
  ["a response without input", http("POST", "/v1/responses", JSON.stringify({ model: "sim-model" })), [400, "invalid_request_error", /^`input` is required$/]],
  ["a body over max_body on /v1/messages (Anthropic's type)", http("POST", "/v1/messages", "x".repeat(1_100_000)), [413, "request_too_large", /larger than server.max_body/]],
  [
    "10,000 messages (passed on: the engine's context limit)",
    http("POST", "/v1/chat/completions", JSON.stringify({ model: "sim-model", max_tokens: 1, messages: Array.from({ length: 10_000 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `m${i}` })) })),
    [400, "BadRequestError", /maximum context length is 4096 tokens/],
  ],
  ["a body over max_body, announced", http("POST", "/v1/chat/completions", "x".repeat(1_100_000)), [413, "invalid_request_error", /larger than server.max_body/]],
  [
    "a body over max_body, chunked",
    http("POST", "/v1/chat/completions", `${(1_100_000).toString(16)}\r\n${"x".repeat(1_100_000)}\r\n0\r\n\r\n`, ["Content-Type: application/json", "Transfer-Encoding: chunked"]),
    [413, "invalid_request_error", /larger than server.max_body/],
  ],
  [
    "a slow-loris body (10 of 100 bytes, then nothing)",
    [http("POST", "/v1/chat/completions", "", ["Content-Type: application/json", "Content-Length: 100"]), utf8(`{"model":`)],
    [408, "invalid_request_error", /did not arrive within/],
  ],
  ["an unknown model", http("POST", "/v1/chat/completions", chat({ model: "gpt-9" })), [404, "not_found_error", /does not exist on any replica/]],
  // methods and paths
  ["GET on a POST endpoint", http("GET", "/v1/chat/completions"), [405, "invalid_request_error", /takes POST/]],
  ["PUT on a POST endpoint", http("PUT", "/v1/completions", chat({})), [405, "invalid_request_error", /takes POST/]],
  ["DELETE on a POST endpoint", http("DELETE", "/v1/messages"), [405, "invalid_request_error", /takes POST/]],
  ["an unknown path", http("GET", "/v2/models"), [404, "not_found_error", /no route for GET \/v2\/models/]],
  ["a malformed percent-escape in a response id", http("GET", "/v1/responses/%E0%A4%A"), [400, "invalid_request_error", /response id in the path is not valid percent-encoding: %E0%A4%A/]],
  ["a percent-escape of invalid UTF-8 in a response id", http("DELETE", "/v1/responses/resp_%FF/input_items"), [400, "invalid_request_error", /not valid percent-encoding/]],
  ["the root", http("GET", "/"), [404, "not_found_error", /no route/]],
  ["an unknown method", http("FOO", "/v1/chat/completions"), ["closed"]],
  // malformed HTTP: Bun's parser
  ["a bare CR in a header value (CRLF injection)", utf8("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\rInjected: b\r\n\r\n"), [400, "parser"]],
  ["a bare LF in a header value", utf8("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\nInjected: b\r\n\r\n"), [400, "parser"]],
  ["a NUL in a header value", utf8("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"), [400, "parser"]],
  ["an obs-folded header", utf8("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"), [400, "parser"]],
  ["CRLF injected into a tenant header", utf8("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Llmroute-Tenant: a\r\rAuthorization: b\r\n\r\n"), [400, "parser"]],
  ["a 200 KB header", utf8(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(200_000)}\r\n\r\n`), [431, "parser"]],
  ["500 headers", utf8(`GET /v1/models HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 500 }, (_, i) => `X-H${i}: v`).join("\r\n")}\r\n\r\n`), [431, "parser"]],
  ["a 100 KB URL", utf8(`GET /v1/${"a".repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`), [431, "parser"]],
  ["Content-Length and Transfer-Encoding (smuggling)", utf8("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), [400, "parser"]],
  ["two Content-Lengths", utf8("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"), [400, "parser"]],
  ["a bad chunk size", utf8("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"), [400, "parser"]],
];

describe("bad input: the documented 4xx, and the router stays up", () => {
  it.each(CASES)("%s", async (_name, request, expected) => {
    const res = await rawExchange(port, request, { gapMs: 20 });
    if (expected[0] === "closed") {
      expect([res.status, res.ended]).toEqual([0, "closed"]);
      return;
    }
    expect(res.status).toBe(expected[0]);
    if (expected[1] === "parser") {
      expect(res.body).toBe("");
      return;
    }
    const [status, type, message] = expected as [number, string, RegExp];
    // OpenAI's {"error":{…,"code":status}}, or Anthropic's {"type":"error","error":{…}} on /v1/messages
    const body = JSON.parse(res.body);
    expect(body.error.type).toBe(type);
    expect(body.error.message).toMatch(message);
    if (body.type !== "error") expect(body.error.code).toBe(status);
  });

  it("a malformed percent-escape is logged and counted as a rejection, not an unhandled error", async () => {
    const from = log.records.length;
    const res = await rawExchange(port, http("GET", "/v1/responses/%E0%A4%A"));
    expect(res.status).toBe(400);
    expect(log.records.slice(from).map((r) => [r.level, r.msg, r.fields.status, r.fields.outcome])).toEqual([["info", "request", 400, "rejected"]]);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/llmroute_requests_total\{[^}]*status="400"[^}]*outcome="rejected"[^}]*\} [1-9]/);
  });

  it.each([
    ["a surrogate pair (an emoji written as two escapes)", "/v1/chat/completions", `{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}`],
    ["an escaped backslash before 'ud800' (text, not an escape)", "/v1/chat/completions", `{"model":"sim-model","max_tokens":1,"messages":[{"role":"user","content":"\\\\ud800"}]}`],
    ["an empty messages array (llama.cpp serves it)", "/v1/chat/completions", `{"model":"sim-model","max_tokens":1,"messages":[]}`],
    ["a chat without model (vLLM and llama.cpp use the one they serve)", "/v1/chat/completions", `{"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`],
    ["/v1/messages without max_tokens (llama.cpp serves it)", "/v1/messages", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`],
    ["a completion with prompt_embeds and no prompt (vLLM's)", "/v1/completions", `{"model":"sim-model","max_tokens":1,"prompt_embeds":"AAAA"}`],
  ])("what an engine accepts is passed on, not answered by the router: %s", async (_name, path, body) => {
    const from = log.records.length;
    await rawExchange(port, http("POST", path, body));
    const line = await until(() => log.records.slice(from).find((r) => r.msg === "request"), "the request's log line");
    expect(line.fields.replica).toBe("gpu0");
    expect(line.fields.outcome).not.toBe("rejected");
  });

  it("an HTTP/1.0 request without Host is answered (it used to be a 500)", async () => {
    const res = await rawExchange(port, utf8("GET /v1/models HTTP/1.0\r\n\r\n"));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).data[0].id).toBe("sim-model");
  });

  it("a UTF-8 byte order mark is ignored, as RFC 8259 allows (and forwarded: Python's json reads it too)", async () => {
    const res = await rawExchange(port, http("POST", "/v1/chat/completions", `\uFEFF${chat({})}`));
    expect(res.status).toBe(200);
  });

  it("a client that stops sending mid-body and hangs up: nothing to answer, nothing left behind", async () => {
    // Expect: 100-continue makes the moment the router starts reading the body visible:
    // Bun answers "100 Continue" then. Ten bytes of the promised 1,000, and the client leaves.
    let answered!: (text: string) => void;
    const first = new Promise<string>((resolve) => (answered = resolve));
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data: (_, chunk) => answered(chunk.toString("latin1")) } });
    socket.write(http("POST", "/v1/chat/completions", "", ["Content-Type: application/json", "Content-Length: 1000", "Expect: 100-continue"]));
    expect(await first).toStartWith("HTTP/1.1 100 Continue\r\n");
    socket.write(utf8(`{"model":"`));
    socket.end();
    const line = await until(() => log.records.find((r) => r.msg === "request" && r.fields.status === 499), "the abandoned request's log line");
    expect(line.fields).toMatchObject({ outcome: "client_cancelled", error: "the client closed the connection before sending its whole body" });
    expect(log.records.filter((r) => r.level === "error")).toEqual([]);
  });

  it("a client that never reads its stream holds nothing up; when it hangs up, the engine is told to stop", async () => {
    const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
    const cancelledBefore = (await sim.state()).cancelled_total;
    socket.write(http("POST", "/v1/chat/completions", chat({ stream: true, max_tokens: 3000 })));
    await until(async () => (await sim.state()).running === 1, "the stream running");
    const other = await rawExchange(port, http("POST", "/v1/chat/completions", chat({})));
    expect(other.status).toBe(200);
    socket.end();
    await until(async () => (await sim.state()).cancelled_total === cancelledBefore + 1, "the engine to see the cancel");
  });

  it("after all of that, the router still serves", async () => {
    const res = await rawExchange(port, http("POST", "/v1/chat/completions", chat({})));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).choices).toHaveLength(1);
    expect(router.fleet.replicas[0]!.state).toBe("up");
  });
});
