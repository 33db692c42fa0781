/**
 * router.toml → a typed, validated `Config`.
 *
 * The file is untrusted input: smol-toml parses it to `unknown`, one validator walks it and
 * either returns a `Config` or throws a `ConfigError` listing every problem with
 * file:line:column of the value (or the flag that set it), the key, the bad value and what
 * would be valid. Durations and sizes have bounds a running router can live with. Nothing
 * here touches the network.
 */
import { readFile, stat } from "node:fs/promises";
import { hostname } from "node:os";
import { parse, TomlError } from "smol-toml";
import { didYouMean } from "./_did-you-mean.ts";
import { shownUrl } from "./_shown-url.ts";
import { explainTomlError } from "./_toml-errors.ts";
import { tomlPositions, type KeyPosition } from "./_toml-positions.ts";
import { ConfigError, type ConfigIssue } from "./errors.ts";
import { DEFAULT_CACHE_AWARE, POLICY_NAMES, type CacheAwareOptions, type PolicyName } from "./route/options.ts";

export const LOG_FORMATS = ["auto", "human", "json"] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface Listen {
  host: string;
  port: number;
}

export interface ReplicaConfig {
  name: string;
  /** Base URL without a trailing slash, e.g. http://127.0.0.1:8001 */
  url: string;
  /** The card's KV budget in tokens; 0 = unknown (no capacity warning). */
  kv_tokens: number;
  /** Models served; empty = discover from /v1/models. */
  models: string[];
  /** Resolved upstream key (the `env:NAME` form is resolved at load). Never logged. */
  api_key?: string;
  /**
   * Engine metrics path, scraped wherever it answers with Prometheus text (load, cache
   * counters, capacity, restarts); false = never scraped. Default "/metrics".
   */
  metrics?: string | false;
  /** Overrides health.path for this replica, whatever it answers (unset, a 404 there is checked where the engine answers: Ollama's /api/version). */
  health_path?: string;
}

export interface Config {
  /** Where the config came from (a path, or "<default>"). */
  file: string;
  server: {
    listen: Listen;
    admin_listen?: Listen;
    max_body_bytes: number;
    api_keys: string[];
    log_format: LogFormat;
    drain_timeout_ms: number;
  };
  routing: {
    policy: PolicyName;
    max_inflight: number;
    max_attempts: number;
    chunk_chars: number;
    index_max_entries: number;
    index_ttl_ms: number;
    state_file?: string;
    /** Conversations used within this window make up a replica's working set (capacity wall). */
    capacity_window_ms: number;
    cache_aware: CacheAwareOptions;
    /** Before the first byte (fail over): TCP connect, and the engine's first response byte. */
    connect_timeout_ms: number;
    first_byte_timeout_ms: number;
    /** After the first byte: a stream silent this long is ended with the API's error event. */
    stream_idle_timeout_ms: number;
    /** How often the state file is written while running (it is also written on stop). */
    state_interval_ms: number;
  };
  health: {
    interval_ms: number;
    path: string;
    timeout_ms: number;
    /** Consecutive 5xx or timeouts (passive) that demote a replica; a refused connection demotes at once. */
    failures: number;
  };
  /** Shared routing state across router instances; absent = this instance alone. */
  cluster?: {
    /** redis:// or rediss:// URL (a password may come from `env:NAME`). Never logged. */
    redis: string;
    /** This instance's name in the cluster (default: hostname:port). */
    name: string;
    /** A starting instance waits at most this long to catch up from Redis before serving. */
    catch_up_timeout_ms: number;
    /** Key prefix in Redis: instances with the same namespace share state (default "llmroute"). */
    namespace: string;
    /** How often one instance stores the index in Redis for newcomers (the stream is trimmed behind it). */
    snapshot_interval_ms: number;
  };
  replicas: ReplicaConfig[];
  /**
   * What the loader changed in what was written, and why (a replica URL's trailing /v1):
   * accepted, not errors; `llmroute check` prints them and `serve` logs them.
   */
  notes: ConfigIssue[];
}

type Env = Record<string, string | undefined>;

/** A value's check: the value as the Config holds it, or why it is refused. */
type Check<T> = (value: unknown) => { ok: true; value: T } | { ok: false; reason: string };

/**
 * The schema is these two tables and validateConfig: every known key (KNOWN, by table; a
 * key that is itself a table, like routing.cache_aware, has its own entry) and the defaults
 * that are fixed values (DEFAULTS). Exported so docs/configuration.md is checked against them
 * (test/config.test.ts): a key cannot be added without its row there.
 */
