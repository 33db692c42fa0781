/**
 * The system suite's browser: Debian's chromium (never a browser download) driven by
 * playwright-core, with a fresh profile per launch and Chromium's own background
 * traffic (updates, sync, QUIC probes) switched off, since the machine has no network
 * beyond loopback.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { requireCommand } from "./_require.ts";
import { WAIT_MS } from "../helpers/wait.ts";

/** Debian's package; LLMROUTE_TEST_CHROMIUM points elsewhere (another distribution's path). */
export const CHROMIUM = process.env.LLMROUTE_TEST_CHROMIUM ?? "/usr/bin/chromium";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

export async function launchBrowser(options: { viewport?: { width: number; height: number } } = {}): Promise<Browser> {
  const executablePath = requireCommand(CHROMIUM, "apt-get install -y chromium");
  const profile = await mkdtemp("/tmp/llmroute-chromium-");
  // launchPersistentContext is how Playwright passes --user-data-dir: a new empty profile.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: FLAGS,
    viewport: options.viewport ?? { width: 1280, height: 900 },
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

export interface WatchedPage {
  page: Page;
  /** console.error messages, uncaught exceptions and CSP violations. */
  errors: string[];
  /** Every URL the page requested. */
  requests: string[];
  /** Requests to any origin other than `allowed`, blocked before they left. */
  foreign: string[];
}

/** A new tab that records errors and requests, and blocks any request to another origin. */
export async function watchedPage(browser: Browser, allowed: string): Promise<WatchedPage> {
  const page = await browser.context.newPage();
  // Every wait on the page (waitForFunction, locators) has the suite's deadline for one event.
  page.setDefaultTimeout(WAIT_MS);
  const errors: string[] = [];
  const requests: string[] = [];
  const foreign: string[] = [];
  const origin = new URL(allowed).origin;
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("request", (r) => requests.push(r.url()));
  await page.route("**/*", (route) => {
    const url = route.request().url();
    if (url.startsWith("data:") || new URL(url).origin === origin) return route.continue();
    foreign.push(url);
    return route.abort("blockedbyclient");
  });
  return { page, errors, requests, foreign };
}
