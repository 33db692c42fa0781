/**
 * An engine that unloads its model loses its KV (Ollama: idle past keep_alive, or its memory
 * taken by another model). The fleet reads the models it holds at each passing check
 * (GET /api/ps) and forgets the replica's prefixes when one is gone, or when one came back
 * with a new expiry after the old one passed with nothing of this router's running there.
 * Scripted answers and an injected clock: what is tested is the reading, not the timing.
 * (The same with a real Ollama sim unloading: test/router/health.test.ts.)
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";
import { kvView } from "../../src/ops/telemetry.ts";

const T0 = Date.parse("2026-12-03T06:00:00Z");
const model = (expiresAt: number, context = 8192) => ({ name: "qwen3:latest", model: "qwen3:latest", size: 1, size_vram: 1, expires_at: new Date(expiresAt).toISOString(), context_length: context });

/** One Ollama replica behind a scripted fetch; `ps` is what /api/ps lists at the next look. */
function ollama(kvTokens = 0) {
  const log = memoryLog();
  const lost: string[] = [];
  let ps: unknown[] = [];
  let now = T0;
  const fetch = async (input: string | URL | Request) => {
    const path = new URL(String(input)).pathname;
    if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "qwen3:latest", object: "model", owned_by: "library" }] });
    if (path === "/api/version") return Response.json({ version: "0.12.3" });
    if (path === "/api/ps") return Response.json({ models: ps });
    return new Response("404 page not found", { status: 404 });
  };
  const config: ReplicaConfig = { name: "o", url: "http://127.0.0.1:1", kv_tokens: kvTokens, models: [], health_path: "/api/version" };
  const fleet = new Fleet([config], { log, fetch, now: () => now, healthPath: "/health", healthTimeoutMs: 100, failures: 3, onCacheLost: (_r, reason) => lost.push(reason) });
  const a = fleet.replicas[0]!;
  return {
    fleet,
    log,
    a,
    lost,
    /** Set what /api/ps lists and the time, then run one health check (a look). */
    look: async (at: number, listed: unknown[]) => {
      now = at;
      ps = listed;
      await fleet.check(a);
    },
  };
}

describe("an engine's loaded models (Ollama /api/ps)", () => {
  it("nothing loaded at start: no capacity; the first look with the model loaded gives its context as the replica's KV", async () => {
    const o = ollama();
    await o.look(T0, []);
    expect(o.a.facts).toMatchObject({ family: "ollama" });
    expect(o.a.facts!.capacity).toBeUndefined();
    await o.look(T0 + 1000, [model(T0 + 301_000)]);
    expect(o.a.facts!.capacity).toEqual({ kvTokens: 8192, blockTokens: 1, source: "/api/ps context_length" });
    expect(o.log.records.filter((r) => r.msg === "engine capacity learnt").map((r) => r.fields)).toEqual([{ replica: "o", kv_tokens: 8192, kv_from: "/api/ps context_length" }]);
    // A slot engine with a RAM prompt cache: its slots' KV is no bound on what it holds.
    expect(o.a.startingKvTokens()).toBeUndefined();
    expect(o.lost).toEqual([]);
  });

  it("a kv_tokens above that context is no contradiction: one request's context, and the RAM prompt cache holds more", async () => {
    const o = ollama(122_636);
    await o.look(T0, [model(T0 + 300_000, 4096)]);
    expect(kvView(o.a, {})).toMatchObject({ configured: 122_636, published: { tokens: 4096, from: "/api/ps context_length" } });
    expect(kvView(o.a, {}).contradiction).toBeUndefined();
    expect(o.a.startingKvTokens()).toBe(122_636);
  });

  it("a model no longer listed was unloaded: its prefixes are forgotten once", async () => {
    const o = ollama();
    await o.look(T0, [model(T0 + 300_000)]);
    await o.look(T0 + 1000, [model(T0 + 300_000)]);
    expect(o.lost).toEqual([]);
    await o.look(T0 + 301_000, []);
    await o.look(T0 + 302_000, []);
    expect(o.lost).toEqual(["Ollama unloaded qwen3:latest: /api/ps lists it no more (idle past its keep_alive, or its memory went to another model), and its KV went with it"]);
    expect(o.a.cacheLosses).toBe(1);
    expect(o.log.records.filter((r) => r.msg === "replica cache lost: forgetting its prefixes")).toHaveLength(1);
  });

  it("unloaded and loaded again between two looks: the old expiry passed while nothing of this router's ran there", async () => {
    const o = ollama();
    await o.look(T0, [model(T0 + 300_000)]);
    // The router's next request went at T0 + 400 s, after the expiry: Ollama had unloaded by then.
    o.a.began(T0 + 400_000);
    await o.look(T0 + 401_000, [model(T0 + 700_000)]);
    expect(o.lost).toEqual(["Ollama unloaded and loaded again qwen3:latest: its keep_alive ran out at 2026-12-03T06:05:00.000Z with no request of this router running there (/api/ps)"]);
  });

  it("a new expiry is no unload when this router sent a request before the old one passed, or had one running at the last look", async () => {
    const sentBefore = ollama();
    await sentBefore.look(T0, [model(T0 + 300_000)]);
    sentBefore.a.began(T0 + 299_000);
    await sentBefore.look(T0 + 400_000, [model(T0 + 700_000)]);
    expect(sentBefore.lost).toEqual([]);

    const running = ollama();
    running.a.inflight = 1;
    await running.look(T0, [model(T0 + 300_000)]);
    running.a.inflight = 0;
    await running.look(T0 + 400_000, [model(T0 + 700_000)]);
    expect(running.lost).toEqual([]);

    // The same expiry at a later look: still loaded (its timer has not fired yet, or just did).
    const same = ollama();
    await same.look(T0, [model(T0 + 300_000)]);
    await same.look(T0 + 300_500, [model(T0 + 300_000)]);
    expect(same.lost).toEqual([]);
  });

  it("an /api/ps that does not answer changes nothing", async () => {
    const o = ollama();
    await o.look(T0, [model(T0 + 300_000)]);
    await o.look(T0 + 1000, "not a list" as unknown as unknown[]);
    expect(o.lost).toEqual([]);
    await o.look(T0 + 2000, [model(T0 + 300_000)]);
    expect(o.lost).toEqual([]);
  });
});
