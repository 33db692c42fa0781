/**
 * A llama.cpp card whose unified KV turned requests away as full ("Context size has been
 * exceeded."): for a capacity window the router holds requests there while the prompts in
 * flight would reach 90 % of what it failed at. How long such a wait may last: a request alone
 * goes at once, a wait ends when the wall lapses, and no wait outlasts the first-byte deadline.
 * A real router and one llama.cpp sim on loopback ports, in this process.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { logRecords, startRouterInProcess, startSimInProcess, until, type LocalRouter, type LocalSim } from "../helpers/fleet.ts";
import { readStream } from "../helpers/conversation.ts";
import { killAll } from "../helpers/proc.ts";

afterEach(killAll);
afterAll(killAll);

type Status = { replicas: { name: string; inflight: number; chars_per_token: number; kv_wall: { tokens: number; until: string } | null; engine?: { family?: string } }[] };

/**
 * One llama-server at its default (4 slots sharing one KV) of 16,384 tokens, prefilling 8,000
 * tokens a second and answering one token a second, behind a router with `toml`.
 */
async function card(toml: string): Promise<{ sim: LocalSim; router: LocalRouter; status: () => Promise<Status["replicas"][number]> }> {
  const sim = await startSimInProcess("gpu0", { engine: "llamacpp", kvTokens: 16_384, prefillTps: 8_000, decodeTps: 1 });
  const router = await startRouterInProcess([sim], { toml: `[routing]\n${toml}\n` });
  const status = async () => ((await (await fetch(`${router.url}/status`)).json()) as Status).replicas[0]!;
  await until(async () => ((await status()).engine?.family === "llamacpp" ? true : undefined), "the router's discovery of the llama.cpp engine");
  return { sim, router, status };
}

/** A prompt of about `tokens` engine tokens (the sim counts 4 characters a token), unique. */
const text = (tokens: number) => `${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(Math.round((tokens * 4) / 27))}`;

function ask(router: LocalRouter, content: string, maxTokens = 1, stream = false) {
  return router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content }], max_tokens: maxTokens, stream }).withResponse();
}

/** Three ~6,500-token prompts at once overflow the card: its wall stands, and they are served by turns. */
async function setWall(router: LocalRouter, status: () => Promise<Status["replicas"][number]>) {
  const answers = await Promise.all([0, 1, 2].map(() => ask(router, text(6_500))));
  expect(answers.map((a) => a.response.status)).toEqual([200, 200, 200]);
  expect(logRecords(router, "failover").length).toBeGreaterThan(0);
  const gpu0 = await status();
  expect(gpu0.kv_wall).not.toBeNull();
  expect(gpu0.inflight).toBe(0);
  return gpu0;
}

