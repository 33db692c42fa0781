/**
 * Preloaded by bunfig.toml into every test run (the whole suite or one file):
 * - every test's and hook's timeout is TEST_TIMEOUT_MS, sized for a loaded machine
 *   (Bun's default is 5 s; bunfig.toml cannot set it in Bun 1.4);
 * - after every test file has run, the tests' temp dirs are removed.
 */
import { afterAll, setDefaultTimeout } from "bun:test";
import { removeTempDirs } from "./tmp.ts";
import { TEST_TIMEOUT_MS } from "./wait.ts";

setDefaultTimeout(TEST_TIMEOUT_MS);
afterAll(removeTempDirs);
