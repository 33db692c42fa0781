/**
 * The proxy flow as table tests: `createProxy` called directly, with a fake `fetch` standing
 * for the replicas, fake clocks and a fake connect probe — no process, no port. Failover, the
 * deadlines before the first byte, the KV wall's wait bound, the usage rewrite and every
 * outcome, each in milliseconds. (The same flows with real sims and routers on loopback ports:
 * the other files of this folder.)
 */
import { describe, expect, it } from "bun:test";
import { parseConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";
import { createProxy, type RequestRecord } from "../../src/proxy/proxy.ts";
import type { Reach } from "../../src/proxy/reachability.ts";
import { createHasher } from "../../src/route/hash.ts";
import { PrefixIndex } from "../../src/route/prefix.ts";
import { createPolicy } from "../../src/route/policies/index.ts";
import { Router } from "../../src/route/router.ts";

type Upstream = (replica: string, init: RequestInit & { keepalive?: boolean }, call: number) => Promise<unknown>;

const error = (code: string) => Object.assign(new Error(code), { code });
const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
const sse = (...events: string[]) => new Response(events.map((e) => `data: ${e}\n\n`).join(""), { headers: { "content-type": "text/event-stream" } });
const answer = json({ id: "c1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 10, completion_tokens: 1 } });
/** An upstream that never answers: it fails only when its request is aborted (a deadline, the client, the drain). */
const silent = (init: RequestInit) => new Promise<Response>((_, reject) => init.signal!.addEventListener("abort", () => reject(Object.assign(new Error("aborted"), { name: "AbortError" }))));

/** A proxy over replicas a and b (both up), whose upstream is `upstream`; the monotonic clock moves 5 ms per upstream call. */
function proxyOver(upstream: Upstream, routing = "") {
  const config = parseConfig(
    `[routing]\npolicy = "roundrobin"\nfirst_byte_timeout = "30ms"\nconnect_timeout = "10s"\n${routing}\n[[replica]]\nname = "a"\nurl = "http://a.test"\n[[replica]]\nname = "b"\nurl = "http://b.test"\n`,
    "router.toml",
    { env: {} },
  );
  const log = memoryLog();
  let mono = 1_000;
  const wall = 1_700_000_000_000;
  const fleet = new Fleet(config.replicas, { log, healthPath: "/health", healthTimeoutMs: 100, failures: 3, wallClock: () => wall });
  for (const r of fleet.replicas) {
    r.state = "up";
    r.health.checked = true;
  }
  const hasher = createHasher();
  const router = new Router({ policy: createPolicy(config.routing.policy), index: new PrefixIndex({ maxEntries: 1000, ttlMs: 60_000, windowMs: 60_000 }), hasher, maxInflight: 0, cacheAware: config.routing.cache_aware });
  const calls: { replica: string; init: RequestInit & { keepalive?: boolean } }[] = [];
  const records: RequestRecord[] = [];
  const proxy = createProxy({
    config: () => config,
    fleet,
    router,
    hasher,
    log,
    monotonic: () => mono,
    wallClock: () => wall,
    reachability: { check: async (): Promise<Reach> => "ok" },
    fetch: async (input, init = {}) => {
      const replica = new URL(String(input)).hostname.split(".")[0]!;
      calls.push({ replica, init });
      mono += 5;
      return upstream(replica, init, calls.length) as Promise<Response>;
    },
    onRecord: (r) => records.push(r),
  });
  const open = (body: unknown, signal?: AbortSignal) =>
    proxy.forward(new Request("http://router/v1/chat/completions", { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" }, ...(signal ? { signal } : {}) }), new URL("http://router/v1/chat/completions"));
  /** The whole answer, as a client reads it (the record is made once the relay ends). */
  const send = async (body: unknown, signal?: AbortSignal) => {
    const res = await open(body, signal);
    return { status: res.status, headers: res.headers, text: await res.text() };
  };
  return { proxy, fleet, log, calls, records, send, open };
}

const chat = { model: "m", messages: [{ role: "user", content: "hello" }] };

describe("failover before the first byte", () => {
  it.each([
    ["a refused connection", () => Promise.reject(error("ECONNREFUSED")), "connection refused"],
    ["a 503", () => Promise.resolve(new Response("no", { status: 503 })), "HTTP 503"],
    ["a 502", () => Promise.resolve(new Response("no", { status: 502 })), "HTTP 502"],
    ["a reset on the fresh connection too", () => Promise.reject(error("ECONNRESET")), "connection reset"],
  ] as const)("%s at a: the request goes to b, once, and says so", async (_name, fail, reason) => {
    const f = proxyOver((replica) => (replica === "a" ? fail() : Promise.resolve(answer.clone())));
    const res = await f.send(chat);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-llmroute-replica")).toBe("b");
    expect(res.headers.get("x-llmroute-route")).toBe("spread,failover");
    expect(f.records).toMatchObject([{ outcome: "ok", replica: "b", failovers: 1, status: 200 }]);
    expect(f.log.records.filter((r) => r.msg === "failover").map((r) => r.fields.reason)).toEqual([reason]);
  });

  it("a reset before any byte is sent again once on a fresh connection to the same replica: no failover, no verdict", async () => {
    const f = proxyOver((_replica, _init, call) => (call === 1 ? Promise.reject(error("ECONNRESET")) : Promise.resolve(answer.clone())));
    const res = await f.send(chat);
    expect(res.status).toBe(200);
    expect(f.calls.map((c) => [c.replica, c.init.keepalive])).toEqual([
      ["a", undefined],
      ["a", false],
    ]);
    expect(f.records).toMatchObject([{ outcome: "ok", replica: "a", failovers: 0 }]);
    expect(f.fleet.byName("a")!.stats.errors).toBe(0);
  });

  it("the first-byte deadline: a silent replica is given up at routing.first_byte_timeout and the other answers", async () => {
    const f = proxyOver((replica, init) => (replica === "a" ? silent(init) : Promise.resolve(answer.clone())));
    const res = await f.send(chat);
    expect(res.headers.get("x-llmroute-replica")).toBe("b");
    expect(f.fleet.byName("a")!.stats.timeouts.first_byte).toBe(1);
    expect(f.log.records.find((r) => r.msg === "failover")!.fields.reason).toBe("no first byte within 30ms (routing.first_byte_timeout)");
  });

  it("every replica silent: 504, outcome timeout, with both reasons", async () => {
    const f = proxyOver((_replica, init) => silent(init));
    const res = await f.send(chat);
    expect(res.status).toBe(504);
    expect(res.headers.get("retry-after")).toBe("2");
    expect(f.records).toMatchObject([{ outcome: "timeout", status: 504, failovers: 2 }]);
    expect(f.records[0]!.error).toBe("no replica could serve the request (a: no first byte within 30ms (routing.first_byte_timeout); b: no first byte within 30ms (routing.first_byte_timeout))");
  });

  it("every replica refused: 503, outcome no_replica", async () => {
    const f = proxyOver(() => Promise.reject(error("ECONNREFUSED")));
    const res = await f.send(chat);
    expect(res.status).toBe(503);
    expect(f.records).toMatchObject([{ outcome: "no_replica", status: 503 }]);
  });
});

describe("the KV wall's wait bound", () => {
  it("a request that would pass a standing wall waits there at most routing.first_byte_timeout, unsent, then fails over without a verdict on health", async () => {
    const f = proxyOver(() => Promise.resolve(answer.clone()));
    const a = f.fleet.byName("a")!;
    // One request in flight at a, and a wall below it: the next must wait for it to end.
    expect(a.wall.admit(100, new AbortController().signal, () => 1_700_000_000_000)).toBe(true);
    a.wall.turnedAwayFull(100, 1_700_000_000_000, 60_000);
    const res = await f.send(chat);
    expect(res.headers.get("x-llmroute-replica")).toBe("b");
    expect(f.calls.map((c) => c.replica)).toEqual(["b"]);
    expect(f.log.records.find((r) => r.msg === "failover")!.fields.reason).toBe("waited 30ms at its KV wall (~100 prompt tokens in flight there) without sending it: routing.first_byte_timeout");
    expect([a.state, a.stats.errors, a.stats.timeouts.first_byte]).toEqual(["up", 0, 1]);
  });
});

describe("the usage rewrite", () => {
  it("a stream that did not ask for usage, to an engine that tells cached tokens only when asked: asked upstream, the usage chunk taken out for the client, its figures recorded", async () => {
    const f = proxyOver((_replica, init) => {
      const sent = JSON.parse(String(new TextDecoder().decode(init.body as Uint8Array)));
      expect(sent.stream_options).toEqual({ include_usage: true });
      return Promise.resolve(
        sse(
          JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "hi" }, finish_reason: null }] }),
          JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 8 } } }),
          "[DONE]",
        ),
      );
    });
    for (const r of f.fleet.replicas) r.facts = { family: "vllm", metrics: { state: "off" }, found: [], missing: [], cacheCounters: false, cachedTokensSeen: false };
    const { text } = await f.send({ ...chat, stream: true });
    expect(text).toContain('"content":"hi"');
    expect(text).not.toContain("usage");
    expect(text).toContain("data: [DONE]");
    expect(f.records).toMatchObject([{ outcome: "ok", promptTokens: 10, cachedTokens: 8, completionTokens: 1, stream: true, ttftMs: 5 }]);
  });
});

