/**
 * An engine that unloads its model loses its KV (Ollama: idle past keep_alive, or its memory
 * taken by another model). The fleet reads the models it holds at each passing check
 * (GET /api/ps) and forgets the replica's prefixes when one it sent requests for is gone, or
 * came back with a new expiry after the old one passed with nothing of this router's running
 * there. Scripted answers and an injected clock: what is tested is the reading, not the
 * timing. (The same with a real Ollama sim unloading: test/router/health.test.ts.)
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";
import { kvView } from "../../src/ops/telemetry.ts";

const T0 = Date.parse("2026-12-03T06:00:00Z");
const model = (expiresAt: number, context = 8192, name = "qwen3:latest") => ({ name, model: name, size: 1, size_vram: 1, expires_at: new Date(expiresAt).toISOString(), context_length: context });

/**
 * One Ollama replica behind a scripted fetch, up and recognised (a first look, with nothing
 * loaded, 20 min before T0); `look` sets what /api/ps lists and runs a health check.
 */
async function ollama(kvTokens = 0) {
  const log = memoryLog();
  const lost: string[] = [];
  let ps: unknown = [];
  let date: string | undefined;
  let now = T0;
  /** A /api/ps answer held back until released (an overlapping check's late answer), and a signal that it was asked. */
  let hold: { asked: () => void; until: Promise<void> } | undefined;
  const fetch = async (input: string | URL | Request) => {
    const path = new URL(String(input)).pathname;
    if (path === "/v1/models") return Response.json({ object: "list", data: [{ id: "qwen3:latest", object: "model", owned_by: "library" }] });
    if (path === "/api/version") return Response.json({ version: "0.12.3" });
    if (path === "/api/ps") {
      const body = { models: ps };
      const held = hold;
      hold = undefined;
      if (held) {
        held.asked();
        await held.until;
      }
      return Response.json(body, date ? { headers: { date } } : undefined);
    }
    return new Response("404 page not found", { status: 404 });
  };
  const config: ReplicaConfig = { name: "o", url: "http://127.0.0.1:1", kv_tokens: kvTokens, models: [], health_path: "/api/version" };
  const fleet = new Fleet([config], { log, fetch, wallClock: () => now, healthPath: "/health", healthTimeoutMs: 100, failures: 3, onCacheLost: (_r, reason) => lost.push(reason) });
  const a = fleet.replicas[0]!;
  now = T0 - 1_200_000;
  await fleet.watch.check(a);
  return {
    fleet,
    log,
    a,
    lost,
    look: async (at: number, listed: unknown, engineDate?: number) => {
      now = at;
      ps = listed;
      date = engineDate === undefined ? undefined : new Date(engineDate).toUTCString();
      await fleet.watch.check(a);
    },
    /** This router sends a chat request for `name` at `at`; true when the engine may cut it. */
    send: (at: number, tokens = 100, name = "qwen3") => {
      now = at;
      return fleet.watch.promptSent(a, { tokens, model: name, endpoint: "chat" });
    },
    /** Hold the next /api/ps answer: `asked` resolves once it was asked, `release` lets it go. */
    holdNext: () => {
      let release!: () => void;
      let asked!: () => void;
      const wasAsked = new Promise<void>((resolve) => (asked = resolve));
      hold = { asked, until: new Promise<void>((resolve) => (release = resolve)) };
      return { asked: wasAsked, release };
    },
  };
}

const UNLOADED = "Ollama unloaded qwen3:latest: /api/ps lists it no more (idle past its keep_alive, or its memory went to another model), and its KV went with it";

