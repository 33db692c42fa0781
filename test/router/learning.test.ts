/**
 * What the router learns about a replica from its answers — characters per token (usage's
 * prompt_tokens against the characters it saw) and the prefill rate (time to the first
 * streamed byte) — is learnt only from answers that measure it. An in-process router in
 * front of an in-process sim (4 characters per token), driven by the official openai client.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parseConfig } from "../../src/config.ts";
import { memoryLog } from "../../src/log.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { startSim, type SimServer } from "../../src/sim/index.ts";

const SALT = crypto.randomUUID();
let sims: SimServer[] = [];
let routers: RouterServer[] = [];

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  await Promise.all(sims.map((s) => s.stop()));
});

/** One sim and a router in front of it. */
async function replica(kvTokens: number) {
  const sim = await startSim({ name: "gpu0", profile: "tiny", kvTokens });
  sims.push(sim);
  const config = parseConfig(
    `[server]\nlisten = "127.0.0.1:0"\n[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "${sim.url}"\nkv_tokens = ${kvTokens}\n`,
    "learning.toml",
    { env: {} },
  );
  const router = await startRouter(config, { log: memoryLog() });
  routers.push(router);
  const client = new OpenAI({ baseURL: `${router.url}/v1`, apiKey: "unused", maxRetries: 0 });
  const gpu0 = async () => ((await (await fetch(`${router.url}/status`)).json()) as StatusDocument).replicas[0]!;
  return { client, gpu0 };
}

const text = (label: string, chars: number) => `${SALT} ${label} `.padEnd(chars, "lorem ipsum ");

describe("characters per token", () => {
  let r: Awaited<ReturnType<typeof replica>>;
  beforeAll(async () => {
    r = await replica(65_536);
  });

  it("previous_response_id follow-ups (the engine counts the stored conversation, the router sees only the new input) leave the ratio alone", async () => {
    let previous = await r.client.responses.create({ model: "sim-model", input: text("a long first turn", 12_000), max_output_tokens: 2 });
    const calibrated = (await r.gpu0()).chars_per_token;
    // learnt from that first request: the sim's 4 characters per token, less template overhead
    expect(calibrated).toBeGreaterThan(3.5);
    expect(calibrated).toBeLessThanOrEqual(4);
    for (let i = 0; i < 12; i++) {
      previous = await r.client.responses.create({ model: "sim-model", input: text(`follow-up ${i}`, 400), previous_response_id: previous.id, max_output_tokens: 2 });
      // the engine did count the whole conversation
      expect(previous.usage!.input_tokens).toBeGreaterThan(3_000);
    }
    expect((await r.gpu0()).chars_per_token).toBe(calibrated);
  });
});

describe("the measured prefill rate", () => {
  let r: Awaited<ReturnType<typeof replica>>;
  beforeAll(async () => {
    r = await replica(4_096);
  });

  it("an error answer to a streamed request (400: a prompt over the context) is not a time to first token: the rate stays", async () => {
    const stream = async (content: string) => {
      const s = await r.client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content }], max_tokens: 2, stream: true });
      for await (const _ of s);
    };
    // Cold prefills of ~1,000 tokens measure it.
    for (let i = 0; i < 3; i++) await stream(text(`cold prefill ${i}`, 4_000));
    const measured = (await r.gpu0()).prefill.rate_tokens_per_s;
    expect(measured).toBeGreaterThan(0);
    // 10,000 tokens refused at once: taken as a prefill, it would read as a very fast card.
    const refused = await stream(text("far too long", 40_000)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refused as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("maximum context length is 4096 tokens");
    expect((await r.gpu0()).prefill.rate_tokens_per_s).toBe(measured);
  });
});
