/**
 * /dashboard over HTTP, router and sims in this process: where it is served (API listener, admin
 * listener), how keys protect its data but not the static page, what the page may load,
 * and what its data says after traffic — never prompt text or keys. The page itself in a
 * browser is tested in test/system/dashboard.test.ts.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import type OpenAI from "openai";
import type { DashboardData } from "../../src/ops/dashboard/data.ts";
import type { RouteReason } from "../../src/route/policy.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { startRouterInProcess, startSimInProcess, until, WATCHED_HEALTH } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterEach(killAll);
afterAll(killAll);

describe("/dashboard", () => {
  it("is one self-contained page under 50 KB that may load nothing but its own data", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0]);
    const res = await fetch(`${router.url}/dashboard`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const html = await res.text();
    expect(new TextEncoder().encode(html).byteLength).toBeLessThanOrEqual(50 * 1024);
    // The only URL in the page is the SVG namespace, an identifier that is never fetched.
    expect(html.match(/https?:\/\/[^\s"'`)]+/g)).toEqual(["http://www.w3.org/2000/svg"]);
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)="(?!data:)/);
    const csp = res.headers.get("content-security-policy")!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(csp).not.toContain("unsafe");
    // "What the reasons mean" names every route reason a policy can give (a Record, so tsc
    // fails here when a reason is added and not listed).
    const reasons: Record<RouteReason, true> = { pin: true, room: true, wall: true, cache: true, session: true, spread: true, cost: true, spill: true, hash: true, load: true, random: true, sticky: true };
    const explained = [...html.matchAll(/<dt>([^<]+)<\/dt>/g)].flatMap((m) => m[1]!.split(/,\s*/));
    expect(Object.keys(reasons).filter((r) => !explained.includes(r))).toEqual([]);
    expect((await fetch(`${router.url}/dashboard/`)).status).toBe(200);
    expect((await fetch(`${router.url}/dashboard`, { method: "POST" })).status).toBe(404);
  });

  it("with server.api_keys the page is served but its data needs the key", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0], { toml: `[server]\napi_keys = ["env:DASH_KEY"]\n`, env: { DASH_KEY: "dash-secret-3" } });
    expect((await fetch(`${router.url}/dashboard`)).status).toBe(200);
    const refused = await fetch(`${router.url}/dashboard/data`);
    expect(refused.status).toBe(401);
    expect(await refused.json()).toMatchObject({ error: { type: "authentication_error" } });
    const ok = await fetch(`${router.url}/dashboard/data`, { headers: { authorization: "Bearer dash-secret-3" } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("cache-control")).toBe("no-store");
    expect(JSON.stringify(await ok.json())).not.toContain("dash-secret-3");
  });

  it("moves to the admin listener with server.admin_listen", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const router = await startRouterInProcess([gpu0], { toml: `[server]\nadmin_listen = "127.0.0.1:0"\n` });
    const [, admin] = await router.waitFor(/"admin":"(http:\/\/[^"]+)"/);
    expect((await fetch(`${router.url}/dashboard`)).status).toBe(404);
    expect((await fetch(`${router.url}/dashboard/data`)).status).toBe(404);
    expect((await fetch(`${admin}/dashboard`)).status).toBe(200);
    expect(((await (await fetch(`${admin}/dashboard/data`)).json()) as DashboardData).replicas.map((r) => r.name)).toEqual(["gpu0"]);
  });

  it("its data follows traffic: replicas, last requests, routes, hits, TTFT; no prompt text", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1].map((s) => ({ ...s, extra: "kv_tokens = 4096\n" })));
    const client = router.client();
    const secret = `SECRET-${crypto.randomUUID()}`;
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: `${secret} ${"context ".repeat(60)}` },
      { role: "user", content: "begin" },
    ];
    for (let turn = 0; turn < 2; turn++) {
      const stream = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2, stream: true, stream_options: { include_usage: true } });
      for await (const _ of stream);
      messages.push({ role: "assistant", content: "ok" }, { role: "user", content: `turn ${turn}` });
    }
    await fetch(`${router.url}/v1/chat/completions`, { method: "POST", body: "{not json" });

    const res = await fetch(`${router.url}/dashboard/data`);
    const text = await res.text();
    expect(text).not.toContain(secret);
    const d = JSON.parse(text) as DashboardData;
    expect(d).toMatchObject({ policy: "hybrid", healthy: 2 });
    expect(d.replicas.map((r) => [r.name, r.healthy, r.capacity_exceeded, r.kv_tokens])).toEqual([
      ["gpu0", true, false, 4096],
      ["gpu1", true, false, 4096],
    ]);
    const { last, routes, hits, ttft } = d.recent;
    expect(last.map((r) => [r.endpoint, r.route, r.status])).toEqual([
      ["chat", null, 400],
      ["chat", "pin", 200],
      ["chat", "spread", 200],
    ]);
    expect(last[1]!.cached_tokens).toBeGreaterThan(0);
    expect(last[1]!.ttft_ms).toBeGreaterThan(0);
    expect(routes).toEqual([
      { route: "pin", requests: 1 },
      { route: "rejected", requests: 1 },
      { route: "spread", requests: 1 },
    ]);
    expect(hits.delivered).toBeGreaterThan(0);
    expect(hits.prompt_tokens).toBe(last[1]!.prompt_tokens! + last[2]!.prompt_tokens!);
    expect(ttft.map((t) => [t.replica, t.n])).toEqual([[last[1]!.replica!, 2]]);
  });

  it("lists every warning of /status as a short line with its details apart, one for one and in the same order", async () => {
    // gpu0: prefix caching off, and a kv_tokens six times the KV its engine publishes; gpu1: killed.
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", { prefixCache: false }), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([{ ...gpu0, extra: "kv_tokens = 24576\n" }, gpu1], { toml: WATCHED_HEALTH });
    await gpu1.stop();
    const status = async () => (await (await fetch(`${router.url}/status`)).json()) as StatusDocument;
    // Down by an active check, which found nothing listening: its cache is declared lost.
    await until(async () => (await status()).replicas[1]!.state === "down", "gpu1 down");
    const client = router.client();
    const messages = [
      { role: "system" as const, content: `${crypto.randomUUID()} ${"shared instructions for every request ".repeat(60)}` },
      { role: "user" as const, content: "go" },
    ];
    for (let i = 0; i < 10; i++) await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 1 });

    const d = (await (await fetch(`${router.url}/dashboard/data`)).json()) as DashboardData;
    expect(d.findings).toEqual([
      {
        id: "gpu0/cache_off",
        replica: "gpu0",
        kind: "cache_off",
        line: "prefix cache may be off: no cached tokens on 9 requests expected cached",
        details: expect.stringContaining("Check with llmroute probe --replica gpu0"),
      },
      {
        id: "gpu0/kv_tokens",
        replica: "gpu0",
        kind: "kv_tokens",
        line: "kv_tokens 24,576 is more than the engine's own 4,096",
        details: "The engine publishes 4,096 tokens of KV (vllm:cache_config_info kv_cache_size_tokens); the router assumes 4,096. Set this replica's kv_tokens in router.toml at or below it and the warning goes.",
      },
      {
        id: "gpu1/health",
        replica: "gpu1",
        kind: "health",
        line: expect.stringMatching(/^down for \d+s: health check: connection refused$/),
        details: expect.stringContaining("It is back in routing at the first health check that passes (every 1 s). Nothing listened on its port, so its cache went with the process"),
      },
    ]);
    // The text form is unchanged for `llmroute status` and scripts: one warning per finding, same order.
    expect(d.warnings.map((w) => w.split(": ")[0])).toEqual(["gpu0", "gpu0", "gpu1"]);
    expect(d.warnings[0]).toStartWith("gpu0: reported no cached tokens on 9 requests the index expected cached: its prefix cache may be off");
    expect(d.warnings[1]).toBe("gpu0: kv_tokens 24,576 is more than the engine's own 4,096 (vllm:cache_config_info kv_cache_size_tokens); the router assumes 4,096");
    expect(d.warnings[2]).toBe(`gpu1: ${d.findings[2]!.line}`);
    // /status carries the same structure.
    const s = await status();
    expect(s.findings?.map((f) => f.id)).toEqual(["gpu0/cache_off", "gpu0/kv_tokens", "gpu1/health"]);
  }, 30_000);
});