export const DEFAULTS = {
  server: {
    listen: "127.0.0.1:8080",
    max_body: "32MiB",
    api_keys: [] as string[],
    log_format: "auto",
    drain_timeout: "30s",
  },
  routing: {
    policy: "hybrid",
    max_inflight: 0,
    max_attempts: 3,
    chunk_chars: 1024,
    index_max_entries: 2_000_000,
    index_ttl: "1h",
    capacity_window: "5m",
    connect_timeout: "5s",
    first_byte_timeout: "10m",
    stream_idle_timeout: "5m",
    state_interval: "30s",
  },
  cache_aware: DEFAULT_CACHE_AWARE,
  health: { interval: "10s", path: "/health", timeout: "3s", failures: 3 },
  cluster: { catch_up_timeout: "5s", namespace: "llmroute", snapshot_interval: "30s" },
};

export const KNOWN: Record<string, readonly string[]> = {
  "": ["server", "routing", "health", "cluster", "replica"],
  server: ["listen", "admin_listen", "max_body", "api_keys", "log_format", "drain_timeout"],
  routing: [
    "policy",
    "max_inflight",
    "max_attempts",
    "chunk_chars",
    "index_max_entries",
    "index_ttl",
    "state_file",
    "capacity_window",
    "cache_aware",
    "connect_timeout",
    "first_byte_timeout",
    "stream_idle_timeout",
    "state_interval",
  ],
  "routing.cache_aware": ["min_match_ratio", "balance_abs", "balance_rel"],
  health: ["interval", "path", "timeout", "failures"],
  cluster: ["redis", "name", "catch_up_timeout", "namespace", "snapshot_interval"],
  replica: ["name", "url", "kv_tokens", "models", "api_key", "metrics", "health_path"],
};

export interface LoadOptions {
  env?: Env;
  /**
   * Values that replace the file's, by dotted key, validated like the file's; `flag` is
   * the command-line flag that set it, named in its error instead of the file's line.
   */
  overrides?: Record<string, { value: unknown; flag: string }>;
  /**
   * Resolve `env:NAME` secrets (default true). `llmroute status` only needs the address and
   * must work where the service's secrets are not exported: it passes false, and secrets
   * are then checked for shape only and left as written.
   */
  resolveSecrets?: boolean;
}

/** Read and validate a config file. Throws ConfigError (exit code 2) on any problem. */
export async function loadConfigFile(path: string, options: LoadOptions = {}): Promise<Config> {
  const unreadable = (reason: string, cause?: unknown) => new ConfigError([{ file: path, key: "(file)", reason }], { cause });
  let text: string;
  try {
    if ((await stat(path)).isDirectory()) throw unreadable(`is a directory; pass the file, e.g. --config ${path.replace(/\/+$/, "")}/router.toml`);
    text = await readFile(path, "utf8");
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    const code = (error as { code?: string }).code;
    if (code === "ENOENT" || code === "ENOTDIR") throw unreadable("no such file; pass --config FILE or create ./router.toml", error);
    if (code === "EACCES" || code === "EPERM") throw unreadable("permission denied (the file must be readable by the user llmroute runs as)", error);
    throw unreadable(`cannot read: ${(error as Error).message}`, error);
  }
  return parseConfig(text, path, options);
}

/** Parse TOML text into a Config; `file` names it in errors. Pure apart from reading `env`. */
export function parseConfig(text: string, file: string, options: LoadOptions = {}): Config {
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (error) {
    if (error instanceof TomlError) {
      const reason = explainTomlError(text, { message: error.message, line: error.line, column: error.column });
      throw new ConfigError([{ file, line: error.line, column: error.column, key: "(syntax)", reason }], { cause: error });
    }
    throw error;
  }
  const flags = new Map<string, string>();
  for (const [path, { value, flag }] of Object.entries(options.overrides ?? {})) {
    setPath(raw, path, value);
    flags.set(path, flag);
  }
  return validateConfig(raw, {
    file,
    where: tomlPositions(text),
    flags,
    env: options.env ?? process.env,
    resolveSecrets: options.resolveSecrets ?? true,
  });
}

function setPath(root: unknown, path: string, value: unknown): void {
  const keys = path.split(".");
  let t = root as Record<string, unknown>;
  for (const k of keys.slice(0, -1)) {
    if (asTable(t[k]) !== t[k]) t[k] = {};
    t = t[k] as Record<string, unknown>;
  }
  t[keys.at(-1)!] = value;
}

interface Ctx {
  file: string;
  /** Where each key and value is in the file. */
  where: Map<string, KeyPosition>;
  /** Keys set by a command-line flag: the flag's name. */
  flags: Map<string, string>;
  env: Env;
  resolveSecrets: boolean;
  issues: ConfigIssue[];
  notes: ConfigIssue[];
}

