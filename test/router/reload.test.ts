/**
 * A reload is safe at any moment: a request keeps the replicas it started with, and a
 * replica the reload removed is neither committed to the index nor remembered. The router
 * runs in this process and reloads as `serve` does on SIGHUP (re-read the file, apply it):
 * the signal itself is tested in test/ops/lifecycle.test.ts.
 */
import { afterAll, describe, expect, it } from "bun:test";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, routerToml, startRouterInProcess, startSimInProcess, until, type LocalRouter, type ReplicaSpec, type Router } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { rawResponse, startRawReplica } from "../helpers/raw-http.ts";

// Each test starts its own fleet and they run concurrently, so everything is stopped
// once, at the end.
afterAll(killAll);

const status = async (router: Router) => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;

async function reload(router: LocalRouter, replicas: ReplicaSpec[]) {
  await Bun.write(router.configPath, routerToml(replicas));
  await router.reload();
}

const ask = (router: Router, content: string, extra: Record<string, unknown> = {}) =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content }, { role: "assistant", content: "ok" }, { role: "user", content: "go on" }], max_tokens: 2, ...extra }),
  });

describe("what a reload says", () => {
  it("the log line names every changed key in full (a deadline, a replica's URL) and what needs a restart apart", async () => {
    const [gpu0, gpu1, gpu2] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1"), startSimInProcess("gpu2")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await Bun.write(router.configPath, routerToml([gpu0, { name: "gpu1", url: gpu2.url }], `[server]\nlog_format = "human"\n[routing]\nfirst_byte_timeout = "2m"\n`));
    await router.reload();
    const reloaded = await until(() => logRecords(router, "config reloaded")[0], "the reload's log line");
    expect(reloaded.changed).toBe("routing.first_byte_timeout,replica[gpu1].url");
    expect(logRecords(router, "reload: these settings need a restart and keep their old values")[0]?.keys).toBe("server.log_format");
  });
});

describe.concurrent("reload during a request", () => {
  it("the failover target was removed by a reload meanwhile: the request is served by it (200, was a 500) and nothing is remembered", async () => {
    let release!: (response: string) => void;
    const held = startRawReplica((req) =>
      // /health answers; the request (a POST) is held; what discovery asks (/v1/models, /metrics …) is not there
      req.path === "/health" ? rawResponse("200 OK", [], "ok") : req.method !== "POST" ? rawResponse("404 Not Found", [], "") : new Promise<string>((resolve) => (release = resolve)),
    );
    try {
      const gpu1 = await startSimInProcess("gpu1");
      const heldReplica = { name: "held", url: held.url, extra: `models = ["sim-model"]\n` };
      const router = await startRouterInProcess([heldReplica, gpu1]);
      const pending = ask(router, "reload under me");
      await until(() => held.requests.some((r) => r.method === "POST"), "the request at the first replica");
      await reload(router, [heldReplica]);
      release(rawResponse("503 Service Unavailable", ["Content-Type: application/json"], `{"error":{"message":"busy","code":503}}`));
      const res = await pending;
      expect([res.status, res.headers.get("x-llmroute-replica"), res.headers.get("x-llmroute-route")]).toEqual([200, "gpu1", "spread,failover"]);
      const s = await status(router);
      expect(s.replicas.map((r) => r.name)).toEqual(["held"]);
      // nothing is remembered: "held" answered 503 (it computed nothing: its commit is taken
      // back) and gpu1 was removed
      expect(s.index.entries).toBe(0);
    } finally {
      held.stop();
    }
  });

  it("a failover after a reload picks from the new fleet: a replica added meanwhile, not the one removed", async () => {
    let release!: (response: string) => void;
    const held = startRawReplica((req) =>
      // /health answers; the request (a POST) is held; what discovery asks (/v1/models, /metrics …) is not there
      req.path === "/health" ? rawResponse("200 OK", [], "ok") : req.method !== "POST" ? rawResponse("404 Not Found", [], "") : new Promise<string>((resolve) => (release = resolve)),
    );
    try {
      const [gpu1, gpu2] = await Promise.all([startSimInProcess("gpu1"), startSimInProcess("gpu2")]);
      const heldReplica = { name: "held", url: held.url, extra: `models = ["sim-model"]\n` };
      const router = await startRouterInProcess([heldReplica, gpu1]);
      const pending = ask(router, "reload adds a replica under me");
      await until(() => held.requests.some((r) => r.method === "POST"), "the request at the first replica");
      await reload(router, [heldReplica, gpu2]);
      release(rawResponse("503 Service Unavailable", ["Content-Type: application/json"], `{"error":{"message":"busy","code":503}}`));
      const res = await pending;
      expect([res.status, res.headers.get("x-llmroute-replica"), res.headers.get("x-llmroute-route")]).toEqual([200, "gpu2", "spread,failover"]);
      expect((await gpu1.state()).requests_total).toBe(0);
    } finally {
      held.stop();
    }
  });

  it("a replica removed while it streams finishes the stream; it is not remembered afterwards", async () => {
    // 30 tokens at 20 a second: the stream runs for 1.5 s after the reload
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", { decodeTps: 20 }), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    const res = await ask(router, "stream while I go", { stream: true, max_tokens: 30 });
    expect(res.headers.get("x-llmroute-replica")).toBe("gpu0");
    const reader = res.body!.getReader();
    await reader.read();
    await reload(router, [gpu1]);
    let text = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    expect(text).toEndWith("data: [DONE]\n\n");
    expect(text).not.toContain('"error"');
    const s = await status(router);
    expect(s.replicas.map((r) => r.name)).toEqual(["gpu1"]);
    expect(s.index.entries).toBe(0);
    // and the next request is fine
    expect((await ask(router, "after")).status).toBe(200);
  });
});
