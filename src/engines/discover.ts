/**
 * Asking a replica what it is: family, version, KV capacity and block size, which cache
 * counters it exports — from /v1/models, /metrics, the family's own endpoints (llama.cpp
 * /props, vLLM /version, SGLang /server_info, Ollama /api/version) and response headers.
 * No configuration needed; each answer is best effort with a timeout, and what could not be
 * learned is reported as missing, with the engine flag that would add it.
 *
 * `fetch` is injected; nothing here keeps state.
 */
import { detectFamily, profileOf } from "./index.ts";
import { llamacppCapacity } from "./llamacpp.ts";
import { parsePrometheus, readEngine, type EngineReading, type Sample } from "./metrics.ts";
import type { Capacity, EngineFamily, EngineProfile, PrefixCacheOff, ResidentModel } from "./profile.ts";

export interface ModelCard {
  id: string;
  object?: string;
  owned_by?: string;
  [key: string]: unknown;
}

export type FetchLike = (input: string | URL | Request, init?: RequestInit & { timeout?: number | boolean }) => Promise<Response>;

export interface DiscoverTarget {
  url: string;
  headers: Record<string, string>;
  /** Path of /metrics, or false: never scraped. */
  metricsPath: string | false;
}

/** What /metrics said, or why it could not. */
export type MetricsState =
  | { state: "ok"; path: string }
  | { state: "off" }
  | { state: "absent"; path: string; reason: string };

/** Everything learned about one replica's engine. */
export interface EngineFacts {
  family?: EngineFamily;
  /** What named the family ("/metrics (vllm:*)", "/v1/models owned_by \"llamacpp\"", …). */
  familyFrom?: string;
  version?: string;
  /** KV capacity as the engine publishes it. */
  capacity?: Capacity;
  metrics: MetricsState;
  /** The signals found and missing on /metrics (for the family's catalogue). */
  found: string[];
  missing: string[];
  /** The engine's cache counters exist (a window's hits can be read from them). */
  cacheCounters: boolean;
  /** A response of this replica has carried per-request cached tokens. */
  cachedTokensSeen: boolean;
  /** The engine says its prefix cache is off: nothing the router does can give a hit there. */
  prefixCacheOff?: PrefixCacheOff;
}

export interface Discovery {
  facts: EngineFacts;
  /** /v1/models cards, when it answered. */
  cards?: ModelCard[];
  /** The first scrape, when /metrics answered. */
  scrape?: Map<string, Sample[]>;
  /** The reading of that scrape. */
  reading?: EngineReading;
  /** What identifies the engine process now (start time metric or header), when it says. */
  startToken?: string;
  /** The models the engine holds in memory (Ollama /api/ps), when it lists them. */
  resident?: ResidentModel[];
  /** The engine's clock when it listed them (its Date header, Unix ms). */
  residentDate?: number;
}

interface Got {
  status: number;
  headers: Headers;
  text: string;
}

