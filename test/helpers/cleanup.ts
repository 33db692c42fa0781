/** Preloaded by bunfig.toml: after every test file has run, remove the tests' temp dirs. */
import { afterAll } from "bun:test";
import { removeTempDirs } from "./tmp.ts";

afterAll(removeTempDirs);
