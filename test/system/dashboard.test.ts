/**
 * The live dashboard in a real browser (Debian's chromium via playwright-core) against a
 * real router in front of three sims, as an operator meets it: the page loads cleanly,
 * lists the fleet, follows traffic sent with the openai client, shows a killed replica as
 * down, and talks to no host but the router.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import axe from "axe-core";
import OpenAI from "openai";
import { startRouterProc, startSimProc, WATCHED_HEALTH, type RouterProc, type SimProc } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";
import { launchBrowser, watchedPage, type Browser, type WatchedPage } from "./_browser.ts";

// The callbacks given to waitForFunction/evaluate run inside the page; this side's
// typecheck has no DOM library.
declare const document: any;
declare const window: any;

const ROOT = new URL("../..", import.meta.url).pathname;
const SCREENSHOT = `${ROOT}docs/dashboard.png`;
const KV_TOKENS = 4096;

let browser: Browser;
let sims: SimProc[];
let router: RouterProc;
let tab: WatchedPage;

beforeAll(async () => {
  browser = await launchBrowser();
  sims = await Promise.all(["gpu0", "gpu1", "gpu2"].map((name) => startSimProc(name)));
  router = await startRouterProc(
    sims.map((s) => ({ ...s, extra: `kv_tokens = ${KV_TOKENS}\nmetrics = true\n` })),
    // Active checks every second: a replica that dies while idle is noticed without traffic.
    // The seed's plain rule places cold conversations by the counter alone, so the scene below
    // (a card pushed over its KV) is the same on every run; the default would avoid it.
    { toml: `[routing]\npolicy = "hybrid-plain"\n${WATCHED_HEALTH}` },
  );
  tab = await watchedPage(browser, router.url);
});

afterAll(async () => {
  await browser?.close();
  await killAll();
});

const text = (selector: string) => tab.page.locator(selector).allTextContents();
const servedTotal = async () => {
  const cells = await tab.page.locator('#replicas dl div:has(dt:text-is("Served")) dd').allTextContents();
  return cells.reduce((sum, t) => sum + Number(t.replace(/\D/g, "")), 0);
};

/** A conversation that grows by one turn per call, streamed like an agent's. */
function conversation(client: OpenAI, system: string) {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: system },
    { role: "user", content: "Start the task." },
  ];
  return async (turn: number) => {
    // Agents ask for usage on streams; the router reads cached_tokens from it.
    const stream = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
    let reply = "";
    for await (const chunk of stream) reply += chunk.choices[0]?.delta?.content ?? "";
    messages.push({ role: "assistant", content: reply }, { role: "user", content: `tool output ${turn}: ${"result ".repeat(40)}` });
  };
}

