/**
 * `llmroute check --probe`: what each replica's engine is and what the router cannot see
 * there, with the flag that would show it — the same discovery the router runs at start,
 * plus one question only a request answers: do its responses carry cached tokens?
 */
import { askResident, discoverEngine, missingFacts, residentCapacity, type Discovery, type EngineFacts, type FetchLike, type MissingFact } from "./discover.ts";
import { profileOf } from "./index.ts";

export interface ReplicaTarget {
  name: string;
  url: string;
  headers: Record<string, string>;
  metricsPath: string | false;
  kvTokens: number;
  /** The model to ask with (router.toml's first, else the first /v1/models lists). */
  model?: string;
  /** Where the router checks its health: the replica's health_path (`own`), else health.path. */
  health: { path: string; own: boolean };
}

export interface EngineReport {
  name: string;
  url: string;
  reachable: boolean;
  error?: string;
  facts?: EngineFacts;
  models?: string[];
  /** Where its health will be checked, and how that path answered. */
  health?: { path: string; detail: string };
  /** The cached-tokens question: asked, and what the answer showed. */
  cachedTokens?: { asked: boolean; field?: "usage" | "timings"; value?: number; detail: string };
  missing: MissingFact[];
}

/** A prompt of ~256 tokens (whole blocks on every engine that uses 16), sent twice: the second must hit. */
function probePrompt(): string {
  const salt = `llmroute check ${crypto.randomUUID()}`;
  return `${salt}\n${"The quick brown fox jumps over the lazy dog. ".repeat(28)}`;
}