async function get(fetchFn: FetchLike, url: string, headers: Record<string, string>, timeoutMs: number): Promise<Got | undefined> {
  try {
    const res = await fetchFn(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
    return { status: res.status, headers: res.headers, text: await res.text() };
  } catch {
    return undefined;
  }
}

function json(got: Got | undefined): unknown {
  if (!got || got.status !== 200) return undefined;
  try {
    return JSON.parse(got.text);
  } catch {
    return undefined;
  }
}

/** A scrape of /metrics: Prometheus text with at least one sample, else why not. */
export function readMetricsAnswer(got: Got | undefined, path: string): { metrics?: Map<string, Sample[]>; state: MetricsState } {
  if (!got) return { state: { state: "absent", path, reason: "no answer" } };
  if (got.status !== 200) return { state: { state: "absent", path, reason: `HTTP ${got.status}` } };
  const metrics = parsePrometheus(got.text);
  if (metrics.size === 0) return { state: { state: "absent", path, reason: "not Prometheus text" } };
  return { metrics, state: { state: "ok", path } };
}

/** What identifies the running process: the family's start-time metric, else its start header. */
export function startTokenOf(profile: EngineProfile | undefined, metrics: Map<string, Sample[]> | undefined, headers: Headers | undefined): string | undefined {
  if (profile?.startTimeMetric && metrics?.has(profile.startTimeMetric)) {
    const v = metrics.get(profile.startTimeMetric)![0]!.value;
    if (Number.isFinite(v)) return `${profile.startTimeMetric} ${v}`;
  }
  const header = profile?.startTimeHeader ? headers?.get(profile.startTimeHeader) : undefined;
  return header ? `${profile!.startTimeHeader} ${header}` : undefined;
}

/** Ask the replica what it is. Never throws: what could not be learned is missing. */
export async function discoverEngine(target: DiscoverTarget, fetchFn: FetchLike, timeoutMs: number): Promise<Discovery> {
  const { url, headers, metricsPath } = target;
  const [modelsAnswer, metricsAnswer] = await Promise.all([
    get(fetchFn, `${url}/v1/models`, headers, timeoutMs),
    metricsPath === false ? undefined : get(fetchFn, `${url}${metricsPath}`, headers, timeoutMs),
  ]);
  const modelsBody = json(modelsAnswer) as { data?: unknown } | undefined;
  const cards = Array.isArray(modelsBody?.data) ? modelsBody.data.filter((c): c is ModelCard => !!c && typeof (c as ModelCard).id === "string") : undefined;
  const scraped = metricsPath === false ? { state: { state: "off" } as MetricsState } : readMetricsAnswer(metricsAnswer, metricsPath);
  const server = modelsAnswer?.headers.get("server") ?? metricsAnswer?.headers.get("server");

  let detected = detectFamily({
    ownedBy: cards?.map((c) => (typeof c.owned_by === "string" ? c.owned_by : "")).filter(Boolean),
    ...(scraped.metrics ? { metrics: scraped.metrics } : {}),
    server,
  });
  let versionBody: unknown;
  if (!detected) {
    // Ollama has neither /metrics nor a telling owned_by for every model: its version endpoint is.
    versionBody = json(await get(fetchFn, `${url}/api/version`, headers, timeoutMs));
    if (typeof (versionBody as { version?: unknown } | undefined)?.version === "string") detected = detectFamily({ ollamaVersion: true });
  }
  const profile = detected ? profileOf(detected.family) : undefined;
  const reading = scraped.metrics ? readEngine(scraped.metrics) : undefined;

  let capacity = scraped.metrics ? profile?.capacityFromMetrics?.(scraped.metrics) : undefined;
  let version: string | undefined;
  if (profile?.version) {
    const info = profile.family === "ollama" && versionBody !== undefined ? { body: versionBody, path: profile.version.path } : await askInfo(fetchFn, url, headers, timeoutMs, profile.version);
    const body = info.body;
    version = profile.version.read(body);
    if (profile.family === "llamacpp") capacity = llamacppCapacity(body) ?? capacity;
    // SGLang without --enable-metrics (or without sglang:page_size) still says its KV pool and
    // page size in /server_info.
    if (profile.family === "sglang") {
      const fromInfo = sglangInfoCapacity(body, info.path);
      if (!capacity) capacity = fromInfo;
      else if (capacity.blockTokens === undefined && fromInfo?.blockTokens) capacity = { ...capacity, blockTokens: fromInfo.blockTokens };
    }
  }
  // Ollama lists each loaded model's context in /api/ps (none before a request loads one).
  const resident = profile?.resident ? await askResident(fetchFn, url, headers, timeoutMs, profile.resident) : undefined;
  if (profile?.resident) capacity ??= residentCapacity(resident?.models, profile.resident.path);
  const facts: EngineFacts = {
    ...(detected ? { family: detected.family, familyFrom: detected.from } : {}),
    ...(version ? { version } : {}),
    ...(capacity ? { capacity } : {}),
    metrics: scraped.state,
    found: reading ? Object.values(reading.found) : [],
    missing: reading ? reading.missing.flatMap((s) => profile?.metrics[s]?.[0] ?? []) : [],
    cacheCounters: !!(scraped.metrics && profile?.cacheCounters(scraped.metrics)),
    cachedTokensSeen: false,
  };
  const off = scraped.metrics ? profile?.prefixCacheOff?.(scraped.metrics) : undefined;
  if (off) facts.prefixCacheOff = off;
  const startToken = startTokenOf(profile, scraped.metrics, metricsAnswer?.headers);
  return {
    facts,
    ...(cards ? { cards } : {}),
    ...(scraped.metrics ? { scrape: scraped.metrics } : {}),
    ...(reading ? { reading } : {}),
    ...(startToken ? { startToken } : {}),
    ...(resident ? { resident: resident.models } : {}),
    ...(resident?.date !== undefined ? { residentDate: resident.date } : {}),
  };
}

/**
 * The family's info endpoint (EngineProfile.version): its path, else — answered 404 there —
 * the path older versions answer on. The body (undefined when neither answered JSON) and the
 * path asked last.
 */
async function askInfo(
  fetchFn: FetchLike,
  url: string,
  headers: Record<string, string>,
  timeoutMs: number,
  endpoint: NonNullable<EngineProfile["version"]>,
): Promise<{ body: unknown; path: string }> {
  const got = await get(fetchFn, `${url}${endpoint.path}`, headers, timeoutMs);
  if (got?.status === 404 && endpoint.oldPath) return { body: json(await get(fetchFn, `${url}${endpoint.oldPath}`, headers, timeoutMs)), path: endpoint.oldPath };
  return { body: json(got), path: endpoint.path };
}

/**
 * SGLang's KV from its server info (http_server.py server_info: the scheduler's
 * max_total_num_tokens, and server_args' page_size, the radix cache's match unit).
 */
function sglangInfoCapacity(body: unknown, path: string): Capacity | undefined {
  const info = (body && typeof body === "object" ? body : {}) as { max_total_num_tokens?: unknown; page_size?: unknown };
  const tokens = Number(info.max_total_num_tokens);
  const page = Number(info.page_size);
  return tokens > 0 ? { kvTokens: tokens, blockTokens: page > 0 ? page : 1, source: path } : undefined;
}

/**
 * The models the engine holds in memory now (Ollama GET /api/ps), with the engine's clock from
 * the answer's Date header (whole seconds) to read their expiry by; undefined: no list.
 */
export async function askResident(
  fetchFn: FetchLike,
  url: string,
  headers: Record<string, string>,
  timeoutMs: number,
  resident: NonNullable<EngineProfile["resident"]>,
): Promise<{ models: ResidentModel[]; date?: number } | undefined> {
  const got = await get(fetchFn, `${url}${resident.path}`, headers, timeoutMs);
  const models = resident.read(json(got));
  if (!models) return undefined;
  const date = Date.parse(got!.headers.get("date") ?? "");
  return { models, ...(Number.isFinite(date) ? { date } : {}) };
}

/**
 * The KV of an engine that says only each loaded model's context (Ollama /api/ps
 * context_length): one request's context, times OLLAMA_NUM_PARALLEL (1 by default), which no
 * endpoint tells — so one request's.
 */
export function residentCapacity(models: ResidentModel[] | undefined, path: string): Capacity | undefined {
  const context = Math.max(0, ...(models ?? []).map((m) => m.contextLength ?? 0));
  return context > 0 ? { kvTokens: context, blockTokens: 1, source: `${path} context_length` } : undefined;
}

/** One thing the router cannot see on a replica, and what would let it. */
export interface MissingFact {
  what: string;
  fix: string;
}

/**
 * What is missing, per replica, with the engine flag (or config key) that would add it —
 * what `llmroute check --probe` and `/status` print.
 */
export function missingFacts(facts: EngineFacts, configured: { kvTokens: number }): MissingFact[] {
  const out: MissingFact[] = [];
  const profile = facts.family ? profileOf(facts.family) : undefined;
  if (facts.prefixCacheOff) {
    out.push({ what: `prefix caching is off (${facts.prefixCacheOff.evidence}): no request can hit this replica's cache, whatever the router does`, fix: facts.prefixCacheOff.fix });
  }
  if (!profile) {
    out.push({
      what: "engine family not recognised (no vllm:/sglang:/llamacpp: metrics, no known owned_by, no /api/version)",
      fix: "the router treats it as a generic OpenAI-compatible engine; turn its /metrics on if it has one",
    });
  }
  if (facts.metrics.state === "absent" && profile?.family !== "ollama") {
    out.push({
      what: `no engine metrics at ${facts.metrics.path} (${facts.metrics.reason}): no load, cache counters or restart signal`,
      fix: profile?.metricsFlag ? `start ${profile.label} with ${profile.metricsFlag}` : "check the replica's `metrics` path in router.toml",
    });
  }
  if (profile && !facts.cachedTokensSeen) {
    if (profile.usage.cached === "flag") {
      out.push({
        what: "no per-request cached tokens seen yet",
        fix: `start ${profile.label} with ${profile.usage.flag}${facts.cacheCounters ? " (meanwhile the router reads its cache counters per window)" : ""}`,
      });
    } else if (profile.usage.cached === "never") {
      out.push({ what: `${profile.label} reports no cached tokens`, fix: "none: the router relies on its own index and the time to first token" });
    }
  }
  // A context Ollama lists is one request's, and its RAM prompt cache holds more: no bound.
  const perRequest = facts.capacity && profile?.ramPromptCache && !facts.capacity.slots ? facts.capacity : undefined;
  if (perRequest && !(configured.kvTokens > 0)) {
    out.push({
      what: `KV capacity unknown: ${perRequest.source} gives one request's context (${perRequest.kvTokens.toLocaleString("en-US")}), no bound on the card's KV`,
      fix: "set kv_tokens in router.toml for capacity warnings",
    });
  }
  if (!facts.capacity && !(configured.kvTokens > 0)) {
    out.push({
      what: "KV capacity unknown: the index's view of the card is bounded only by the evidence of misses",
      fix:
        profile?.family === "sglang"
          ? `start SGLang with --enable-metrics, or set kv_tokens`
          : profile?.resident
            ? `${profile.label} lists a model's context in ${profile.resident.path} once a request has loaded it (the router reads it then); or set kv_tokens`
            : "set kv_tokens in router.toml",
    });
  }
  return out;
}
