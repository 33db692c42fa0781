/**
 * The live dashboard in a real browser (Debian's chromium via playwright-core) against a
 * real router in front of three sims, as an operator meets it: the page loads cleanly,
 * lists the fleet, follows traffic sent with the openai client, shows a killed replica as
 * down, and talks to no host but the router. The warnings open their details on demand and
 * keep them open across refreshes; the chart's axes and the routes' bars are checked
 * against the figures the page shows and, in a second tab, against known data.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import axe from "axe-core";
import OpenAI from "openai";
import type { DashboardData } from "../../src/ops/dashboard/data.ts";
import { startRouterProc, startSimProc, until, WATCHED_HEALTH, type RouterProc, type SimProc } from "../helpers/fleet.ts";
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
/** A figure as the page prints it: "18,471", "2.5k", "1.2M". */
const figure = (t: string) => Number(t.replace(/,/g, "").replace(/k$/, "e3").replace(/M$/, "e6"));
/** Wait for the page's next refresh (its "updated" time changes). */
async function refreshed(page = tab.page) {
  const before = await page.locator("#conn").textContent();
  await page.waitForFunction((b) => document.querySelector("#conn")?.textContent !== b, before, { timeout: 10_000 });
}
/** What the chart shows: its axis labels, and per bar the figures of its tooltip and its drawn heights against the axis. */
async function chartOf(page = tab.page) {
  return page.evaluate(() => {
    const ticks = [...document.querySelectorAll("#chart .ytick")];
    const grid = [...document.querySelectorAll("#chart line.grid")].map((l: any) => Number(l.getAttribute("y1")));
    const axisPx = grid.length > 1 ? grid[0]! - grid[grid.length - 1]! : 0;
    return {
      y: ticks.map((t: any) => t.textContent as string),
      x: [...document.querySelectorAll("#chart .xtick")].map((t: any) => t.textContent as string),
      caption: document.querySelector("#chart-caption")!.textContent as string,
      bars: [...document.querySelectorAll("#chart g.bucket")].map((g: any) => {
        const [rest = 0, cached = 0] = [...g.querySelectorAll("rect")].map((r: any) => Number(r.getAttribute("height")));
        return { title: g.querySelector("title").textContent as string, height: (rest + cached) / axisPx, cached: cached / axisPx };
      }),
    };
  });
}
const servedTotal = async () => {
  const cells = await tab.page.locator('#replicas dl div:has(dt:text-is("Served")) dd').allTextContents();
  return cells.reduce((sum, t) => sum + Number(t.replace(/\D/g, "")), 0);
};

