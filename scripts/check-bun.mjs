#!/usr/bin/env node
/**
 * Runs (under Node) before every npm script that needs Bun. Bun comes from npm's `bun`
 * package, whose postinstall replaces node_modules/bun/bin/bun.exe — a small placeholder
 * script — with the real binary from the platform package (@oven/bun-linux-x64, …).
 * `npm ci --ignore-scripts`, common in locked-down CI, skips that step, and every later
 * `bun …` fails. A script run by Bun cannot notice Bun is missing, so this one says what
 * to run, exactly, before anything starts.
 *
 * Usage: node scripts/check-bun.mjs [project-root]   (exit 0 ready, 1 not)
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = process.argv[2] ?? fileURLToPath(new URL("..", import.meta.url));
const bin = join(root, "node_modules", "bun", "bin", "bun.exe");

/** The placeholder is a few hundred bytes of shell; the real binary is ~100 MB. */
const PLACEHOLDER_MAX_BYTES = 1 << 20;

function fail(lines) {
  process.stderr.write(`${lines.join("\n")}\n`);
  process.exit(1);
}

if (!existsSync(bin)) {
  fail(["llmroute: Bun is not installed in node_modules (it is a dev dependency).", "Run:  npm ci"]);
}
if (statSync(bin).size < PLACEHOLDER_MAX_BYTES) {
  const ovenDir = join(root, "node_modules", "@oven");
  const platform = existsSync(ovenDir)
    ? readdirSync(ovenDir).find((d) => d.startsWith("bun-") && ["bun", "bun.exe"].some((b) => existsSync(join(ovenDir, d, "bin", b))))
    : undefined;
  fail([
    "llmroute: node_modules/bun/bin/bun.exe is Bun's placeholder: the bun package's postinstall did not run",
    "(npm ci --ignore-scripts, or a package manager that skips install scripts).",
    "Run once, from the project root:",
    "",
    "  node node_modules/bun/install.js",
    "",
    platform
      ? `It links the binary from the installed @oven/${platform} package; nothing is downloaded.`
      : "No @oven/bun-* platform package is installed (--omit=optional?), so it will download one from registry.npmjs.org; `npm ci --ignore-scripts` without --omit=optional avoids that.",
  ]);
}