/** Record a problem at the key's value (or, for an unknown or missing key, the key itself) or the flag that set it. */
function report(ctx: Ctx, path: string, part: "key" | "value", issue: { key?: string; value?: unknown; reason: string }): void {
  const flag = part === "value" ? ctx.flags.get(path) : undefined;
  const at = flag === undefined ? ctx.where.get(path)?.[part] : undefined;
  ctx.issues.push({
    file: ctx.file,
    ...(at ? { line: at.line, column: at.column } : {}),
    ...(flag === undefined ? {} : { flag }),
    key: issue.key ?? path,
    ...(issue.value === undefined ? {} : { value: issue.value }),
    reason: issue.reason,
  });
}

function validateConfig(raw: unknown, base: Omit<Ctx, "issues" | "notes">): Config {
  const ctx: Ctx = { ...base, issues: [], notes: [] };
  const root = asTable(raw);
  checkUnknown(ctx, "", root);

  const server = table(ctx, root, "server");
  const routing = table(ctx, root, "routing");
  const cacheAware = table(ctx, routing, "cache_aware", "routing.cache_aware");
  const health = table(ctx, root, "health");
  const cluster = root.cluster === undefined ? undefined : table(ctx, root, "cluster");

  const envPolicy = ctx.env.LLMROUTE_POLICY;
  let policy = field(ctx, routing, "routing.policy", DEFAULTS.routing.policy, oneOf(POLICY_NAMES));
  if (envPolicy !== undefined && envPolicy !== "") {
    const checked = oneOf(POLICY_NAMES)(envPolicy);
    if (checked.ok) policy = checked.value;
    else ctx.issues.push({ file: "environment", key: "LLMROUTE_POLICY", value: envPolicy, reason: checked.reason });
  }

  const adminListen = optionalField(ctx, server, "server.admin_listen", listenAddress);
  const secretCheck = ctx.resolveSecrets ? secret(ctx.env) : secretShape;
  const stateFile = optionalField(ctx, routing, "routing.state_file", nonEmptyString);

  const config: Config = {
    file: ctx.file,
    server: {
      listen: field(ctx, server, "server.listen", DEFAULTS.server.listen, listenAddress),
      ...(adminListen === undefined ? {} : { admin_listen: adminListen }),
      max_body_bytes: field(ctx, server, "server.max_body", DEFAULTS.server.max_body, atLeastBytes(1024)),
      api_keys: field(ctx, server, "server.api_keys", DEFAULTS.server.api_keys, arrayOf(secretCheck)),
      log_format: field(ctx, server, "server.log_format", DEFAULTS.server.log_format, oneOf(LOG_FORMATS)),
      // 0 is allowed: stop at once, cutting what is in flight.
      drain_timeout_ms: field(ctx, server, "server.drain_timeout", DEFAULTS.server.drain_timeout, durationFrom(0)),
    },
    routing: {
      policy,
      max_inflight: field(ctx, routing, "routing.max_inflight", DEFAULTS.routing.max_inflight, integer(0)),
      max_attempts: field(ctx, routing, "routing.max_attempts", DEFAULTS.routing.max_attempts, integer(1, 16)),
      chunk_chars: field(ctx, routing, "routing.chunk_chars", DEFAULTS.routing.chunk_chars, integer(64, 1 << 20)),
      index_max_entries: field(ctx, routing, "routing.index_max_entries", DEFAULTS.routing.index_max_entries, integer(1)),
      index_ttl_ms: field(ctx, routing, "routing.index_ttl", DEFAULTS.routing.index_ttl, durationFrom(1000)),
      ...(stateFile === undefined ? {} : { state_file: stateFile }),
      capacity_window_ms: field(ctx, routing, "routing.capacity_window", DEFAULTS.routing.capacity_window, durationFrom(1000)),
      cache_aware: {
        min_match_ratio: field(ctx, cacheAware, "routing.cache_aware.min_match_ratio", DEFAULTS.cache_aware.min_match_ratio, fraction),
        balance_abs: field(ctx, cacheAware, "routing.cache_aware.balance_abs", DEFAULTS.cache_aware.balance_abs, integer(1)),
        balance_rel: field(ctx, cacheAware, "routing.cache_aware.balance_rel", DEFAULTS.cache_aware.balance_rel, number(1)),
      },
      connect_timeout_ms: field(ctx, routing, "routing.connect_timeout", DEFAULTS.routing.connect_timeout, durationFrom(1)),
      first_byte_timeout_ms: field(ctx, routing, "routing.first_byte_timeout", DEFAULTS.routing.first_byte_timeout, durationFrom(1)),
      stream_idle_timeout_ms: field(ctx, routing, "routing.stream_idle_timeout", DEFAULTS.routing.stream_idle_timeout, durationFrom(1)),
      state_interval_ms: field(ctx, routing, "routing.state_interval", DEFAULTS.routing.state_interval, durationFrom(1000)),
    },
    health: {
      interval_ms: field(ctx, health, "health.interval", DEFAULTS.health.interval, durationFrom(100)),
      path: field(ctx, health, "health.path", DEFAULTS.health.path, urlPath),
      timeout_ms: field(ctx, health, "health.timeout", DEFAULTS.health.timeout, durationFrom(100)),
      failures: field(ctx, health, "health.failures", DEFAULTS.health.failures, integer(1, 100)),
    },
    ...(cluster === undefined
      ? {}
      : {
          cluster: {
            redis: field(ctx, cluster, "cluster.redis", undefined, redisUrl(ctx.env, ctx.resolveSecrets)),
            name: field(ctx, cluster, "cluster.name", defaultInstanceName(root), instanceName),
            // 0 is allowed: do not wait.
            catch_up_timeout_ms: field(ctx, cluster, "cluster.catch_up_timeout", DEFAULTS.cluster.catch_up_timeout, durationFrom(0)),
            namespace: field(ctx, cluster, "cluster.namespace", DEFAULTS.cluster.namespace, namespaceName),
            snapshot_interval_ms: field(ctx, cluster, "cluster.snapshot_interval", DEFAULTS.cluster.snapshot_interval, durationFrom(1_000)),
          },
        }),
    replicas: replicas(ctx, root.replica),
    notes: ctx.notes,
  };

  // A check that outlives its interval overlaps the next one and a slow engine is never
  // seen as down: the timeout must be the shorter. Unset, it follows a short interval
  // (half of it) instead of making the user set both.
  const { interval_ms: interval, timeout_ms: timeout } = config.health;
  if (interval !== undefined && timeout !== undefined && timeout >= interval) {
    if (health.timeout === undefined) config.health.timeout_ms = Math.max(50, Math.floor(interval / 2));
    else report(ctx, "health.timeout", "value", { value: health.timeout, reason: `must be shorter than health.interval (${formatMs(interval)})` });
  }

  if (ctx.issues.length > 0) {
    // In file order, as an editor lists them; flags and the environment first, file-wide last.
    const rank = (i: ConfigIssue) => (i.flag !== undefined || i.file !== ctx.file ? -1 : i.line === undefined ? Infinity : i.line * 1e6 + (i.column ?? 0));
    throw new ConfigError([...ctx.issues].sort((a, b) => rank(a) - rank(b)));
  }
  return config;
}

