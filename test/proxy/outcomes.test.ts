/**
 * How a finished request is counted (llmroute_requests_total's outcome, the request log
 * line, a replica's served count) when the engine itself answers with an error: a 4xx from the replica is not "ok". Real sim and router processes.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { parsePrometheus } from "../../src/engines/metrics.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterInProcess, startRouterProc, startSimInProcess, startSimProc, until } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterAll(killAll);

describe("an error answer from the replica", () => {
  it("a 404 from the engine (a model it does not serve) is passed on and counted upstream_rejected, not ok, and not as served", async () => {
    const gpu0 = await startSimProc("gpu0");
    // router.toml says gpu0 serves "ghost"; the engine does not.
    const router = await startRouterProc([{ ...gpu0, extra: `models = ["sim-model", "ghost"]\n` }]);
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "ghost", messages: [{ role: "user", content: "hi" }], max_tokens: 1 }),
    });
    expect([res.status, res.headers.get("x-llmroute-replica")]).toEqual([404, "gpu0"]);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("NotFoundError");

    const line = await until(() => logRecords(router, "request")[0], "the request's log line");
    expect(line).toMatchObject({ replica: "gpu0", status: 404, outcome: "upstream_rejected" });
    const counted = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text()).get("llmroute_requests_total") ?? [];
    expect(counted.map((s) => [s.labels.status, s.labels.outcome, s.value])).toEqual([["404", "upstream_rejected", 1]]);
    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    expect(status.replicas[0]).toMatchObject({ state: "up", served: 0 });
  }, 30_000);
});

describe("a stream the engine ends with its error event", () => {
  it.each([
    // llama.cpp: the error object as the last event, no [DONE] (server-context.cpp handle_completions_impl)
    ["llamacpp", "sim fault: error_after_chunks"],
    // vLLM: the error chunk, then data: [DONE] (chat_completion/serving.py chat_completion_stream_generator)
    ["vllm", "sim fault: error_after_chunks"],
  ] as const)("%s: the client gets the engine's bytes; the router counts it upstream_error_in_stream (status 200), not ok, and not as served", async (engine, message) => {
    const gpu0 = await startSimInProcess("gpu0", { engine, decodeTps: 200 });
    const router = await startRouterInProcess([gpu0]);
    await gpu0.faults({ error_after_chunks: 2 });
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: `error event ${engine}` }], max_tokens: 50, stream: true }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain(message);
    const line = await until(() => logRecords(router, "request")[0], "the request's log line");
    expect(line).toMatchObject({ replica: "gpu0", status: 200, outcome: "upstream_error_in_stream" });
    expect(line.error).toBe(`the engine ended the stream with an error event: ${message}`);
    const counted = parsePrometheus(await (await fetch(`${router.url}/metrics`)).text()).get("llmroute_requests_total") ?? [];
    expect(counted.map((c) => [c.labels.status, c.labels.outcome, c.value])).toEqual([["200", "upstream_error_in_stream", 1]]);
    const status = (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    expect(status.replicas[0]).toMatchObject({ state: "up", served: 0 });
  });
});