describe("a request waiting at a card's KV wall", () => {
  it("a request alone goes at once, however large (the wall is never a reason to wait with nothing in flight)", async () => {
    const { sim, router, status } = await card('capacity_window = "10m"');
    const { kv_wall, chars_per_token } = await setWall(router, status);
    // 95 % of the wall, in the router's own count of tokens: beside anything, it would wait.
    const alone = ask(router, "x".repeat(Math.round(0.95 * kv_wall!.tokens * chars_per_token)));
    let answered: number | undefined;
    void alone.then((a) => (answered = a.response.status));
    expect(await until(() => answered, "the request alone to be answered")).toBe(200);
    expect((await sim.state()).requests_total).toBeGreaterThan(3);
  });

  it("a waiting request goes when the wall lapses, though the request it waited for still runs", async () => {
    const { sim, router, status } = await card('capacity_window = "20s"');
    const { kv_wall, chars_per_token } = await setWall(router, status);
    const chars = (share: number) => "x".repeat(Math.round(share * kv_wall!.tokens * chars_per_token));
    // A: held at the engine before its first byte, in flight at the router all along.
    await sim.faults({ stall_ms: 600_000, stall_next: 1 });
    const a = ask(router, chars(0.5)).catch((error: unknown) => error);
    await until(async () => ((await (await fetch(`${sim.url}/sim/faults`)).json()) as { stall_next: number }).stall_next === 0, "A to stall at the engine");
    // B beside A would reach the wall: it waits, with the wall still standing when it comes.
    expect(Date.parse((await status()).kv_wall!.until)).toBeGreaterThan(Date.now());
    const b = await ask(router, chars(0.45));
    expect(b.response.status).toBe(200);
    // B was answered while A still waits at the engine: the wall's end, not A's, let it go.
    expect((await status()).inflight).toBe(1);
    await sim.faults({ stall_ms: 0 });
    expect(await a).toMatchObject({ response: { status: 200 } });
  });

  it("no wait outlasts routing.first_byte_timeout: the card is given up like one that sent no first byte (504 with one card), not counted against its health", async () => {
    const { router, status } = await card('capacity_window = "10m"\nfirst_byte_timeout = "10s"');
    const { kv_wall, chars_per_token } = await setWall(router, status);
    const chars = (share: number) => "x".repeat(Math.round(share * kv_wall!.tokens * chars_per_token));
    // A streams its first token, then one a second for ten minutes.
    const a = await router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: chars(0.5) }], max_tokens: 600, stream: true });
    const reading = (async () => {
      for await (const _ of a);
    })().catch(() => {});
    await until(async () => ((await status()).inflight === 1 ? true : undefined), "A in flight");
    const error = await ask(router, chars(0.45)).catch((e) => e);
    expect(error.status).toBe(504);
    expect(error.error.message).toMatch(/gpu0: waited \d+s at its KV wall \(~[\d,]+ prompt tokens in flight there\) without sending it: routing\.first_byte_timeout/);
    const record = logRecords(router, "request").at(-1)!;
    expect(record).toMatchObject({ status: 504, outcome: "timeout" });
    expect(logRecords(router, "replica down")).toHaveLength(0);
    expect((await status()).inflight).toBe(1); // A runs on
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metrics).toMatch(/llmroute_timeouts_total\{replica="gpu0",kind="first_byte"\} 1\b/);
    a.controller.abort();
    await reading;
  });
});

describe("what a unified KV's overflow purged", () => {
  it("a conversation whose slot sat idle, unsaved, when the pool overflowed is forgotten there: its next turn is not pinned to a cache that is gone", async () => {
    // 4 slots sharing 4,096 tokens; answers at 200 tokens a second.
    const sim = await startSimInProcess("gpu0", { engine: "llamacpp", kvTokens: 4_096, prefillTps: 8_000, decodeTps: 200 });
    const router = await startRouterInProcess([sim]);
    const status = async () => ((await (await fetch(`${router.url}/status`)).json()) as Status).replicas[0]!;
    await until(async () => ((await status()).engine?.family === "llamacpp" ? true : undefined), "the router's discovery of the llama.cpp engine");
    const x: { role: "user" | "assistant"; content: string }[] = [{ role: "user", content: text(1_000) }];
    // Two long answers grow in the pool while X's short one ends beside them: no task starts
    // after it, so nothing saves X's idle slot to the RAM cache. Growing, they first purge that
    // slot (try_clear_idle_slots), then overflow: both end with the engine's error event.
    const long = () =>
      router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: text(1_000) }], max_tokens: 2_000, stream: true });
    const [a, b, first] = await Promise.all([long(), long(), router.client().chat.completions.create({ model: "sim-model", messages: x, max_tokens: 2 }).withResponse()]);
    for (const stream of [a, b]) expect((await readStream(stream)).error?.message).toContain("Context size has been exceeded.");
    await until(() => logRecords(router, "request").filter((r) => r.outcome === "upstream_error_in_stream").length === 2 || undefined, "both long answers ended by the overflow");
    x.push({ role: "assistant", content: first.data.choices[0]!.message.content ?? "" }, { role: "user", content: "second" });
    const second = await router.client().chat.completions.create({ model: "sim-model", messages: x, max_tokens: 2 }).withResponse();
    // The engine had lost it, and the router did not count on it.
    expect(Number(/cached=(\d+)/.exec(second.response.headers.get("x-sim-prefix") ?? "")?.[1])).toBe(0);
    expect(second.response.headers.get("x-llmroute-route")).toBe("spread");
  });
});
