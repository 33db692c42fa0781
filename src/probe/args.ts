/**
 * `llmroute probe` flags → validated options (pure apart from reading `env` for
 * `--api-key env:NAME`, and LLMROUTE_API_KEY for --via). Bad input is a usage error
 * (exit 2) naming the flag.
 */
import { shownUrl } from "../_shown-url.ts";
import { LlmrouteError } from "../errors.ts";

export type ProbeMode = { kind: "url"; url: string } | { kind: "via"; url: string } | { kind: "replica"; name: string } | { kind: "all" };

export interface ProbeOptions {
  mode: ProbeMode;
  config: string;
  model?: string;
  tokens: number;
  repeat: number;
  turns: number;
  timeoutMs: number;
  /** undefined = the replica's `metrics` path from the config, else /metrics. */
  metricsPath?: string;
  apiKey?: string;
  json: boolean;
}

export interface RawProbeArgs {
  url?: string;
  via?: string;
  replica?: string;
  all?: boolean;
  config?: string;
  model?: string;
  tokens?: string;
  repeat?: string;
  turns?: string;
  timeout?: string;
  "metrics-path"?: string;
  "api-key"?: string;
  json?: boolean;
}

/** 16k tokens: long enough that prefill dominates TTFT on a real card, short enough for any modern context. */
export const DEFAULT_TOKENS = 16_000;
export const DEFAULT_TURNS = 4;
export const DEFAULT_TIMEOUT_S = 600;

const usage = (message: string) => new LlmrouteError("usage", `probe: ${message}`, { exitCode: 2 });

function integer(flag: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  const n = Number(value.replace(/_/g, ""));
  if (!Number.isInteger(n) || n < min || n > max) throw usage(`--${flag} ${JSON.stringify(value)}: must be an integer from ${min} to ${max}`);
  return n;
}

/**
 * "http://host:8000", "http://host:8000/", "http://host:8000/v1" → "http://host:8000".
 * Credentials (http://user:pass@host) are kept, to be sent as Basic auth, and never shown.
 */
export function baseUrl(flag: string, value: string): string {
  let url: URL;
  const typed = JSON.stringify(shownUrl(value));
  try {
    url = new URL(value);
  } catch {
    throw usage(`--${flag} ${typed}: not a URL; expected like http://127.0.0.1:8000`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw usage(`--${flag} ${typed}: must be http:// or https://`);
  const credentials = url.username || url.password ? `${url.username}${url.password ? `:${url.password}` : ""}@` : "";
  return `${url.protocol}//${credentials}${url.host}${url.pathname.replace(/\/+$/, "").replace(/\/v1$/, "")}`;
}

export function parseProbeArgs(raw: RawProbeArgs, env: Record<string, string | undefined> = {}): ProbeOptions {
  const given = [
    raw.url !== undefined && "--url",
    raw.via !== undefined && "--via",
    raw.replica !== undefined && "--replica",
    raw.all === true && "--all",
  ].filter((x): x is string => typeof x === "string");
  if (given.length === 0) throw usage("say what to probe: --url URL (one engine), --replica NAME or --all (from --config), or --via URL (a running llmroute)");
  if (given.length > 1) throw usage(`${given.join(" and ")} exclude each other; give one`);

  const mode: ProbeMode =
    raw.url !== undefined
      ? { kind: "url", url: baseUrl("url", raw.url) }
      : raw.via !== undefined
        ? { kind: "via", url: baseUrl("via", raw.via) }
        : raw.replica !== undefined
          ? { kind: "replica", name: raw.replica }
          : { kind: "all" };

  let apiKey = raw["api-key"];
  if (apiKey?.startsWith("env:")) {
    const name = apiKey.slice(4);
    apiKey = env[name];
    if (!apiKey) throw usage(`--api-key env:${name}: environment variable ${name} is not set (or empty)`);
  }
  // --via talks to an llmroute, whose client key `llmroute status` also reads from here.
  if (apiKey === undefined && mode.kind === "via" && env.LLMROUTE_API_KEY) apiKey = env.LLMROUTE_API_KEY;
  const metricsPath = raw["metrics-path"];
  if (metricsPath !== undefined && !metricsPath.startsWith("/")) throw usage(`--metrics-path ${JSON.stringify(metricsPath)}: must start with "/"`);
  if (raw.model !== undefined && raw.model.trim() === "") throw usage("--model: must not be empty");

  return {
    mode,
    config: raw.config ?? "router.toml",
    ...(raw.model === undefined ? {} : { model: raw.model }),
    tokens: integer("tokens", raw.tokens, DEFAULT_TOKENS, 16, 10_000_000),
    repeat: integer("repeat", raw.repeat, 1, 1, 100),
    turns: integer("turns", raw.turns, DEFAULT_TURNS, 2, 100),
    timeoutMs: integer("timeout", raw.timeout, DEFAULT_TIMEOUT_S, 1, 86_400) * 1000,
    ...(metricsPath === undefined ? {} : { metricsPath }),
    ...(apiKey === undefined ? {} : { apiKey }),
    json: raw.json === true,
  };
}
