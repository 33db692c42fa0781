/**
 * The real engine the system suite runs against: llama.cpp's `llama-server` and a tiny
 * random-weight model, made by `npm run engine:llamacpp` (scripts/engine-llamacpp.ts).
 * This file pins where the source comes from and says where the pair is kept; the build
 * script and the tests' launcher (test/system/_llamacpp.ts) both read it, so they cannot
 * disagree about which engine a test ran.
 */
import { existsSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/**
 * llama.cpp's source, from npm: `node-llama-cpp` ships llama.cpp's whole tree as a git
 * bundle (package/llama/gitRelease.bundle), so the registry alone gives a reproducible
 * source. The integrity is the registry's for this version (npm pack --json); the
 * commit is the bundle's HEAD. Change the three together.
 */
export const LLAMACPP_SOURCE = {
  package: "node-llama-cpp",
  version: "3.21.1",
  integrity: "sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg==",
  bundle: "package/llama/gitRelease.bundle",
  commit: "80fb11ac73e66d89eae2c6a91d8a77428fa733ed",
} as const;

/**
 * The commit as `llama-server --version` prints it (cmake/build-info.cmake runs
 * `git rev-parse --short HEAD`; the bundle holds one commit, so seven digits), and as it
 * names the cache directory.
 */
export const LLAMACPP_SHORT_COMMIT = LLAMACPP_SOURCE.commit.slice(0, 7);

export const SERVER_FILE = "llama-server";
/** Random weights, real Qwen2 tokenizer, 4 layers, n_embd 256 (scripts/llamacpp-tiny-model.py). */
export const MODEL_FILE = "tiny-qwen2tok-L4-E256.gguf";

export const ENV_SERVER = "LLMROUTE_LLAMA_SERVER";
export const ENV_MODEL = "LLMROUTE_LLAMA_MODEL";
/** Overrides the directory that holds `llamacpp-<commit>/`. */
export const ENV_CACHE = "LLMROUTE_ENGINE_CACHE";

export const BUILD_COMMAND = "npm run engine:llamacpp";

type Env = Record<string, string | undefined>;

/** `$LLMROUTE_ENGINE_CACHE`, else `${XDG_CACHE_HOME:-~/.cache}/llmroute/engines`. */
export function engineCacheRoot(env: Env = process.env): string {
  if (env[ENV_CACHE]) return env[ENV_CACHE];
  const xdg = env.XDG_CACHE_HOME || join(env.HOME || homedir(), ".cache");
  return join(xdg, "llmroute", "engines");
}

/** The directory one llama.cpp commit's pair lives in. */
export function llamacppCacheDir(env: Env = process.env): string {
  return join(engineCacheRoot(env), `llamacpp-${LLAMACPP_SHORT_COMMIT}`);
}

export interface EnginePart {
  path: string;
  /** `env`: named by LLMROUTE_LLAMA_SERVER / LLMROUTE_LLAMA_MODEL; `cache`: the build's cache directory. */
  from: "env" | "cache";
  /** The environment variable that named it, when `from` is `env`. */
  variable?: string;
  /** A regular file is there. */
  exists: boolean;
}

export interface LlamacppEngineLocation {
  cacheDir: string;
  server: EnginePart;
  model: EnginePart;
}

/** Where the engine is (or would be): the environment first, then the cache. Reads no more than the file system. */
export function locateLlamacppEngine(env: Env = process.env): LlamacppEngineLocation {
  const cacheDir = llamacppCacheDir(env);
  const part = (variable: string, file: string): EnginePart => {
    const named = env[variable];
    const path = named || join(cacheDir, file);
    const exists = existsSync(path) && statSync(path).isFile();
    return named ? { path, from: "env", variable, exists } : { path, from: "cache", exists };
  };
  return { cacheDir, server: part(ENV_SERVER, SERVER_FILE), model: part(ENV_MODEL, MODEL_FILE) };
}

/** The commit `llama-server --version` names (its output, stdout and stderr together), or null. */
export function commitOfVersion(output: string): string | null {
  return /\bcommit ([0-9a-f]{7,40})\b/.exec(output)?.[1] ?? null;
}

/** Whether a commit as printed (short or full) is the pinned one. */
export function isPinnedCommit(commit: string | null): boolean {
  return commit !== null && commit.length >= 7 && LLAMACPP_SOURCE.commit.startsWith(commit);
}