describe("outcomes", () => {
  it.each([
    ["ok", () => answer.clone(), 200],
    ["upstream_error", () => json({ error: { message: "boom" } }, 500), 500],
    ["upstream_rejected", () => json({ error: { message: "bad" } }, 400), 400],
  ] as const)("%s", async (outcome, reply, status) => {
    const f = proxyOver(() => Promise.resolve(reply()));
    const res = await f.send(chat);
    expect(res.status).toBe(status);
    expect(f.records).toMatchObject([{ outcome, status, replica: "a", totalMs: 5 }]);
  });

  it("upstream_error_in_stream: a 200 stream that ends with the engine's error event", async () => {
    const f = proxyOver(() => Promise.resolve(sse(JSON.stringify({ error: { message: "the engine failed", type: "server_error" } }))));
    const res = await f.send({ ...chat, stream: true });
    expect(res.status).toBe(200);
    expect(f.records).toMatchObject([{ outcome: "upstream_error_in_stream", error: "the engine ended the stream with an error event: the engine failed" }]);
  });

  it("client_cancelled: the client leaves mid-stream; the upstream request is aborted", async () => {
    let upstreamAborted = false;
    const f = proxyOver((_replica, init) => {
      init.signal!.addEventListener("abort", () => (upstreamAborted = true));
      const body = new ReadableStream<Uint8Array>({ start: (c) => c.enqueue(new TextEncoder().encode('data: {"choices":[]}\n\n')) });
      return Promise.resolve(new Response(body, { headers: { "content-type": "text/event-stream" } }));
    });
    const res = await f.open({ ...chat, stream: true });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    expect(f.records).toMatchObject([{ outcome: "client_cancelled", status: 200 }]);
    expect(upstreamAborted).toBe(true);
    expect(f.proxy.active).toBe(0);
  });

  it("client_cancelled before any answer: 499", async () => {
    const client = new AbortController();
    const f = proxyOver((_replica, init) => {
      queueMicrotask(() => client.abort());
      return silent(init);
    });
    const res = await f.send(chat, client.signal);
    expect(res.status).toBe(499);
    expect(f.records).toMatchObject([{ outcome: "client_cancelled", status: 499, replica: "a" }]);
  });

  it("drain_timeout: a request still waiting for its first byte when the drain cuts it gets 503", async () => {
    const f = proxyOver((_replica, init) => {
      queueMicrotask(() => f.proxy.cutAll());
      return silent(init);
    });
    const res = await f.send(chat);
    expect(res.status).toBe(503);
    expect(f.records).toMatchObject([{ outcome: "drain_timeout", status: 503 }]);
    expect(f.calls).toHaveLength(1);
  });

  it("rejected: a body that is not JSON is refused before routing, with the API's 400", async () => {
    const f = proxyOver(() => Promise.resolve(answer.clone()));
    const res = await f.proxy.forward(new Request("http://router/v1/chat/completions", { method: "POST", body: "{" }), new URL("http://router/v1/chat/completions"));
    expect(res.status).toBe(400);
    expect(f.records).toMatchObject([{ outcome: "rejected", status: 400, failovers: 0 }]);
    expect(f.calls).toHaveLength(0);
  });
});
