/**
 * What a person watching the router wants and counters cannot give: the last requests,
 * and figures over the last few minutes — the cache hit rate, routes by reason, TTFT
 * percentiles per replica. Recording costs O(1) per request and allocates nothing (a slot
 * in a ring, a sum in a time bucket, a sample in a per-replica ring); everything else is
 * computed only when someone asks (a dashboard poll), so nobody watching costs nothing
 * more. The clock comes in as an argument.
 */
import { quantile } from "../bench/stats.ts";
import type { RequestRecord } from "../proxy/proxy.ts";

/**
 * A finished request, with the router's hit estimates when the proxy supplies them:
 * `availableTokens` (cached on some replica) and `capturedTokens` (cached on the chosen one).
 */
export type RecentRecord = RequestRecord & { availableTokens?: number; capturedTokens?: number };

export interface RecentOptions {
  /** Requests kept for the "last requests" list. */
  keep: number;
  /** Width of one time bucket (hit rate, routes). */
  bucketMs: number;
  /** How far back the windowed figures look; a multiple of bucketMs. */
  windowMs: number;
  /** TTFT samples kept per replica (the percentiles use those inside the window). */
  ttftSamples: number;
}

export const RECENT_DEFAULTS: RecentOptions = { keep: 30, bucketMs: 10_000, windowMs: 300_000, ttftSamples: 256 };

/** A model name is the client's string: bounded before it is shown. */
const MAX_MODEL_CHARS = 120;

interface Bucket {
  start: number;
  requests: number;
  promptTokens: number;
  cachedTokens: number;
  /** Requests (with prompt tokens) that carried the router's estimates, and their sums. */
  estimated: number;
  estimatedPromptTokens: number;
  availableTokens: number;
  capturedTokens: number;
  routes: Map<string, number>;
}

interface Samples {
  at: Float64Array;
  ms: Float64Array;
  next: number;
}

export interface RecentRequest {
  /** ms since the epoch when the request finished. */
  at: number;
  endpoint: string;
  model: string | null;
  replica: string | null;
  route: string | null;
  status: number;
  outcome: RequestRecord["outcome"];
  stream: boolean;
  prompt_tokens: number | null;
  cached_tokens: number | null;
  ttft_ms: number | null;
  total_ms: number;
}

export interface RecentSnapshot {
  window_s: number;
  bucket_s: number;
  /** Requests finished inside the window. */
  requests: number;
  hits: {
    prompt_tokens: number;
    cached_tokens: number;
    /** cached_tokens / prompt_tokens as the engines reported them; null without traffic. */
    delivered: number | null;
    /** Shares of the prompt tokens of the requests that carried the router's estimates; null when none did. */
    available: number | null;
    captured: number | null;
    estimated_requests: number;
  };
  /** One entry per bucket, oldest first, the current (partial) bucket last. */
  series: { start: number; requests: number; prompt_tokens: number; cached_tokens: number }[];
  /** Route reasons inside the window (as in x-llmroute-route; "rejected"/"no_replica" when none), most frequent first. */
  routes: { route: string; requests: number }[];
  /** Streamed requests' time to first byte inside the window, per replica. */
  ttft: { replica: string; n: number; p50_ms: number; p90_ms: number }[];
  /** Newest first. Never prompt text or keys: the record carries neither. */
  last: RecentRequest[];
}

export class RecentRequests {
  readonly options: RecentOptions;
  private readonly last: (RecentRecord | undefined)[];
  private readonly lastAt: Float64Array;
  private lastNext = 0;
  private readonly buckets: Bucket[];
  private readonly ttft = new Map<string, Samples>();

  constructor(options: Partial<RecentOptions> = {}) {
    this.options = { ...RECENT_DEFAULTS, ...options };
    const { keep, bucketMs, windowMs } = this.options;
    this.last = new Array(keep).fill(undefined);
    this.lastAt = new Float64Array(keep);
    this.buckets = Array.from({ length: Math.max(1, Math.ceil(windowMs / bucketMs)) }, () => emptyBucket(-1));
  }

  record(rec: RecentRecord, now: number): void {
    const slot = this.lastNext;
    this.last[slot] = rec;
    this.lastAt[slot] = now;
    this.lastNext = (slot + 1) % this.last.length;

    const b = this.bucketAt(now);
    b.requests++;
    const route = rec.route ?? rec.outcome;
    b.routes.set(route, (b.routes.get(route) ?? 0) + 1);
    const prompt = rec.promptTokens ?? 0;
    if (prompt > 0) {
      b.promptTokens += prompt;
      b.cachedTokens += rec.cachedTokens ?? 0;
      if (rec.availableTokens !== undefined || rec.capturedTokens !== undefined) {
        b.estimated++;
        b.estimatedPromptTokens += prompt;
        b.availableTokens += rec.availableTokens ?? 0;
        b.capturedTokens += rec.capturedTokens ?? 0;
      }
    }

