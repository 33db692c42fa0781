/**
 * Upstream deadlines, with real sockets: a replica whose host vanished (its port drops
 * SYNs) is abandoned after routing.connect_timeout, one that accepts and never answers
 * after routing.first_byte_timeout — both before the first byte, so the request fails
 * over — and a stream that goes silent ends after routing.stream_idle_timeout with the
 * API's error event. Each is counted in /metrics.
 *
 * Router and sims run in this process (the deadlines are the router's, not a process's).
 * Every deadline is 2 s: the replica that must fail never answers at all, and the one that
 * must succeed has to answer within it on a loaded machine too.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { blackhole } from "../helpers/blackhole.ts";
import { logRecords, startRouterInProcess, startSimInProcess, until, type Router } from "../helpers/fleet.ts";
import { readStream } from "../helpers/conversation.ts";
import { killAll } from "../helpers/proc.ts";

// Each test starts its own fleet and they run concurrently (mostly waiting on deadlines),
// so everything is stopped once, at the end.
afterAll(killAll);

const ask = (content: string, extra: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming> = {}) => ({
  model: "sim-model",
  messages: [{ role: "user" as const, content: `${content} ${crypto.randomUUID()}` }],
  max_tokens: 2,
  ...extra,
});

async function timeouts(router: Router): Promise<Record<string, number>> {
  const samples = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text()).get("llmroute_timeouts_total") ?? [];
  return Object.fromEntries(samples.filter((s) => s.value > 0).map((s) => [`${s.labels.replica}/${s.labels.kind}`, s.value]));
}

describe.concurrent("before the first byte: the deadline fails the request over", () => {
  it("connect_timeout: a replica whose host vanished (SYNs dropped) is given up after 2 s; the request is served elsewhere", async () => {
    // "hole" is up at start, then its port starts dropping connection attempts
    const live = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => Response.json({ status: "ok" }) });
    const port = live.port!;
    const gpu1 = await startSimInProcess("gpu1");
    const router = await startRouterInProcess([{ name: "hole", url: `http://127.0.0.1:${port}`, extra: `models = ["sim-model"]\n` }, gpu1], {
      toml: `[routing]\nconnect_timeout = "2s"\n`,
    });
    await live.stop(true);
    const hole = await blackhole(port);
    try {
      const { response } = await router.client().chat.completions.create(ask("through a vanished host")).withResponse();
      expect([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]).toEqual([200, "gpu1", "spread,failover"]);
      expect(logRecords(router, "failover")[0]).toMatchObject({ replica: "hole", reason: "no TCP connection within 2s (routing.connect_timeout)" });
      expect(await timeouts(router)).toEqual({ "hole/connect": 1 });
    } finally {
      hole.close();
    }
  });

  it("first_byte_timeout: an engine that accepts and never answers (its /health still passes) is given up; it sees the cancel", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: `[routing]\nfirst_byte_timeout = "2s"\n` });
    await gpu0.faults({ stall_ms: 600_000, stall_next: 2 });
    const client = router.client();
    for (const stream of [false, true]) {
      const { response } = await client.chat.completions.create({ ...ask("stalled"), stream } as OpenAI.ChatCompletionCreateParamsNonStreaming).withResponse();
      // the counter's next pick is gpu0 each time (the failover took the one after)
      expect([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]).toEqual([200, "gpu1", "spread,failover"]);
    }
    expect(logRecords(router, "failover").map((r) => r.reason)).toEqual([
      "no first byte within 2s (routing.first_byte_timeout)",
      "no first byte within 2s (routing.first_byte_timeout)",
    ]);
    expect(await timeouts(router)).toEqual({ "gpu0/first_byte": 2 });
    // two timeouts are below health.failures (3): still up
    const s = (await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string; consecutive_failures: number }[] };
    expect(s.replicas.find((r) => r.name === "gpu0")).toMatchObject({ state: "up", consecutive_failures: 2 });
    expect((await gpu0.state()).completed_total).toBe(0);
  });

  it("every replica timed out → 504 in the API's error JSON, logged as timeout", async () => {
    const gpu0 = await startSimInProcess("gpu0", { stallMs: 600_000 });
    const router = await startRouterInProcess([gpu0], { toml: `[routing]\nfirst_byte_timeout = "2s"\n` });
    const error = await router.client().chat.completions.create(ask("nobody answers")).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(504);
    expect(error.error).toMatchObject({ type: "server_error", code: 504 });
    expect(error.error.message).toContain("gpu0: no first byte within 2s");
    expect(await until(() => logRecords(router, "request")[0], "the log line")).toMatchObject({ status: 504, outcome: "timeout" });
  });
});

describe.concurrent("after the first byte: a silent stream ends with the API's error event", () => {
  it("stream_idle_timeout: tokens stop coming for 2 s → the client's stream errors, the engine is told to stop, counted", async () => {
    // one token a minute: the first arrives right after prefill, the second never in time
    const gpu0 = await startSimInProcess("gpu0", { decodeTps: 1 / 60 });
    const router = await startRouterInProcess([gpu0], { toml: `[routing]\nstream_idle_timeout = "2s"\n` });
    const stream = await router.client().chat.completions.create({ ...ask("slow"), max_tokens: 10, stream: true });
    const { received, error } = await readStream(stream);
    expect(received.length).toBeGreaterThanOrEqual(1);
    expect(received.length).toBeLessThan(10);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.message).toContain("replica gpu0 failed mid-stream: no data for 2s (routing.stream_idle_timeout)");
    expect(await until(() => logRecords(router, "request")[0], "the log line")).toMatchObject({ status: 200, outcome: "timeout" });
    expect(await timeouts(router)).toEqual({ "gpu0/stream_idle": 1 });
    await until(async () => (await gpu0.state()).running === 0, "the engine to stop the sequence");
  });
});