describe("an engine's loaded models (Ollama /api/ps)", () => {
  it("nothing loaded at start: no capacity; the first look with the model loaded gives its context as the replica's published KV, no bound on it", async () => {
    const o = await ollama();
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
    const o = await ollama(122_636);
    await o.look(T0, [model(T0 + 300_000, 4096)]);
    expect(kvView(o.a, {})).toMatchObject({ configured: 122_636, published: { tokens: 4096, from: "/api/ps context_length" } });
    expect(kvView(o.a, {}).contradiction).toBeUndefined();
    expect(o.a.startingKvTokens()).toBe(122_636);
  });

  it("a model this router sent requests for, no longer listed, was unloaded: its prefixes are forgotten once", async () => {
    const o = await ollama();
    await o.look(T0, [model(T0 + 300_000)]);
    o.send(T0 + 500);
    await o.look(T0 + 1000, [model(T0 + 301_000)]);
    expect(o.lost).toEqual([]);
    await o.look(T0 + 302_000, []);
    await o.look(T0 + 303_000, []);
    expect(o.lost).toEqual([UNLOADED]);
    expect(o.a.stats.cacheLosses).toBe(1);
    expect(o.log.records.filter((r) => r.msg === "replica cache lost: forgetting its prefixes")).toHaveLength(1);
  });

  it("another model unloading (an embedding model beside the chat one) loses nothing", async () => {
    const o = await ollama();
    await o.look(T0, [model(T0 + 300_000), model(T0 + 60_000, 512, "nomic-embed-text:latest")]);
    o.send(T0 + 500);
    await o.look(T0 + 61_000, [model(T0 + 300_000)]);
    expect(o.lost).toEqual([]);
  });

  it("unloaded and loaded again between two looks: the old expiry passed while nothing of this router's ran there", async () => {
    const o = await ollama();
    o.send(T0 - 10_000);
    await o.look(T0, [model(T0 + 300_000)]);
    // The router's next request went at T0 + 400 s, after the expiry: Ollama had unloaded by then.
    o.send(T0 + 400_000);
    await o.look(T0 + 401_000, [model(T0 + 700_000)]);
    expect(o.lost).toEqual(["Ollama unloaded and loaded again qwen3:latest: its keep_alive ran out at 2026-12-03T06:05:00.000Z with no request of this router running there (/api/ps)"]);
  });

  it("the expiry is read on this router's clock through the engine's Date header: an engine clock 30 s behind is no unload", async () => {
    const o = await ollama();
    o.send(T0 - 10_000);
    // The engine's clock says T0 - 30 s when the router's says T0: its expiry T0 + 270 s is the router's T0 + 300 s.
    await o.look(T0, [model(T0 + 270_000)], T0 - 30_000);
    o.send(T0 + 290_000);
    await o.look(T0 + 295_000, [model(T0 + 560_000)], T0 + 265_000);
    expect(o.lost).toEqual([]);
  });

  it("a new expiry is no unload when this router sent a request before the old one passed, had one running at the last look, or the old one had already passed then", async () => {
    const sentBefore = await ollama();
    sentBefore.send(T0 - 10_000);
    await sentBefore.look(T0, [model(T0 + 300_000)]);
    sentBefore.send(T0 + 299_000);
    await sentBefore.look(T0 + 400_000, [model(T0 + 700_000)]);
    expect(sentBefore.lost).toEqual([]);

    const running = await ollama();
    running.send(T0 - 10_000);
    running.a.inflight = 1;
    await running.look(T0, [model(T0 + 300_000)]);
    running.a.inflight = 0;
    await running.look(T0 + 400_000, [model(T0 + 700_000)]);
    expect(running.lost).toEqual([]);

    // Another client's request keeps a runner busy: its expiry stays the old one, already past.
    const stale = await ollama();
    stale.send(T0 - 400_000);
    await stale.look(T0, [model(T0 - 10_000)]);
    await stale.look(T0 + 60_000, [model(T0 + 360_000)]);
    expect(stale.lost).toEqual([]);

    // The same expiry at a later look: still loaded (its timer has not fired yet, or just did).
    const same = await ollama();
    same.send(T0 - 10_000);
    await same.look(T0, [model(T0 + 300_000)]);
    await same.look(T0 + 300_500, [model(T0 + 300_000)]);
    expect(same.lost).toEqual([]);
  });

  it("an answer older than the last one read is dropped (checks of one replica overlap): one unload is one loss", async () => {
    const o = await ollama();
    o.send(T0 - 10_000);
    await o.look(T0, [model(T0 + 300_000)]);
    // A check asks while the model is still listed; its answer comes late.
    const held = o.holdNext();
    const late = o.look(T0 + 1000, [model(T0 + 300_000)]);
    await held.asked;
    await o.look(T0 + 302_000, []);
    held.release();
    await late;
    await o.look(T0 + 303_000, []);
    expect(o.lost).toEqual([UNLOADED]);
  });

  it("an /api/ps that does not answer a list changes nothing", async () => {
    const o = await ollama();
    o.send(T0 - 10_000);
    await o.look(T0, [model(T0 + 300_000)]);
    await o.look(T0 + 1000, "not a list");
    expect(o.lost).toEqual([]);
    await o.look(T0 + 2000, [model(T0 + 300_000)]);
    expect(o.lost).toEqual([]);
  });

  it("an engine whose loaded models are not read keeps no send times and no model names (llama.cpp answers any name a client makes up)", () => {
    const fleet = new Fleet([{ name: "l", url: "http://127.0.0.1:1", kv_tokens: 0, models: [] }], { log: memoryLog(), healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
    const l = fleet.replicas[0]!;
    l.facts = { family: "llamacpp", metrics: { state: "off" }, found: [], missing: [], cacheCounters: false, cachedTokensSeen: false };
    for (let i = 0; i < 300; i++) expect(fleet.watch.promptSent(l, { tokens: 100_000, model: `made-up-${i}`, endpoint: "chat" })).toBe(false);
    expect([l.residency.dispatches, l.residency.dispatchTimes.length, l.residency.requestedModels.size]).toEqual([0, 0, 0]);
  });

  it("a prompt against its model's context: from 80 % the engine may cut it (not learnt from), beyond 105 % counted and said once", async () => {
    const o = await ollama();
    await o.look(T0, [model(T0 + 300_000, 8192), model(T0 + 300_000, 512, "nomic-embed-text:latest")]);
    expect(o.send(T0 + 1, 6000)).toBe(false);
    expect(o.send(T0 + 2, 7000)).toBe(true);
    expect(o.a.stats.overContext).toBe(0);
    expect(o.send(T0 + 3, 9000)).toBe(true);
    expect(o.send(T0 + 4, 9000)).toBe(true);
    expect(o.a.stats.overContext).toBe(2);
    // A model not loaded: its context is not known.
    expect(o.send(T0 + 5, 9000, "llama3")).toBe(false);
    expect(o.fleet.watch.promptSent(o.a, { tokens: 9000, model: "qwen3", endpoint: "embeddings" })).toBe(false);
    expect(o.log.records.filter((r) => r.level === "warn").map((r) => [r.msg, r.fields.model, r.fields.context_tokens])).toEqual([
      ["prompt longer than o's context: raise OLLAMA_CONTEXT_LENGTH, or the model's num_ctx", "qwen3", 8192],
    ]);
  });
});