    if (rec.replica && rec.ttftMs !== undefined) {
      let s = this.ttft.get(rec.replica);
      if (!s) this.ttft.set(rec.replica, (s = { at: new Float64Array(this.options.ttftSamples).fill(-Infinity), ms: new Float64Array(this.options.ttftSamples), next: 0 }));
      s.at[s.next] = now;
      s.ms[s.next] = rec.ttftMs;
      s.next = (s.next + 1) % s.at.length;
    }
  }

  snapshot(now: number): RecentSnapshot {
    const { bucketMs, windowMs } = this.options;
    const current = Math.floor(now / bucketMs) * bucketMs;
    const first = current - (this.buckets.length - 1) * bucketMs;
    const series: RecentSnapshot["series"] = [];
    const routes = new Map<string, number>();
    let requests = 0;
    let prompt = 0;
    let cached = 0;
    let estimated = 0;
    let estimatedPrompt = 0;
    let available = 0;
    let captured = 0;
    for (let start = first; start <= current; start += bucketMs) {
      const b = this.buckets[this.slotOf(start)]!;
      if (b.start !== start) {
        series.push({ start, requests: 0, prompt_tokens: 0, cached_tokens: 0 });
        continue;
      }
      series.push({ start, requests: b.requests, prompt_tokens: b.promptTokens, cached_tokens: b.cachedTokens });
      requests += b.requests;
      prompt += b.promptTokens;
      cached += b.cachedTokens;
      estimated += b.estimated;
      estimatedPrompt += b.estimatedPromptTokens;
      available += b.availableTokens;
      captured += b.capturedTokens;
      for (const [route, n] of b.routes) routes.set(route, (routes.get(route) ?? 0) + n);
    }

    const since = now - windowMs;
    const ttft: RecentSnapshot["ttft"] = [];
    for (const [replica, s] of this.ttft) {
      const values = Array.from(s.ms.filter((_, i) => s.at[i]! >= since));
      // A replica with nothing inside the window (idle, or gone from the fleet) is forgotten.
      if (values.length === 0) this.ttft.delete(replica);
      else ttft.push({ replica, n: values.length, p50_ms: round(quantile(values, 0.5)), p90_ms: round(quantile(values, 0.9)) });
    }
    ttft.sort((a, b) => a.replica.localeCompare(b.replica));

    const last: RecentRequest[] = [];
    for (let k = 1; k <= this.last.length; k++) {
      const slot = (this.lastNext - k + this.last.length) % this.last.length;
      const rec = this.last[slot];
      if (!rec) break;
      last.push(view(rec, this.lastAt[slot]!));
    }

    const share = (part: number, whole: number) => (whole > 0 ? Math.round((part / whole) * 1000) / 1000 : null);
    return {
      window_s: windowMs / 1000,
      bucket_s: bucketMs / 1000,
      requests,
      hits: {
        prompt_tokens: prompt,
        cached_tokens: cached,
        delivered: share(cached, prompt),
        available: share(available, estimatedPrompt),
        captured: share(captured, estimatedPrompt),
        estimated_requests: estimated,
      },
      series,
      routes: [...routes].map(([route, n]) => ({ route, requests: n })).sort((a, b) => b.requests - a.requests || a.route.localeCompare(b.route)),
      ttft,
      last,
    };
  }

  private slotOf(start: number): number {
    return Math.floor(start / this.options.bucketMs) % this.buckets.length;
  }

  /** The bucket for `now`, emptied first if it last held an older interval. */
  private bucketAt(now: number): Bucket {
    const start = Math.floor(now / this.options.bucketMs) * this.options.bucketMs;
    const b = this.buckets[this.slotOf(start)]!;
    if (b.start !== start) {
      b.start = start;
      b.requests = b.promptTokens = b.cachedTokens = 0;
      b.estimated = b.estimatedPromptTokens = b.availableTokens = b.capturedTokens = 0;
      b.routes.clear();
    }
    return b;
  }
}

function emptyBucket(start: number): Bucket {
  return { start, requests: 0, promptTokens: 0, cachedTokens: 0, estimated: 0, estimatedPromptTokens: 0, availableTokens: 0, capturedTokens: 0, routes: new Map() };
}

function view(rec: RecentRecord, at: number): RecentRequest {
  return {
    at,
    endpoint: rec.endpoint,
    model: rec.model === undefined ? null : rec.model.slice(0, MAX_MODEL_CHARS),
    replica: rec.replica ?? null,
    route: rec.route ?? null,
    status: rec.status,
    outcome: rec.outcome,
    stream: rec.stream,
    prompt_tokens: rec.promptTokens ?? null,
    cached_tokens: rec.cachedTokens ?? null,
    ttft_ms: rec.ttftMs === undefined ? null : round(rec.ttftMs),
    total_ms: round(rec.totalMs),
  };
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
