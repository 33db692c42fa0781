/**
 * The replica as a fetch handler, in-process, on a manual clock: behaviour that depends on
 * time passing (start-up delay, stalls) without waiting for it.
 */
import { describe, expect, it } from "bun:test";
import { createSimApp } from "../../src/sim/app.ts";
import { ManualClock } from "../../src/sim/clock.ts";

const quiet = { log: () => {} };
const get = (path: string) => new Request(`http://sim${path}`);
const post = (path: string, body: unknown) => new Request(`http://sim${path}`, { method: "POST", body: JSON.stringify(body) });

describe("createSimApp (in-process)", () => {
  it("answers 503 loading during the start-up delay, then 200", async () => {
    const clock = new ManualClock();
    const app = createSimApp({ profile: "tiny", startupDelayMs: 5_000 }, { clock, ...quiet });
    expect((await app.fetch(get("/health"))).status).toBe(503);
    expect((await app.fetch(post("/v1/completions", { prompt: "x" }))).status).toBe(503);
    expect(app.state()).toMatchObject({ ready: false, faulted_total: 1 });
    clock.advance(4_999);
    expect((await app.fetch(get("/health"))).status).toBe(503);
    clock.advance(1);
    const health = await app.fetch(get("/health"));
    expect(health.status).toBe(200);
    expect(await health.text()).toBe(""); // vLLM's /health has no body
    expect(app.state().ready).toBe(true);
    app.close();
  });

  it("stalls the first byte by stall_ms on the injected clock", async () => {
    const clock = new ManualClock();
    const app = createSimApp({ profile: "tiny", stallMs: 1_000, stallNext: 1 }, { clock, ...quiet });
    let settled = false;
    const pending = app.fetch(post("/v1/completions", { prompt: "abcd", max_tokens: 1 })).then((r) => {
      settled = true;
      return r;
    });
    // Let the handler read the body and arm its stall timer.
    while (clock.pendingTimers === 0) await Promise.resolve();
    clock.advance(999);
    await Promise.resolve();
    expect(settled).toBe(false);
    clock.advance(1);
    // The stall is over; the engine's own timers now run the (tiny) generation.
    while (!settled) {
      clock.runUntilIdle();
      await Promise.resolve();
    }
    const res = await pending;
    expect(res.status).toBe(200);
    expect(app.faults.snapshot().stall_next).toBe(0);
    app.close();
  });

  it("answers unknown routes as vLLM's FastAPI does and bad bodies in each API's error JSON", async () => {
    const app = createSimApp({ profile: "tiny" }, quiet);
    const res = await app.fetch(get("/nope"));
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ detail: "Not Found" }); // FastAPI's, as vLLM answers
    const bad = await app.fetch(post("/v1/messages", { messages: [] }));
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    app.close();
  });
});