function replicas(ctx: Ctx, raw: unknown): ReplicaConfig[] {
  if (raw === undefined) {
    ctx.issues.push({ file: ctx.file, key: "replica", reason: "at least one [[replica]] table with a name and url is required" });
    return [];
  }
  if (!Array.isArray(raw)) {
    report(ctx, "replica", "key", { reason: "must be an array of tables: write [[replica]]" });
    return [];
  }
  const seen = new Map<string, number>();
  const engines = new Map<string, { index: number; name: unknown; line?: number }>();
  return raw.map((entry, i): ReplicaConfig => {
    const prefix = `replica[${i}]`;
    const t = asTable(entry);
    checkUnknown(ctx, prefix, t, "replica");
    const name = field(ctx, t, `${prefix}.name`, undefined, replicaName);
    const written = field(ctx, t, `${prefix}.url`, undefined, httpUrl);
    const url = written === undefined ? undefined : baseOf(written);
    if (url !== undefined && url !== written) {
      const at = ctx.where.get(`${prefix}.url`)?.value;
      ctx.notes.push({
        file: ctx.file,
        ...(at ? { line: at.line, column: at.column } : {}),
        key: `${prefix}.url`,
        value: shownUrl(String(t.url)),
        reason: `using "${shownUrl(url)}": the router appends /v1/… (and health.path, metrics) to a replica's base URL itself, so the /v1 that OpenAI clients put in a base URL is taken off`,
      });
    }
    if (url !== undefined) {
      // Two entries that reach one engine double its share of traffic and split its cache
      // between two names the index treats as two cards.
      const engine = engineOf(url);
      const first = engines.get(engine);
      if (first) {
        const detail = [typeof first.name === "string" ? `"${first.name}"` : undefined, first.line === undefined ? undefined : `line ${first.line}`].filter(Boolean).join(", ");
        const where = `replica[${first.index}]${detail ? ` (${detail})` : ""}`;
        report(ctx, `${prefix}.url`, "value", {
          value: shownUrl(String(t.url)),
          reason: `reaches the same engine as ${where}: two entries for one engine double its share of the traffic and split its cache; list it once`,
        });
      } else {
        engines.set(engine, { index: i, name: t.name, ...(ctx.where.get(`${prefix}.url`)?.value ? { line: ctx.where.get(`${prefix}.url`)!.value.line } : {}) });
      }
    }
    if (name !== undefined) {
      if (seen.has(name)) {
        report(ctx, `${prefix}.name`, "value", { value: name, reason: `duplicate name (also replica[${seen.get(name)}])` });
      }
      seen.set(name, i);
    }
    const apiKey = optionalField(ctx, t, `${prefix}.api_key`, ctx.resolveSecrets ? secret(ctx.env) : secretShape);
    const metrics = field(ctx, t, `${prefix}.metrics`, DEFAULT_METRICS_PATH, metricsPath);
    const healthPath = optionalField(ctx, t, `${prefix}.health_path`, urlPath);
    return {
      name: name ?? `replica${i}`,
      url: url ?? "",
      kv_tokens: field(ctx, t, `${prefix}.kv_tokens`, 0, integer(0)),
      models: field(ctx, t, `${prefix}.models`, [] as string[], arrayOf(nonEmptyString)),
      ...(apiKey === undefined ? {} : { api_key: apiKey }),
      metrics: metrics ?? DEFAULT_METRICS_PATH,
      ...(healthPath === undefined ? {} : { health_path: healthPath }),
    };
  });
}

