/**
 * Preloaded by bunfig.toml into every test run (the whole suite or one file):
 * - the timeout of every test and hook is TEST_TIMEOUT_MS, sized for a loaded machine
 *   (Bun's default is 5 s). Bun 1.4 keeps setDefaultTimeout for the first file only and
 *   has no bunfig key for it, so `npm test` also passes `--timeout` with the same number
 *   (test/suite.test.ts checks they agree); this line covers `npx bun test one.test.ts`;
 * - after every test file has run, the tests' temp dirs are removed.
 */
import { afterAll, setDefaultTimeout } from "bun:test";
import { removeTempDirs } from "./tmp.ts";
import { TEST_TIMEOUT_MS } from "./wait.ts";

setDefaultTimeout(TEST_TIMEOUT_MS);
afterAll(removeTempDirs);
