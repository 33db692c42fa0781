/**
 * Upstream deadlines, with real sockets: a replica whose host vanished (its port drops
 * SYNs) is abandoned after routing.connect_timeout, one that accepts and never answers
 * after routing.first_byte_timeout — both before the first byte, so the request fails
 * over — and a stream that goes silent ends after routing.stream_idle_timeout with the
 * API's error event. Each is counted in /metrics.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import { blackhole } from "../helpers/blackhole.ts";
import { logRecords, startRouterProc, startSimProc, until, type RouterProc } from "../helpers/fleet.ts";
import { readStream } from "../helpers/conversation.ts";
import { killAll } from "../helpers/proc.ts";

// Each test starts its own processes and they run concurrently (mostly waiting on
// deadlines and health checks), so processes are killed once, at the end.
afterAll(killAll);

const ask = (content: string, extra: Partial<OpenAI.ChatCompletionCreateParamsNonStreaming> = {}) => ({
  model: "sim-model",
  messages: [{ role: "user" as const, content: `${content} ${crypto.randomUUID()}` }],
  max_tokens: 2,
  ...extra,
});

async function timeouts(router: RouterProc): Promise<Record<string, number>> {
  const samples = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text()).get("llmroute_timeouts_total") ?? [];
  return Object.fromEntries(samples.filter((s) => s.value > 0).map((s) => [`${s.labels.replica}/${s.labels.kind}`, s.value]));
}

describe.concurrent("before the first byte: the deadline fails the request over", () => {
  it("connect_timeout: a replica whose host vanished (SYNs dropped) is given up after 0.5 s; the request is served elsewhere", async () => {
    // "hole" is up at start, then its port starts dropping connection attempts
    const live = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => Response.json({ status: "ok" }) });
    const port = live.port!;
    const gpu1 = await startSimProc("gpu1");
    const router = await startRouterProc([{ name: "hole", url: `http://127.0.0.1:${port}`, extra: `models = ["sim-model"]\n` }, gpu1], {
      toml: `[routing]\nconnect_timeout = "500ms"\n`,
    });
    await live.stop(true);
    const hole = await blackhole(port);
    try {
      const { response } = await router.client().chat.completions.create(ask("through a vanished host")).withResponse();
      expect([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]).toEqual([200, "gpu1", "spread,failover"]);
      expect(logRecords(router, "failover")[0]).toMatchObject({ replica: "hole", reason: "no TCP connection within 500ms (routing.connect_timeout)" });
      expect(await timeouts(router)).toEqual({ "hole/connect": 1 });
    } finally {
      hole.close();
    }
  });

  it("first_byte_timeout: an engine that accepts and never answers (its /health still passes) is given up; it sees the cancel", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimProc("gpu0"), startSimProc("gpu1")]);
    const router = await startRouterProc([gpu0, gpu1], { toml: `[routing]\nfirst_byte_timeout = "500ms"\n` });
    await gpu0.faults({ stall_ms: 60_000, stall_next: 2 });
    const client = router.client();
    for (const stream of [false, true]) {
      const { response } = await client.chat.completions.create({ ...ask("stalled"), stream } as OpenAI.ChatCompletionCreateParamsNonStreaming).withResponse();
      // the counter's next pick is gpu0 each time (the failover took the one after)
      expect([response.status, response.headers.get("x-llmroute-replica"), response.headers.get("x-llmroute-route")]).toEqual([200, "gpu1", "spread,failover"]);
    }
    expect(logRecords(router, "failover").map((r) => r.reason)).toEqual([
      "no first byte within 500ms (routing.first_byte_timeout)",
      "no first byte within 500ms (routing.first_byte_timeout)",
    ]);
    expect(await timeouts(router)).toEqual({ "gpu0/first_byte": 2 });
    // two timeouts are below health.failures (3): still up
    const s = (await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string; consecutive_failures: number }[] };
    expect(s.replicas.find((r) => r.name === "gpu0")).toMatchObject({ state: "up", consecutive_failures: 2 });
    expect((await gpu0.state()).completed_total).toBe(0);
  });

  it("every replica timed out → 504 in the API's error JSON, logged as timeout", async () => {
    const gpu0 = await startSimProc("gpu0", ["--stall-ms", "60000"]);
    const router = await startRouterProc([gpu0], { toml: `[routing]\nfirst_byte_timeout = "500ms"\n` });
    const error = await router.client().chat.completions.create(ask("nobody answers")).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(504);
    expect(error.error).toMatchObject({ type: "GatewayTimeoutError", code: 504 });
    expect(error.error.message).toContain("gpu0: no first byte within 500ms");
    expect(await until(() => logRecords(router, "request")[0], "the log line")).toMatchObject({ status: 504, outcome: "timeout" });
  });
});

describe.concurrent("after the first byte: a silent stream ends with the API's error event", () => {
  it("stream_idle_timeout: tokens stop coming for 0.5 s → the client's stream errors, the engine is told to stop, counted", async () => {
    // one token a second: the first arrives right after prefill, the second never in time
    const gpu0 = await startSimProc("gpu0", ["--decode-tps", "1"]);
    const router = await startRouterProc([gpu0], { toml: `[routing]\nstream_idle_timeout = "500ms"\n` });
    const stream = await router.client().chat.completions.create({ ...ask("slow"), max_tokens: 10, stream: true });
    const { received, error } = await readStream(stream);
    expect(received.length).toBeGreaterThanOrEqual(1);
    expect(received.length).toBeLessThan(10);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.message).toContain("replica gpu0 failed mid-stream: no data for 500ms (routing.stream_idle_timeout)");
    expect(await until(() => logRecords(router, "request")[0], "the log line")).toMatchObject({ status: 200, outcome: "timeout" });
    expect(await timeouts(router)).toEqual({ "gpu0/stream_idle": 1 });
    await until(async () => (await gpu0.state()).running === 0, "the engine to stop the sequence");
  });
});