// ---------------------------------------------------------------------------------------
// field helpers

function asTable(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Date)
    ? (value as Record<string, unknown>)
    : {};
}

function table(ctx: Ctx, parent: Record<string, unknown>, key: string, path = key): Record<string, unknown> {
  const value = parent[key];
  if (value === undefined) return {};
  if (asTable(value) !== value) {
    report(ctx, path, "value", { value, reason: `must be a table: write [${path}]` });
    return {};
  }
  checkUnknown(ctx, path, value as Record<string, unknown>);
  return value as Record<string, unknown>;
}

function checkUnknown(ctx: Ctx, path: string, t: Record<string, unknown>, schemaKey = path): void {
  const known = KNOWN[schemaKey] ?? [];
  for (const key of Object.keys(t)) {
    if (known.includes(key)) continue;
    const full = path === "" ? key : `${path}.${key}`;
    const near = didYouMean(key, known);
    const hint = near === undefined ? `known keys here: ${known.join(", ")}` : `did you mean "${near}"?`;
    report(ctx, full, "key", { reason: `unknown key; ${hint}` });
  }
}

function field<T>(ctx: Ctx, t: Record<string, unknown>, path: string, fallback: unknown, check: Check<T>): T {
  const key = path.slice(path.lastIndexOf(".") + 1);
  const value = t[key] ?? fallback;
  if (value === undefined) {
    report(ctx, path.slice(0, path.lastIndexOf(".")), "key", { key: path, reason: "is required" });
    return undefined as T;
  }
  const checked = check(value);
  if (checked.ok) return checked.value;
  report(ctx, path, "value", { value: redact(path, value), reason: checked.reason });
  return undefined as T;
}

function optionalField<T>(ctx: Ctx, t: Record<string, unknown>, path: string, check: Check<T>): T | undefined {
  const key = path.slice(path.lastIndexOf(".") + 1);
  if (t[key] === undefined) return undefined;
  return field(ctx, t, path, undefined, check);
}

/** Secrets are never echoed back, not even in an error message: keys, and a URL's credentials. */
function redact(path: string, value: unknown): unknown {
  if (!/api_key/.test(path)) return typeof value === "string" ? shownUrl(value) : value;
  return typeof value === "string" && value.startsWith("env:") ? value : "<redacted>";
}

// ---------------------------------------------------------------------------------------
// checks

const ok = <T>(value: T) => ({ ok: true as const, value });
const bad = (reason: string) => ({ ok: false as const, reason });

function oneOf<const T extends readonly string[]>(allowed: T): Check<T[number]> {
  return (v) => {
    if (typeof v === "string" && (allowed as readonly string[]).includes(v)) return ok(v as T[number]);
    const near = typeof v === "string" ? didYouMean(v, allowed) : undefined;
    return bad(`must be one of ${allowed.join(" | ")}${near ? ` (did you mean "${near}"?)` : ""}`);
  };
}

function integer(min: number, max = Number.MAX_SAFE_INTEGER): Check<number> {
  return (v) =>
    typeof v === "number" && Number.isInteger(v) && v >= min && v <= max
      ? ok(v)
      : bad(`must be an integer from ${min}${max === Number.MAX_SAFE_INTEGER ? " up" : ` to ${max}`}`);
}

function number(min: number): Check<number> {
  return (v) => (typeof v === "number" && Number.isFinite(v) && v >= min ? ok(v) : bad(`must be a number ≥ ${min}`));
}

const fraction: Check<number> = (v) =>
  typeof v === "number" && v >= 0 && v <= 1 ? ok(v) : bad("must be a number from 0 to 1");