async function ask(fetchFn: FetchLike, t: ReplicaTarget, model: string, content: string, timeoutMs: number): Promise<{ usage?: Record<string, any>; timings?: Record<string, any> } | string> {
  try {
    const res = await fetchFn(`${t.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...t.headers, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content }], max_tokens: 1, temperature: 0 }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    if (!res.ok) return `HTTP ${res.status}: ${text.slice(0, 200)}`;
    return JSON.parse(text) as { usage?: Record<string, any>; timings?: Record<string, any> };
  } catch (error) {
    return (error as Error).message;
  }
}

/** Discover one replica, and (with `probe`) ask twice to see whether cached tokens come back. */
export async function reportEngine(t: ReplicaTarget, fetchFn: FetchLike, timeoutMs: number, probe: boolean): Promise<EngineReport> {
  let found: Discovery;
  try {
    const health = await fetchFn(`${t.url}/v1/models`, { headers: t.headers, signal: AbortSignal.timeout(timeoutMs) });
    await health.body?.cancel();
  } catch (error) {
    return { name: t.name, url: t.url, reachable: false, error: (error as Error).message, missing: [] };
  }
  found = await discoverEngine({ url: t.url, headers: t.headers, metricsPath: t.metricsPath }, fetchFn, timeoutMs);
  const facts: EngineFacts = { ...found.facts };
  const models = found.cards?.map((c) => c.id);
  const report: EngineReport = { name: t.name, url: t.url, reachable: true, facts, ...(models ? { models } : {}), missing: [] };
  report.health = await healthOf(fetchFn, t, facts, timeoutMs);
  const model = t.model ?? models?.[0];
  if (probe && model) {
    const prompt = probePrompt();
    const first = await ask(fetchFn, t, model, prompt, timeoutMs);
    const second = typeof first === "string" ? first : await ask(fetchFn, t, model, prompt, timeoutMs);
    if (typeof second === "string") {
      report.cachedTokens = { asked: true, detail: `could not ask: ${second}` };
    } else {
      const cached = second.usage?.prompt_tokens_details?.cached_tokens;
      const cacheN = second.timings?.cache_n;
      if (typeof cached === "number") {
        facts.cachedTokensSeen = true;
        report.cachedTokens = { asked: true, field: "usage", value: cached, detail: `usage.prompt_tokens_details.cached_tokens = ${cached} on a repeated ${second.usage?.prompt_tokens ?? "?"}-token prompt` };
      } else if (typeof cacheN === "number") {
        facts.cachedTokensSeen = true;
        report.cachedTokens = { asked: true, field: "timings", value: cacheN, detail: `timings.cache_n = ${cacheN} on a repeated prompt` };
      } else {
        const zero = facts.family ? profileOf(facts.family).usage.zeroOmitted : false;
        report.cachedTokens = {
          asked: true,
          detail: `no cached tokens on a repeated prompt${zero ? " (the engine omits a zero: its cache may also have missed)" : ""}`,
        };
      }
    }
  } else if (probe) {
    report.cachedTokens = { asked: false, detail: "not asked: no model listed (set models in router.toml)" };
  }
  // Ollama says a model's context only once a request has loaded it: the probe's did.
  const resident = facts.family ? profileOf(facts.family).resident : undefined;
  if (probe && resident && !facts.capacity) {
    const capacity = residentCapacity((await askResident(fetchFn, t.url, t.headers, timeoutMs, resident))?.models, resident.path);
    if (capacity) facts.capacity = capacity;
  }
  report.missing = missingFacts(facts, { kvTokens: t.kvTokens });
  if (!probe) report.missing = report.missing.filter((m) => !m.what.startsWith("no per-request cached tokens seen"));
  return report;
}

/** How the path the router will check answers; a 404 there is what `serve` answers for it too. */
async function healthOf(fetchFn: FetchLike, t: ReplicaTarget, facts: EngineFacts, timeoutMs: number): Promise<EngineReport["health"]> {
  const get = async (path: string) => {
    try {
      const res = await fetchFn(`${t.url}${path}`, { headers: t.headers, signal: AbortSignal.timeout(timeoutMs) });
      await res.body?.cancel();
      return `HTTP ${res.status}`;
    } catch (error) {
      return (error as Error).message;
    }
  };
  const answer = await get(t.health.path);
  if (answer === "HTTP 200") return { path: t.health.path, detail: "HTTP 200" };
  const own = facts.family ? profileOf(facts.family).healthPath : undefined;
  if (answer === "HTTP 404" && !t.health.own && own && own !== t.health.path) {
    return { path: own, detail: `${await get(own)} (${t.health.path} answered 404: ${profileOf(facts.family!).label} has none, so the router checks ${own})` };
  }
  const fix = answer === "HTTP 404" ? " (health_path sets the path)" : "";
  return { path: t.health.path, detail: `${answer}: the router keeps this replica down until it answers 200${fix}` };
}

/** The report as lines a person reads. */
export function renderEngineReport(r: EngineReport): string[] {
  const out = [`${r.name}  ${r.url}`];
  if (!r.reachable) return [...out, `  unreachable: ${r.error}`];
  const f = r.facts!;
  const family = f.family ? `${profileOf(f.family).label}${f.version ? ` ${f.version}` : ""} (from ${f.familyFrom})` : "not recognised";
  out.push(`  engine     ${family}`);
  if (r.models) out.push(`  models     ${r.models.join(", ") || "(none listed)"}`);
  if (r.health) out.push(`  health     ${r.health.path}: ${r.health.detail}`);
  const cap = f.capacity;
  const int = (n: number) => Math.round(n).toLocaleString("en-US");
  // llama.cpp's /props shows each slot's n_ctx: the slots share one pool of it when the KV is
  // unified (llama-server's default without --parallel), and /props does not say which.
  const perSlot = cap?.slots ? cap.kvTokens / cap.slots : 0;
  const slots = cap?.slots ? `, ${cap.slots} slots of ${int(perSlot)}${cap.slots > 1 ? ` (or one KV of ${int(perSlot)} they share, if unified: llama-server's default without --parallel)` : ""}` : "";
  const cut = f.family ? profileOf(f.family).cutsLongPrompts : undefined;
  const perRequest = cap && cut ? `: one request's context; a longer chat is cut (${cut.fix})` : "";
  out.push(`  KV         ${cap ? `${int(cap.kvTokens)} tokens (${cap.source})${slots}${cap.blockTokens ? `, blocks of ${cap.blockTokens}` : ""}${perRequest}` : "not published"}`);
  out.push(`  metrics    ${f.metrics.state === "ok" ? `${f.metrics.path}${f.cacheCounters ? " (cache counters: yes)" : " (cache counters: no)"}` : f.metrics.state === "off" ? "off (metrics = false)" : `none at ${f.metrics.path} (${f.metrics.reason})`}`);
  if (r.cachedTokens) out.push(`  cached     ${r.cachedTokens.detail}`);
  for (const m of r.missing) out.push(`  missing    ${m.what}\n             → ${m.fix}`);
  return out;
}
