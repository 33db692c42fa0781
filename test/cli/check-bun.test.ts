/**
 * `npm ci --ignore-scripts` leaves Bun's placeholder in node_modules: every npm script that
 * needs Bun first runs scripts/check-bun.mjs under Node, which says exactly what to run.
 */
import { expect, it } from "bun:test";
import { mkdir } from "node:fs/promises";
import { tempDir } from "../helpers/tmp.ts";

const root = new URL("../..", import.meta.url).pathname;
const node = Bun.which("node");

async function check(dir: string) {
  if (!node) throw new Error("node is not on PATH: npm test needs Node.js and npm");
  const p = Bun.spawn([node, `${root}scripts/check-bun.mjs`, dir], { stdout: "pipe", stderr: "pipe" });
  const [stderr, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  return { code, stderr };
}

/** A project whose bun package is what `npm ci --ignore-scripts` leaves: the placeholder script. */
async function ignoredScripts(withPlatformPackage: boolean): Promise<string> {
  const dir = await tempDir("llmroute-bun-");
  await Bun.write(`${dir}/node_modules/bun/bin/bun.exe`, `#!/bin/sh\necho "Error: Bun's postinstall script was not run." >&2\nexit 1\n`);
  if (withPlatformPackage) await Bun.write(`${dir}/node_modules/@oven/bun-linux-x64/bin/bun`, "(binary)");
  return dir;
}

it("this checkout's Bun is real", async () => {
  expect(await check(root)).toEqual({ code: 0, stderr: "" });
});

it("the placeholder: says what to run, and that nothing is downloaded", async () => {
  const { code, stderr } = await check(await ignoredScripts(true));
  expect(code).toBe(1);
  expect(stderr).toContain("postinstall did not run");
  expect(stderr).toContain("\n  node node_modules/bun/install.js\n");
  expect(stderr).toContain("from the installed @oven/bun-linux-x64 package; nothing is downloaded");
});

it("the placeholder without the platform package: the same command, which will download", async () => {
  const { code, stderr } = await check(await ignoredScripts(false));
  expect(code).toBe(1);
  expect(stderr).toContain("\n  node node_modules/bun/install.js\n");
  expect(stderr).toContain("will download one from registry.npmjs.org");
});

it("no bun package at all: npm ci", async () => {
  const dir = await tempDir("llmroute-bun-");
  await mkdir(`${dir}/node_modules`);
  const { code, stderr } = await check(dir);
  expect(code).toBe(1);
  expect(stderr).toContain("Run:  npm ci");
});

it("every npm script that runs Bun checks first", async () => {
  const pkg = (await Bun.file(`${root}package.json`).json()) as { scripts: Record<string, string> };
  for (const [name, script] of Object.entries(pkg.scripts)) {
    if (/\bbun\b/.test(script)) expect({ name, script }).toEqual({ name, script: expect.stringMatching(/^node scripts\/check-bun\.mjs && /) });
  }
});