const nonEmptyString: Check<string> = (v) =>
  typeof v === "string" && v.trim() !== "" ? ok(v) : bad("must be a non-empty string");

function arrayOf<T>(item: Check<T>): Check<T[]> {
  return (v) => {
    if (!Array.isArray(v)) return bad("must be an array, e.g. [\"a\", \"b\"]");
    const out: T[] = [];
    for (const [i, entry] of v.entries()) {
      const checked = item(entry);
      if (!checked.ok) return bad(`item ${i}: ${checked.reason}`);
      out.push(checked.value);
    }
    return ok(out);
  };
}

const replicaName: Check<string> = (v) =>
  typeof v === "string" && /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(v)
    ? ok(v)
    : bad("must be 1–64 characters of letters, digits, '.', '_' or '-' (it appears in headers and metrics)");

const httpUrl: Check<string> = (v) => {
  if (typeof v !== "string") return bad("must be a string like \"http://127.0.0.1:8001\"");
  // The URL parser refuses a port above 65535 with the same error as any other bad URL.
  const port = /^[a-z][a-z0-9+.-]*:\/\/(?:[^@/?#]*@)?(?:\[[^\]]*\]|[^:/?#]*):(\d+)(?:[/?#]|$)/i.exec(v)?.[1];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return bad(`port ${port} is out of range: a port is 1–65535`);
  let url: URL;
  try {
    url = new URL(v);
  } catch {
    return bad("must be an http:// or https:// URL like \"http://127.0.0.1:8001\"");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return bad("must be an http:// or https:// URL");
  if (url.search || url.hash) return bad("must not carry a query or fragment");
  return ok(v.replace(/\/+$/, ""));
};

/**
 * A replica's base URL: the router appends the client's path (/v1/chat/completions) and the
 * health and metrics paths to it, which engines serve at their root (vLLM's /health and
 * /metrics, llama-server's /health). OpenAI clients and vLLM's docs write base URLs with
 * /v1, and a /v1 left on sent every request to /v1/v1/… (404). A replica behind a path
 * prefix keeps its prefix: https://gw/team-a/v1 → https://gw/team-a, whose /v1/… and
 * /health are the engine's (set health_path when the gateway only passes /v1/…).
 */
function baseOf(url: string): string {
  return url.replace(/\/v1$/, "");
}

/** What tells two base URLs' engines apart: scheme, host and port (a default port as the URL parser writes it), and path; never the credentials. */
function engineOf(base: string): string {
  const u = new URL(base);
  return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
}

const urlPath: Check<string> = (v) =>
  typeof v === "string" && v.startsWith("/") ? ok(v) : bad("must be a path starting with \"/\"");

/** Engines' /metrics are scraped by default wherever they answer; `metrics = false` turns it off. */
export const DEFAULT_METRICS_PATH = "/metrics";

const metricsPath: Check<string | false> = (v) => {
  if (v === true) return ok(DEFAULT_METRICS_PATH);
  if (v === false) return ok(false);
  if (typeof v === "string" && v.startsWith("/")) return ok(v);
  return bad("must be a path starting with \"/\" (default \"/metrics\", scraped wherever it answers), or false (never scrape)");
};

/** A secret as written, unresolved (`resolveSecrets: false`). */
const secretShape: Check<string> = (v) =>
  typeof v === "string" && v !== "" && v !== "env:" ? ok(v) : bad("must be a non-empty string or \"env:NAME\"");

function secret(env: Env): Check<string> {
  return (v) => {
    if (typeof v !== "string" || v === "") return bad("must be a non-empty string or \"env:NAME\"");
    if (!v.startsWith("env:")) return ok(v);
    const name = v.slice(4);
    const resolved = env[name];
    return resolved ? ok(resolved) : bad(`environment variable ${name} is not set (or empty)`);
  };
}

/** A redis:// or rediss:// URL, literal or "env:NAME" (the whole URL, password included). */
function redisUrl(env: Env, resolve: boolean): Check<string> {
  return (v) => {
    if (!resolve && typeof v === "string" && v.startsWith("env:")) return secretShape(v);
    const resolved = secret(env)(v);
    if (!resolved.ok) return bad(`${resolved.reason}; e.g. "redis://127.0.0.1:6379" or "env:LLMROUTE_REDIS_URL"`);
    let url: URL;
    try {
      url = new URL(resolved.value);
    } catch {
      return bad("must be a redis:// or rediss:// URL like \"redis://127.0.0.1:6379\"");
    }
    if (url.protocol !== "redis:" && url.protocol !== "rediss:") return bad("must be a redis:// or rediss:// URL");
    return ok(resolved.value);
  };
}

const instanceName: Check<string> = (v) =>
  typeof v === "string" && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(v)
    ? ok(v)
    : bad("must be 1–128 characters of letters, digits, '.', '_', ':' or '-'");

const namespaceName: Check<string> = (v) =>
  typeof v === "string" && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/.test(v)
    ? ok(v)
    : bad("must be 1–64 characters of letters, digits, '.', '_', ':' or '-' (a Redis key prefix)");

/** hostname:port of server.listen, so two instances on one host differ. */
function defaultInstanceName(root: Record<string, unknown>): string {
  const listen = listenAddress(asTable(root.server).listen ?? DEFAULTS.server.listen);
  const host = (hostname() || "llmroute").replace(/[^A-Za-z0-9._-]/g, "-");
  return `${host}:${listen.ok ? listen.value.port : 0}`;
}

/** "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:80", ":8080" (loopback), or a port number. */
export const listenAddress: Check<Listen> = (v) => {
  const hint = "must be \"host:port\" like \"127.0.0.1:8080\" (port 0 picks a free port)";
  if (typeof v === "number") return Number.isInteger(v) && v >= 0 && v <= 65535 ? ok({ host: "127.0.0.1", port: v }) : bad(hint);
  if (typeof v !== "string") return bad(hint);
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(v.trim());
  if (!m) return bad(hint);
  const port = Number(m[3]);
  if (port > 65535) return bad(hint);
  const host = m[1] ?? (m[2] === "" ? "127.0.0.1" : m[2]!);
  return ok({ host, port });
};

/** "500ms", "10s", "2m", "1h", "1.5s". */
export const duration: Check<number> = (v) => {
  const m = typeof v === "string" ? /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(v.trim()) : null;
  if (!m) return bad("must be a duration string like \"500ms\", \"10s\", \"2m\" or \"1h\"");
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as "ms" | "s" | "m" | "h"];
  return ok(Math.round(Number(m[1]) * unit));
};

/** Timers longer than this (2^31 − 1 ms, ~24.8 days) fire at once in Bun and Node: a busy loop. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A duration of at least `minMs` (0 allowed when minMs is 0) that a timer can hold. */
function durationFrom(minMs: number): Check<number> {
  return (v) => {
    if (typeof v === "string" && /^-\s*\d/.test(v.trim())) {
      return bad(minMs === 0 ? "must not be negative: a duration like \"30s\", or \"0s\" for none" : `must be positive: a duration like "10s"${minMs > 1 ? ` (at least ${formatMs(minMs)})` : ""}`);
    }
    const d = duration(v);
    if (!d.ok) return d;
    if (d.value < minMs) return bad(minMs <= 1 ? "must be longer than 0" : `must be at least ${formatMs(minMs)}`);
    if (d.value > MAX_TIMER_MS) return bad("must be at most 596h (the longest timer a process can set)");
    return d;
  };
}

function atLeastBytes(min: number): Check<number> {
  return (v) => {
    const b = byteSize(v);
    if (!b.ok) return b;
    return b.value >= min ? b : bad(`must be at least ${min === 1024 ? "1KiB" : `${min} bytes`} (smaller rejects nearly every request)`);
  };
}

/** "32MiB", "512KiB", "1MB", or an integer number of bytes. */
export const byteSize: Check<number> = (v) => {
  if (typeof v === "number" && Number.isInteger(v) && v > 0) return ok(v);
  const m = typeof v === "string" ? /^(\d+(?:\.\d+)?)\s*(B|KB|KiB|MB|MiB|GB|GiB)?$/.exec(v.trim()) : null;
  if (!m) return bad("must be a size like \"32MiB\", \"512KiB\" or a number of bytes");
  const mult = { B: 1, KB: 1e3, KiB: 1024, MB: 1e6, MiB: 1 << 20, GB: 1e9, GiB: 1 << 30 }[(m[2] ?? "B") as "B"];
  return ok(Math.round(Number(m[1]) * mult));
};

/** Milliseconds in the config's own duration syntax: 30000 → "30s". */
export function formatMs(n: number): string {
  return n % 3_600_000 === 0 && n > 0 ? `${n / 3_600_000}h` : n % 60_000 === 0 && n > 0 ? `${n / 60_000}m` : n % 1000 === 0 && n > 0 ? `${n / 1000}s` : `${n}ms`;
}

/** Keys a reload cannot apply: they keep their old values until a restart. */
export function needsRestart(key: string): boolean {
  return key === "server.listen" || key === "server.admin_listen" || key === "server.log_format" || key === "cluster" || key.startsWith("cluster.");
}

/**
 * What differs between two configs, by the keys a user writes in router.toml: dotted full
 * names (`routing.first_byte_timeout`, `routing.cache_aware.balance_abs`), replicas by name
 * (`replica[gpu1].url`; a replica added or removed is `replica[gpu2]`). Values are not
 * named: a key may be a secret.
 */
export function changedKeys(before: Config, after: Config): string[] {
  const changed: string[] = [];
  // The Config's own unit suffixes (first_byte_timeout_ms, max_body_bytes) are not the file's.
  const fileKey = (k: string) => k.replace(/_(ms|bytes)$/, "");
  const walk = (path: string, a: unknown, b: unknown): void => {
    const table = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
    if (table(a) && table(b) && !("host" in a && "port" in a)) {
      for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) walk(`${path}.${fileKey(k)}`, a[k], b[k]);
    } else if (JSON.stringify(a) !== JSON.stringify(b)) {
      changed.push(path);
    }
  };
  for (const section of ["server", "routing", "health", "cluster"] as const) {
    const a = before[section];
    const b = after[section];
    if ((a === undefined) !== (b === undefined)) changed.push(section);
    else walk(section, a, b);
  }
  const named = (c: Config) => new Map(c.replicas.map((r) => [r.name, r]));
  const [a, b] = [named(before), named(after)];
  for (const name of new Set([...a.keys(), ...b.keys()])) {
    const [x, y] = [a.get(name), b.get(name)];
    if (!x || !y) changed.push(`replica[${name}]`);
    else walk(`replica[${name}]`, { ...x, name: undefined }, { ...y, name: undefined });
  }
  return changed;
}

/** The resolved config as TOML-ish text for `llmroute check`, with secrets masked. */
export function describeConfig(config: Config): string {
  const listen = (l: Listen) => `${l.host.includes(":") ? `[${l.host}]` : l.host}:${l.port}`;
  const ms = formatMs;
  const out = [
    `# resolved from ${config.file}`,
    "[server]",
    `listen = "${listen(config.server.listen)}"`,
    ...(config.server.admin_listen ? [`admin_listen = "${listen(config.server.admin_listen)}"`] : []),
    `max_body = ${config.server.max_body_bytes}  # bytes`,
    `api_keys = []  # ${config.server.api_keys.length} key(s) set, values hidden`,
    `log_format = "${config.server.log_format}"`,
    `drain_timeout = "${ms(config.server.drain_timeout_ms)}"`,
    "",
    "[routing]",
    `policy = "${config.routing.policy}"`,
    `max_inflight = ${config.routing.max_inflight}`,
    `max_attempts = ${config.routing.max_attempts}`,
    `chunk_chars = ${config.routing.chunk_chars}`,
    `index_max_entries = ${config.routing.index_max_entries}`,
    `index_ttl = "${ms(config.routing.index_ttl_ms)}"`,
    ...(config.routing.state_file ? [`state_file = "${config.routing.state_file}"`] : []),
    `capacity_window = "${ms(config.routing.capacity_window_ms)}"`,
    `connect_timeout = "${ms(config.routing.connect_timeout_ms)}"`,
    `first_byte_timeout = "${ms(config.routing.first_byte_timeout_ms)}"`,
    `stream_idle_timeout = "${ms(config.routing.stream_idle_timeout_ms)}"`,
    `state_interval = "${ms(config.routing.state_interval_ms)}"`,
    `cache_aware = { min_match_ratio = ${config.routing.cache_aware.min_match_ratio}, balance_abs = ${config.routing.cache_aware.balance_abs}, balance_rel = ${config.routing.cache_aware.balance_rel} }`,
    "",
    "[health]",
    `interval = "${ms(config.health.interval_ms)}"`,
    `path = "${config.health.path}"`,
    `timeout = "${ms(config.health.timeout_ms)}"`,
    `failures = ${config.health.failures}`,
    ...(config.cluster
      ? ["", "[cluster]", `redis = "<set, hidden>"`, `name = "${config.cluster.name}"`, `catch_up_timeout = "${ms(config.cluster.catch_up_timeout_ms)}"`, `namespace = "${config.cluster.namespace}"`, `snapshot_interval = "${ms(config.cluster.snapshot_interval_ms)}"`]
      : []),
  ];
  for (const r of config.replicas) {
    out.push(
      "",
      "[[replica]]",
      `name = "${r.name}"`,
      `url = "${shownUrl(r.url)}"`,
      `kv_tokens = ${r.kv_tokens}`,
      `models = ${r.models.length ? JSON.stringify(r.models) : "[]  # discovered from /v1/models"}`,
      ...(r.api_key ? ["api_key = \"<set, hidden>\""] : []),
      `metrics = ${r.metrics === false ? "false  # never scraped" : `"${r.metrics}"  # scraped wherever it answers`}`,
      ...(r.health_path ? [`health_path = "${r.health_path}"`] : []),
    );
  }
  return out.join("\n");
}
