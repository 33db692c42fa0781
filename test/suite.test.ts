/**
 * The suite's own settings: every test file gets the timeout sized for a loaded machine.
 * Bun 1.4 applies the preload's setDefaultTimeout to the first file only, so the npm
 * scripts pass `--timeout` too, and the two numbers must not drift apart.
 */
import { expect, it } from "bun:test";
import pkg from "../package.json" with { type: "json" };
import { TEST_TIMEOUT_MS } from "./helpers/wait.ts";

it.each(["test", "test:system", "test:files"] as const)("`npm run %s` passes --timeout TEST_TIMEOUT_MS to bun test", (script) => {
  expect(pkg.scripts[script]).toMatch(new RegExp(`\\bbun test --timeout ${TEST_TIMEOUT_MS}\\b`));
});