describe("the dashboard in a browser", () => {
  it("loads with no console errors and lists every replica as up", async () => {
    await tab.page.goto(`${router.url}/dashboard`);
    await tab.page.waitForFunction(() => document.querySelectorAll("#replicas article").length === 3);
    expect(await text("#replicas h3")).toEqual(["gpu0", "gpu1", "gpu2"]);
    expect(await text("#replicas [data-health]")).toEqual(["up", "up", "up"]);
    expect(await text("#replicas [data-ws]")).toEqual(Array(3).fill(`0 / ${KV_TOKENS.toLocaleString("en-US")} KV tokens · 0%`));
    expect(await text("#last td")).toEqual(["No requests yet."]);
    expect(await tab.page.title()).toBe("llmroute · 3/3 healthy");
    expect(tab.errors).toEqual([]);
  });

  it("follows traffic: served counts, last requests, routes, hit rate, TTFT and the capacity wall", async () => {
    expect(await servedTotal()).toBe(0);
    const client = router.client();
    const salt = crypto.randomUUID();
    // Four conversations spread by the counter over three replicas: the fourth lands with the
    // first, and their ~2,300-token contexts together pass that card's 4,096-token budget.
    const convos = [0, 1, 2, 3].map((i) => conversation(client, `${salt} agent ${i}: ${"You are a careful coding agent. ".repeat(i % 3 === 0 ? 290 : 60)}`));
    for (let turn = 0; turn < 3; turn++) for (const next of convos) await next(turn);
    for (let i = 0; i < 3; i++) {
      await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${salt} one-shot ${i}` }], max_tokens: 4 });
    }
    const sent = 4 * 3 + 3;

    await tab.page.waitForFunction((n) => document.querySelectorAll("#last tr").length === n, sent);
    expect(await servedTotal()).toBe(sent);
    const routes = Object.fromEntries(
      await tab.page.locator("#routes tr").evaluateAll((rows) => rows.map((r) => [r.getAttribute("data-route"), Number(r.children[1]!.textContent!.replace(/\D/g, ""))])),
    );
    expect(routes).toEqual({ pin: 8, spread: 7 });
    const delivered = await tab.page.locator('[data-hit="delivered"] dd .v').textContent();
    expect(delivered).toMatch(/^[1-9]\d*%$/);
    const ttft = await tab.page.locator('#replicas dl div:has(dt:text-is("TTFT p50 / p90")) dd').allTextContents();
    for (const t of ttft) expect(t).toMatch(/^\d+ \/ \d+ ms$/);
    const first = (await text("#last tr:first-child td")).slice(1, 5);
    expect(first).toEqual(["chat", "sim-model", expect.stringMatching(/^gpu[0-2]$/), "spread"]);

    // The capacity readings refresh every 2 s on the router; wait for the shared card to cross the wall.
    const over = await tab.page.waitForFunction(() => document.querySelector("#replicas .note.warn")?.closest("article")?.getAttribute("data-replica"));
    const name = await over.jsonValue();
    expect(await tab.page.locator(`[data-replica="${name}"] .bar.over`).count()).toBe(1);
    expect(await tab.page.locator("#warnings").isVisible()).toBe(true);
    expect(await tab.page.locator("#warning-list li").first().textContent()).toStartWith(`${name}: working set ~`);
    expect(tab.errors).toEqual([]);
  });

  it("shows a killed replica as down within a few seconds (and takes the README's screenshot)", async () => {
    const gpu2 = sims[2]!;
    await gpu2.kill("SIGKILL");
    await tab.page.waitForFunction(() => document.querySelector('[data-replica="gpu2"] [data-health]')?.textContent === "down");
    expect(await tab.page.locator('[data-replica="gpu2"] .note.err').textContent()).toContain("connection refused");
    expect(await tab.page.title()).toBe("⚠ llmroute · 2/3 healthy");
    expect(await text("#replicas [data-health]")).toEqual(["up", "up", "down"]);
    // The README's picture: traffic, the capacity wall crossed, and a replica down.
    await tab.page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(tab.errors).toEqual([]);
  });

  it("fits a phone's width without sideways scrolling of the page", async () => {
    await tab.page.setViewportSize({ width: 390, height: 844 });
    await tab.page.waitForFunction(() => document.querySelectorAll("#replicas article").length === 3);
    const overflow = await tab.page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBe(0);
    await tab.page.setViewportSize({ width: 1280, height: 900 });
  });

  it("passes axe-core's WCAG 2.1 AA checks (contrast, names, structure) in light and dark, on a laptop and a phone", async () => {
    // CDP's evaluate is not subject to the page's CSP, which would refuse an injected script.
    await tab.page.evaluate(axe.source);
    const found: string[] = [];
    for (const viewport of [{ width: 1280, height: 900 }, { width: 390, height: 844 }]) {
      await tab.page.setViewportSize(viewport);
      for (const colorScheme of ["light", "dark"] as const) {
        await tab.page.emulateMedia({ colorScheme });
        const result = await tab.page.evaluate(() => (window.axe as typeof axe).run(document, { runOnly: ["wcag2a", "wcag2aa", "wcag21aa", "best-practice"] }));
        for (const v of result.violations) found.push(`${viewport.width}px ${colorScheme}: ${v.id} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`);
      }
    }
    await tab.page.setViewportSize({ width: 1280, height: 900 });
    await tab.page.emulateMedia({ colorScheme: "light" });
    expect(found).toEqual([]);
  });

  it("made no request to any host but the router", () => {
    const origin = new URL(router.url).origin;
    expect(tab.foreign).toEqual([]);
    const polls = tab.requests.filter((u) => u === `${origin}/dashboard/data`);
    expect(polls.length).toBeGreaterThan(1);
    expect(tab.requests.filter((u) => !u.startsWith(`${origin}/`))).toEqual([]);
  });
});

describe("a router with server.api_keys", () => {
  it("serves the page, asks for the key, keeps it out of the address and sends it as a header", async () => {
    const keyed = await startRouterProc([sims[0]!], { toml: `[server]\napi_keys = ["env:DASH_KEY"]\n`, env: { DASH_KEY: "dash-secret-7" } });
    const t = await watchedPage(browser, keyed.url);
    await t.page.goto(`${keyed.url}/dashboard`);
    await t.page.locator("#login").waitFor();
    expect(await t.page.locator("#board").isHidden()).toBe(true);

    await t.page.fill("#key", "wrong");
    await t.page.press("#key", "Enter");
    await t.page.locator("#login-error", { hasText: "rejected" }).waitFor();

    await t.page.fill("#key", "dash-secret-7");
    await t.page.click("#login button");
    await t.page.waitForFunction(() => document.querySelectorAll("#replicas article").length === 1);
    expect(await t.page.locator("#replicas h3").allTextContents()).toEqual(["gpu0"]);
    expect(t.page.url()).toBe(`${keyed.url}/dashboard`);
    const polled = await t.page.waitForRequest((r) => r.url().endsWith("/dashboard/data"));
    expect(await polled.headerValue("authorization")).toBe("Bearer dash-secret-7");
    // The browser logs each refused data request; nothing else may appear.
    expect(t.errors.filter((e) => !/status of 401/.test(e))).toEqual([]);
    expect(t.errors.length).toBe(2);
    expect(t.foreign).toEqual([]);
    await t.page.close();
  });
});