let convos: ((turn: number) => Promise<void>)[] = [];

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
    convos = [0, 1, 2, 3].map((i) => conversation(client, `${salt} agent ${i}: ${"You are a careful coding agent. ".repeat(i % 3 === 0 ? 290 : 60)}`));
    for (let turn = 0; turn < 3; turn++) for (const next of convos) await next(turn);
    for (let i = 0; i < 3; i++) {
      await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${salt} one-shot ${i}` }], max_tokens: 4 });
    }
    const sent = 4 * 3 + 3;

    await tab.page.waitForFunction((n) => document.querySelectorAll("#last tr").length === n, sent);
    expect(await servedTotal()).toBe(sent);
    // Each reason with its share and count beside its bar, in the order the reasons are explained.
    const routes = await tab.page.locator("#routes tr").evaluateAll((rows) => rows.map((r) => [r.querySelector("th")!.textContent, r.querySelector(".v")!.textContent, r.querySelector("td.n")!.textContent]));
    expect(routes).toEqual([
      ["pin", "53%", "8"],
      ["spread", "47%", "7"],
    ]);
    const delivered = await tab.page.locator('[data-hit="delivered"] dd .v').textContent();
    expect(delivered).toMatch(/^[1-9]\d*%$/);
    const ttft = await tab.page.locator('#replicas dl div:has(dt:text-is("TTFT p50 / p90")) dd').allTextContents();
    // "120 / 480 ms"; with a p90 of a second or more (a loaded box), "480 ms / 1.20 s".
    for (const t of ttft) expect(t).toMatch(/^(\d+ \/ \d+ ms|(\d+ ms|\d+\.\d+ s) \/ \d+\.\d+ s)$/);
    const first = (await text("#last tr:first-child td")).slice(1, 5);
    expect(first).toEqual(["chat", "sim-model", expect.stringMatching(/^gpu[0-2]$/), "spread"]);

    // The chart adds up to what the page says was sent: its bars' prompt tokens are those of
    // the last-requests table and of the hit line, and the y axis is scaled to the tallest bar.
    const tableTokens = (await text("#last tr td:nth-child(6)")).reduce((sum, t) => sum + figure(t), 0);
    expect(await tab.page.locator("#hit-tokens").textContent()).toContain(`of ${tableTokens.toLocaleString("en-US")} prompt tokens`);
    const chart = await chartOf();
    const barTokens = chart.bars.map((b) => figure(/: ([\d,]+) prompt tokens/.exec(b.title)![1]!));
    expect(barTokens.reduce((a, b) => a + b, 0)).toBe(tableTokens);
    const top = figure(chart.y.at(-1)!);
    const peak = Math.max(...barTokens);
    expect(chart.y[0]).toBe("0");
    expect(top).toBeGreaterThanOrEqual(peak);
    expect(top).toBeLessThan(1.5 * peak);
    for (const [i, b] of chart.bars.entries()) expect(b.height).toBeCloseTo(barTokens[i]! / top, 2);
    expect(chart.x).toEqual(["now", "−1 min", "−2 min", "−3 min", "−4 min", "−5 min"]);
    expect(chart.caption).toContain(`Last 5 min, in prompt tokens per 10 s (axis 0 to ${chart.y.at(-1)}): peak ${peak.toLocaleString("en-US")}`);

    // The capacity readings refresh every 2 s on the router; wait for the shared card to cross the wall.
    const over = await tab.page.waitForFunction(() => document.querySelector("#replicas .note.warn")?.closest("article")?.getAttribute("data-replica"));
    const name = await over.jsonValue();
    expect(await tab.page.locator(`[data-replica="${name}"] .bar.over`).count()).toBe(1);
    expect(await tab.page.locator("#warnings").isVisible()).toBe(true);
    // One short line per finding: whose, what kind, the finding; why and what helps under the
    // running policy open on demand, and stay open (the same node) across refreshes.
    const warning = tab.page.locator(`#warning-list li[data-key="${name}/capacity"]`);
    expect(await warning.locator(".tag").textContent()).toBe(`${name} · capacity`);
    expect(await warning.locator(".line").textContent()).toMatch(/^working set ~[\d,]+ tokens, \d+% of kv_tokens 4,096: the engine evicts and re-prefills; the fleet has room, so placement can help$/);
    expect(await warning.locator("summary").textContent()).not.toContain("the running policy");
    expect(await warning.locator(".detail").isVisible()).toBe(false);
    await warning.locator("summary").click();
    expect(await warning.locator(".detail").textContent()).toContain("The running policy, hybrid-plain, pins conversations and spreads new ones by a counter");
    await warning.locator("details").evaluate((el) => ((el as any).seen = "before the refresh"));
    await refreshed();
    expect(await warning.locator(".detail").isVisible()).toBe(true);
    expect(await warning.locator("details").evaluate((el) => (el as any).seen)).toBe("before the refresh");
    // The card says it too, with the same advice under "What helps" (closed again afterwards:
    // the warning's detail shows it in the README's picture).
    const advice = tab.page.locator(`[data-replica="${name}"] details.advice`);
    expect(await advice.locator("summary").textContent()).toBe("What helps");
    expect(await advice.locator("p").isVisible()).toBe(false);
    await advice.locator("summary").click();
    expect(await advice.locator("p").textContent()).toContain("The running policy, hybrid-plain, ");
    await refreshed();
    expect(await tab.page.locator(`[data-replica="${name}"] details.advice p`).isVisible()).toBe(true);
    await advice.locator("summary").click();
    expect(tab.errors).toEqual([]);
  });

  it("shows a killed replica as down within a few seconds; its warning's details open from the keyboard", async () => {
    const gpu2 = sims[2]!;
    await gpu2.kill("SIGKILL");
    await tab.page.waitForFunction(() => document.querySelector('[data-replica="gpu2"] [data-health]')?.textContent === "down");
    expect(await tab.page.locator('[data-replica="gpu2"] .note.err').textContent()).toContain("connection refused");
    expect(await tab.page.title()).toBe("⚠ llmroute · 2/3 healthy");
    expect(await text("#replicas [data-health]")).toEqual(["up", "up", "down"]);

    const warning = tab.page.locator('#warning-list li[data-key="gpu2/health"]');
    expect(await warning.locator(".tag").textContent()).toBe("gpu2 · health");
    expect(await warning.locator(".line").textContent()).toMatch(/^down for \d+s: health check: connection refused$/);
    await warning.locator("summary").focus();
    await tab.page.keyboard.press("Enter");
    expect(await warning.locator(".detail").textContent()).toContain("It is back in routing at the first health check that passes (every 1 s).");
    // A refresh keeps both the detail open and the keyboard's place on its line.
    await refreshed();
    expect(await warning.locator(".detail").isVisible()).toBe(true);
    expect(await warning.locator("summary").evaluate((el) => el === document.activeElement)).toBe(true);
    await tab.page.keyboard.press("Enter");
    expect(await warning.locator(".detail").isVisible()).toBe(false);
    expect(tab.errors).toEqual([]);
  });

  it("keeps following traffic after the kill, over several 10 s buckets (and takes the README's screenshot)", async () => {
    // Rounds of the four conversations (gpu2's fail over), one per page refresh, until the
    // chart has bars in four buckets: the wait is on what the page shows, not on a clock.
    for (let turn = 3; (await tab.page.locator("#chart g.bucket").count()) < 4; turn++) {
      for (const next of convos) await next(turn);
      await refreshed();
    }
    const chart = await chartOf();
    expect(chart.bars.length).toBeGreaterThanOrEqual(4);
    const peak = Math.max(...chart.bars.map((b) => figure(/: ([\d,]+) prompt tokens/.exec(b.title)![1]!)));
    expect(figure(chart.y.at(-1)!)).toBeGreaterThanOrEqual(peak);
    expect(figure(chart.y.at(-1)!)).toBeLessThan(1.5 * peak);
    // The capacity detail opened in the traffic test is still open, many refreshes later.
    expect(await tab.page.locator("#warning-list li[data-kind=capacity] .detail").first().isVisible()).toBe(true);
    expect(await text("#warning-list .tag")).toEqual(expect.arrayContaining(["gpu2 · health"]));
    // The README's picture: traffic over several buckets, the capacity wall crossed with its
    // detail open, and a replica down; cut after the last-requests table's eighth row, and
    // without the keyboard's focus ring left on the line the previous test toggled.
    await tab.page.evaluate(() => document.activeElement?.blur());
    const cut = (await tab.page.locator("#last tr:nth-child(8)").boundingBox())!;
    await tab.page.screenshot({ path: SCREENSHOT, fullPage: true, clip: { x: 0, y: 0, width: 1280, height: Math.ceil(cut.y + cut.height + 1) } });
    expect(tab.errors).toEqual([]);
  });

  it("fits a phone's width without sideways scrolling of the page", async () => {
    await tab.page.setViewportSize({ width: 390, height: 844 });
    await tab.page.waitForFunction(() => document.querySelectorAll("#replicas article").length === 3);
    const overflow = await tab.page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBe(0);
    // The chart is redrawn for the narrow width: its time labels do not run into each other.
    await tab.page.waitForFunction(() => document.querySelectorAll("#chart .xtick").length < 6);
    const labels = await tab.page.locator("#chart .xtick").evaluateAll((els) => els.map((e) => e.getBoundingClientRect()).map((r) => [r.left, r.right]).sort((a, b) => a[0]! - b[0]!));
    for (let i = 1; i < labels.length; i++) expect(labels[i]![0]!).toBeGreaterThan(labels[i - 1]![1]!);
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

describe("the page fed known data (the router's own document, its figures replaced)", () => {
  /** Serve `doc()` as /dashboard/data to a new tab; `polls()` counts the requests answered. */
  async function fedTab(doc: () => DashboardData) {
    const t = await watchedPage(browser, router.url);
    let polls = 0;
    await t.page.route("**/dashboard/data", (route) => {
      polls++;
      return route.fulfill({ json: doc(), headers: { "cache-control": "no-store" } });
    });
    await t.page.goto(`${router.url}/dashboard`);
    await t.page.waitForFunction(() => document.querySelectorAll("#replicas article").length > 0);
    return { ...t, polls: () => polls };
  }
  const real = async () => (await (await fetch(`${router.url}/dashboard/data`)).json()) as DashboardData;

  it("draws the chart's axes for the data: a round scale in tokens per 10 s, minutes to now, bars to scale", async () => {
    const base = await real();
    const bucketMs = base.recent.bucket_s * 1000;
    const current = Math.floor(base.now / bucketMs) * bucketMs;
    const tokens: Record<number, [number, number]> = { 20: [23_456, 11_728], 29: [1_000, 0] };
    const doc = {
      ...base,
      recent: {
        ...base.recent,
        series: Array.from({ length: 30 }, (_, i) => {
          const [prompt, cached] = tokens[i] ?? [0, 0];
          return { start: current - (29 - i) * bucketMs, requests: prompt ? 4 : 0, prompt_tokens: prompt, cached_tokens: cached };
        }),
      },
    };
    const t = await fedTab(() => doc);
    const chart = await chartOf(t.page);
    // 23,456 at most: steps of 10k (the first round step ≥ a quarter of it), up to 30k.
    expect(chart.y).toEqual(["0", "10k", "20k", "30k"]);
    expect(chart.x).toEqual(["now", "−1 min", "−2 min", "−3 min", "−4 min", "−5 min"]);
    expect(chart.bars.map((b) => b.title.replace(/^[\d:–]+: /, ""))).toEqual([
      "23,456 prompt tokens, 11,728 cached (50%), 4 requests",
      "1,000 prompt tokens, 0 cached (0%), 4 requests",
    ]);
    expect(chart.bars[0]!.height).toBeCloseTo(23_456 / 30_000, 3);
    expect(chart.bars[0]!.cached).toBeCloseTo(11_728 / 30_000, 3);
    expect(chart.bars[1]!.height).toBeCloseTo(1_000 / 30_000, 3);
    // The newest bucket's bar ends at "now"; the older one stands 9 buckets (1.5 min) left of it.
    const [older, newer] = await t.page.locator("#chart g.bucket rect.cached").evaluateAll((els) => els.map((e) => e.getBoundingClientRect().right));
    const [now, oneMin] = await t.page.locator("#chart .xtick").evaluateAll((els) => els.slice(0, 2).map((e) => e.getBoundingClientRect()).map((r, i) => (i === 0 ? r.right : (r.left + r.right) / 2)));
    expect(Math.abs(newer! - now!)).toBeLessThan(((now! - oneMin!) / 6) * 0.5);
    expect((newer! - older!) / (now! - oneMin!)).toBeCloseTo(1.5, 1);
    expect(chart.caption).toBe("Last 5 min, in prompt tokens per 10 s (axis 0 to 30k): peak 23,456; latest 1,000, 0% of them cached.");
    expect(await t.page.locator("#chart-h").textContent()).toBe("Prompt tokens per 10 s, and the part served from cache");

    // Without traffic: the zero line and a sentence, no invented scale.
    doc.recent = { ...doc.recent, series: doc.recent.series.map((b) => ({ ...b, requests: 0, prompt_tokens: 0, cached_tokens: 0 })) };
    await t.page.waitForFunction(() => document.querySelectorAll("#chart g.bucket").length === 0);
    expect((await chartOf(t.page)).y).toEqual(["0"]);
    expect(await t.page.locator("#chart text.none").textContent()).toBe("No prompt tokens in the last 5 min");
    expect(t.errors).toEqual([]);
    await t.page.close();
  });

  it("delivered above captured is explained under the bars, and the words go when it is not", async () => {
    const base = await real();
    const doc = { ...base, recent: { ...base.recent, hits: { ...base.recent.hits, available: 0.5, captured: 0.2, delivered: 0.6, prompt_tokens: 10_000, cached_tokens: 6_000 } } };
    const t = await fedTab(() => doc);
    const note = t.page.locator("#hits-above");
    await note.waitFor({ state: "visible" });
    expect(await note.textContent()).toStartWith("Delivered above captured: the engines found more cached than the router's index predicted — a shared preamble");
    doc.recent = { ...doc.recent, hits: { ...doc.recent.hits, delivered: 0.15, cached_tokens: 1_500 } };
    await note.waitFor({ state: "hidden" });
    expect(t.errors).toEqual([]);
    await t.page.close();
  });

  it("routes: share and count beside each bar, in a fixed order; a reason that leaves the window keeps its row at 0", async () => {
    const base = await real();
    let routes = [
      { route: "spread", requests: 9 },
      { route: "pin,failover", requests: 1 },
      { route: "pin", requests: 2 },
    ];
    const t = await fedTab(() => ({ ...base, recent: { ...base.recent, routes } }));
    const rows = () =>
      t.page.locator("#routes tr").evaluateAll((trs) =>
        trs.map((r) => [r.querySelector("th")!.textContent, (r.querySelector(".fill") as any).style.width, r.querySelector(".v")!.textContent, r.querySelector("td.n")!.textContent]),
      );
    expect(await rows()).toEqual([
      ["pin", "16.6667%", "17%", "2"],
      ["pin,failover", "8.33333%", "8%", "1"],
      ["spread", "75%", "75%", "9"],
    ]);
    // The bars are thick enough to read: at least 16 px high, and most of the row wide.
    const box = await t.page.locator("#routes tr:first-child .bar").boundingBox();
    expect(box!.height).toBeGreaterThanOrEqual(16);
    expect(box!.width).toBeGreaterThan(200);

    routes = [{ route: "pin", requests: 5 }];
    await t.page.waitForFunction(() => document.querySelector('#routes tr[data-route="spread"] td.n')?.textContent === "0");
    expect(await rows()).toEqual([
      ["pin", "100%", "100%", "5"],
      ["pin,failover", "0%", "0%", "0"],
      ["spread", "0%", "0%", "0"],
    ]);
    expect(t.errors).toEqual([]);
    await t.page.close();
  });

  it("warnings: one line each, details on demand that stay open as the same node while lines come and go; an unchanged refresh changes nothing", async () => {
    const base = await real();
    const capacity = { id: "gpu0/capacity", replica: "gpu0", kind: "capacity" as const, line: "working set ~5,081 tokens, 124% of kv_tokens 4,096: the engine evicts and re-prefills", details: "Why, and what helps." };
    const down = (s: number) => ({ id: "gpu2/health", replica: "gpu2", kind: "health" as const, line: `down for ${s}s: health check: connection refused`, details: "How it comes back." });
    const cluster = { id: "cluster/x", replica: null, kind: "cluster" as const, line: "another instance is also named \"edge\": give each instance its own cluster.name", details: null };
    let findings: DashboardData["findings"] = [capacity, down(2)];
    const t = await fedTab(() => ({ ...base, findings }));
    const lines = () => t.page.locator("#warning-list li").evaluateAll((lis) => lis.map((li) => [li.querySelector(".tag")!.textContent, li.querySelector(".line")!.textContent, (li.querySelector("details") as any)?.open ?? "no details"]));
    expect(await lines()).toEqual([
      ["gpu0 · capacity", capacity.line, false],
      ["gpu2 · health", "down for 2s: health check: connection refused", false],
    ]);
    expect(await t.page.locator("#warnings-n").textContent()).toBe("2 · open a line for its details");
    const health = t.page.locator('#warning-list li[data-key="gpu2/health"]');
    await health.locator("summary").click();
    expect(await health.locator(".detail").textContent()).toBe("How it comes back.");
    await health.locator("details").evaluate((el) => ((el as any).seen = "opened"));

    // A finding appears above it, its own line's figures change, one without details is added.
    findings = [capacity, { id: "gpu1/cache_off", replica: "gpu1", kind: "cache_off", line: "prefix cache may be off", details: "Check with probe." }, down(5), cluster];
    await t.page.waitForFunction(() => document.querySelectorAll("#warning-list li").length === 4);
    expect(await lines()).toEqual([
      ["gpu0 · capacity", capacity.line, false],
      ["gpu1 · cache", "prefix cache may be off", false],
      ["gpu2 · health", "down for 5s: health check: connection refused", true],
      ["cluster · cluster", cluster.line, "no details"],
    ]);
    expect(await health.locator("details").evaluate((el) => (el as any).seen)).toBe("opened");
    expect(await t.page.locator('#warning-list li[data-key="cluster/x"] summary').count()).toBe(0);

    // The same document again: the page changes nothing (no node replaced, no text rewritten).
    const polled = t.polls();
    await t.page.evaluate(() => {
      (window as any).mutations = 0;
      new (window as any).MutationObserver((m: unknown[]) => ((window as any).mutations += m.length)).observe(document.querySelector("#board"), { subtree: true, childList: true, attributes: true, characterData: true });
    });
    // A poll answered after the observer started is rendered before the next one is asked for.
    await until(() => t.polls() >= polled + 2, "two more polls");
    expect(await t.page.evaluate(() => (window as any).mutations)).toBe(0);

    findings = [];
    await t.page.locator("#warnings").waitFor({ state: "hidden" });
    expect(t.errors).toEqual([]);
    await t.page.close();
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
