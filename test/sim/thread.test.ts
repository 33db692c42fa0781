/**
 * A sim on its own thread (the bench's --sim-threads): it answers on loopback as an in-process
 * sim does, says what it was started as, stops cleanly, and a start that fails says why.
 */
import { afterEach, describe, expect, it } from "bun:test";
import { startSimThread, type SimHandle } from "../../src/sim/thread.ts";
import { startSim } from "../../src/sim/server.ts";

const handles: SimHandle[] = [];
afterEach(async () => {
  await Promise.all(handles.splice(0).map((h) => h.stop()));
});

describe("startSimThread", () => {
  it("serves a chat completion with its cached tokens, as the profile it was started as", async () => {
    const sim = await startSimThread({ name: "gpu7", profile: "h100-8b", engine: "vllm-details", timeScale: 0.01 });
    handles.push(sim);
    expect(sim.name).toBe("gpu7");
    expect(sim.family).toBe("vllm");
    expect(sim.options.kvTokens).toBe(467_280);
    const ask = async () => {
      const res = await fetch(`${sim.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: sim.options.model, max_tokens: 2, messages: [{ role: "user", content: "a shared document ".repeat(200) }] }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { usage: { prompt_tokens_details?: { cached_tokens: number } } };
    };
    expect((await ask()).usage.prompt_tokens_details?.cached_tokens).toBe(0);
    expect((await ask()).usage.prompt_tokens_details?.cached_tokens).toBeGreaterThan(0);
  });

  it("stops: its port no longer answers, and a second stop is the same stop", async () => {
    const sim = await startSimThread({ timeScale: 0.01 });
    const stopped = sim.stop();
    expect(sim.stop()).toBe(stopped);
    await stopped;
    await expect(fetch(`${sim.url}/health`)).rejects.toThrow();
  });

  it("a start that fails says why", async () => {
    const taken = await startSim({ timeScale: 0.01 });
    try {
      await expect(startSimThread({ port: taken.port, timeScale: 0.01 })).rejects.toThrow(/cannot listen on 127\.0\.0\.1:\d+: address in use/);
    } finally {
      await taken.stop();
    }
  });
});
