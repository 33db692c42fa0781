/**
 * A reload (SIGHUP) is safe at any moment: a request keeps the replicas it started with,
 * and a replica the reload removed is neither committed to the index nor remembered.
 */
import { afterAll, describe, expect, it } from "bun:test";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { routerToml, startRouterProc, startSimProc, until, type RouterProc } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { rawResponse, startRawReplica } from "../helpers/raw-http.ts";

// Each test starts its own processes and they run concurrently (mostly waiting on
// deadlines and health checks), so processes are killed once, at the end.
afterAll(killAll);

const status = async (router: RouterProc) => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;

async function reload(router: RouterProc, replicas: { name: string; url: string; extra?: string }[]) {
  const reloads = router.lines.filter((l) => l.includes("config reloaded")).length;
  await Bun.write(router.configPath, routerToml(replicas));
  router.proc.kill("SIGHUP");
  await until(() => router.lines.filter((l) => l.includes("config reloaded")).length > reloads, "the reload");
}

const ask = (router: RouterProc, content: string, extra: Record<string, unknown> = {}) =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content }, { role: "assistant", content: "ok" }, { role: "user", content: "go on" }], max_tokens: 2, ...extra }),
  });

describe.concurrent("reload during a request", () => {
  it("the failover target was removed by a reload meanwhile: the request is served by it (200, was a 500) and nothing is remembered", async () => {
    let release!: (response: string) => void;
    const held = startRawReplica((req) =>
      req.path === "/health" ? rawResponse("200 OK", [], "ok") : new Promise<string>((resolve) => (release = resolve)),
    );
    try {
      const gpu1 = await startSimProc("gpu1");
      const heldReplica = { name: "held", url: held.url, extra: `models = ["sim-model"]\n` };
      const router = await startRouterProc([heldReplica, gpu1]);
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
      req.path === "/health" ? rawResponse("200 OK", [], "ok") : new Promise<string>((resolve) => (release = resolve)),
    );
    try {
      const [gpu1, gpu2] = await Promise.all([startSimProc("gpu1"), startSimProc("gpu2")]);
      const heldReplica = { name: "held", url: held.url, extra: `models = ["sim-model"]\n` };
      const router = await startRouterProc([heldReplica, gpu1]);
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
    const [gpu0, gpu1] = await Promise.all([startSimProc("gpu0", ["--decode-tps", "50"]), startSimProc("gpu1")]);
    const router = await startRouterProc([gpu0, gpu1]);
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
