/**
 * Header hygiene at the socket level: a raw client talks to the router (in this process),
 * whose replica is a raw listener recording the exact request head it receives. Hop-by-hop headers and
 * those a Connection header names never cross the router, either way; Via and
 * X-Forwarded-* are added; the client's credentials never reach a replica.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { startRouterInProcess, type Router } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { rawExchange, rawResponse, startRawReplica, type RawReplica, type RawRequest } from "../helpers/raw-http.ts";

const HOP_BY_HOP = ["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "upgrade", "expect", "transfer-encoding"];

let keyed: RawReplica;
let open: RawReplica;
let router: Router;
let port: number;

const completion = JSON.stringify({ id: "x", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });
const answer = (req: RawRequest) =>
  req.path === "/health"
    ? rawResponse("200 OK", ["Content-Type: application/json"], `{"status":"ok"}`)
    : rawResponse(
        "200 OK",
        [
          "Content-Type: application/json",
          "Connection: X-Upstream-Secret",
          "X-Upstream-Secret: engine-internal",
          "Keep-Alive: timeout=5",
          "Proxy-Authenticate: Basic realm=engine",
          "Trailer: X-Checksum",
          "Via: 1.1 engine-gateway",
          "X-Engine-Header: kept",
        ],
        completion,
      );

beforeAll(async () => {
  keyed = startRawReplica(answer);
  open = startRawReplica(answer);
  router = await startRouterInProcess(
    [
      { name: "keyed", url: keyed.url, extra: `models = ["keyed-model"]\napi_key = "replica-key"\n` },
      { name: "open", url: open.url, extra: `models = ["open-model"]\n` },
    ],
    { toml: `[server]\napi_keys = ["client-key"]\n` },
  );
  port = Number(new URL(router.url).port);
});
afterAll(async () => {
  keyed.stop();
  open.stop();
  await killAll();
});

function clientRequest(path: string, body: string, extra: string[] = []): string {
  return [
    `POST ${path} HTTP/1.1`,
    "Host: router.example:8080",
    "Connection: keep-alive, X-Client-Secret",
    "X-Client-Secret: client-internal",
    "Keep-Alive: timeout=300",
    "TE: trailers",
    "Trailer: X-Foo",
    "Proxy-Authorization: Basic cHJveHk6c2VjcmV0",
    "Proxy-Connection: keep-alive",
    "Upgrade: h2c",
    "Authorization: Bearer client-key",
    "X-Api-Key: client-key",
    "X-Forwarded-For: 203.0.113.7",
    "Via: 1.0 corporate-proxy",
    "X-Custom: kept",
    "Content-Type: application/json",
    ...extra,
    `Content-Length: ${Buffer.byteLength(body)}`,
    "",
    body,
  ].join("\r\n");
}

const names = (headers: [string, string][]) => headers.map(([k]) => k);
const value = (headers: [string, string][], name: string) => headers.filter(([k]) => k === name).map(([, v]) => v);

describe("request headers a replica receives", () => {
  it("no hop-by-hop or Connection-named header, no client credential; the replica's key, Via and X-Forwarded-*; the body byte for byte", async () => {
    const body = `{"model":"keyed-model",  "messages":[{"role":"user","content":"héllo"}]}`;
    const res = await rawExchange(port, clientRequest("/v1/chat/completions", body, ["Expect: 100-continue"]));
    expect(res.status).toBe(200);
    const seen = keyed.requests.find((r) => r.method === "POST")!;
    for (const name of [...HOP_BY_HOP.filter((h) => h !== "connection"), "x-client-secret", "x-api-key"]) expect(names(seen.headers)).not.toContain(name);
    // Bun's own client opens a keep-alive connection; the client's Connection tokens are gone.
    expect(value(seen.headers, "connection")).toEqual(["keep-alive"]);
    expect(value(seen.headers, "authorization")).toEqual(["Bearer replica-key"]);
    expect(value(seen.headers, "via")).toEqual(["1.0 corporate-proxy, 1.1 llmroute"]);
    expect(value(seen.headers, "x-forwarded-for")).toEqual(["203.0.113.7, 127.0.0.1"]);
    expect(value(seen.headers, "x-forwarded-proto")).toEqual(["http"]);
    expect(value(seen.headers, "x-forwarded-host")).toEqual(["router.example:8080"]);
    expect(value(seen.headers, "x-custom")).toEqual(["kept"]);
    expect(value(seen.headers, "host")).toEqual([new URL(keyed.url).host]);
    expect(Buffer.from(seen.body).toString()).toBe(body);
  });

  it("on /v1/messages the replica's key also goes as x-api-key, never the client's", async () => {
    const body = `{"model":"keyed-model","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`;
    await rawExchange(port, clientRequest("/v1/messages", body));
    const seen = keyed.requests.filter((r) => r.path === "/v1/messages").at(-1)!;
    expect(value(seen.headers, "x-api-key")).toEqual(["replica-key"]);
    expect(value(seen.headers, "authorization")).toEqual(["Bearer replica-key"]);
  });

  it("a replica without a key of its own gets no credential at all", async () => {
    const body = `{"model":"open-model","messages":[{"role":"user","content":"x"}]}`;
    await rawExchange(port, clientRequest("/v1/chat/completions", body));
    const seen = open.requests.find((r) => r.method === "POST")!;
    expect(names(seen.headers)).not.toContain("authorization");
    expect(names(seen.headers)).not.toContain("x-api-key");
  });
});

describe("response headers the client receives", () => {
  it("no hop-by-hop or Connection-named header from the engine; its other headers, and Via appended", async () => {
    const body = `{"model":"keyed-model","messages":[{"role":"user","content":"x"}]}`;
    const res = await rawExchange(port, clientRequest("/v1/chat/completions", body));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({ object: "chat.completion" });
    for (const name of ["x-upstream-secret", "proxy-authenticate", "trailer", "upgrade"]) expect(names(res.headers)).not.toContain(name);
    expect(value(res.headers, "keep-alive")).not.toContain("timeout=5");
    expect(value(res.headers, "via")).toEqual(["1.1 engine-gateway, 1.1 llmroute"]);
    expect(value(res.headers, "x-engine-header")).toEqual(["kept"]);
    expect(value(res.headers, "x-llmroute-replica")).toEqual(["keyed"]);
  });
});
