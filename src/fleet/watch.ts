/**
 * Engine watching: the active health check, what the engine is (discovery), its /metrics
 * (load, cache counters, prefill counters, restart signals) and the models it holds in memory
 * (Ollama /api/ps). What it learns goes to the replica; what it says of health goes to Health.
 * No timers here; the caller owns the schedule.
 */
import { DEFAULT_METRICS_PATH, type ReplicaConfig } from "../config.ts";
import type { Log } from "../log.ts";
import { askResident, discoverEngine, readMetricsAnswer, residentCapacity, startTokenOf, type FetchLike } from "../engines/discover.ts";
import { profileOf } from "../engines/index.ts";
import { readEngine, total, type Sample } from "../engines/metrics.ts";
import type { CacheCounters, EngineProfile, ResidentModel } from "../engines/profile.ts";
import type { Endpoint } from "../route/shape.ts";
import { describeFetchError } from "./failure.ts";
import type { Health } from "./health.ts";
import { configCard, type Replica } from "./replica.ts";
import type { LookAsked } from "./residency.ts";

/** The engine signals the router uses for load (others are the probe's business). */
const LOAD_SIGNALS = ["running", "waiting", "kv_usage"] as const;

/** The endpoints that send a prompt for a model to generate from (an embedding input is not cut the same way). */
const GENERATING = new Set<Endpoint>(["chat", "completions", "responses", "messages"]);

/** What watching remembers of a replica's engine between two looks. */
export class WatchState {
  /** Discover the engine again at the next passing check. */
  rediscover = true;
  /** The engine's own liveness path, learnt when the configured one answered 404 (Ollama's /api/version). */
  healthPath?: string;
  /** What identifies the engine's process (start-time metric or header): a change is a restart. */
  startToken?: string;
  /** The engine's cache counters at the last scrape (a window's delta is read from two). */
  counters?: CacheCounters;
  /** Prompt tokens and seconds the engine reported prefilling at the last scrape (llama.cpp). */
  prefillCounters?: { tokens: number; seconds: number };
}

export interface WatchOptions {
  fetch: FetchLike;
  log: Log;
  /** Read at each check, so a reload applies (health.path, health.timeout). */
  settings: () => { healthPath: string; healthTimeoutMs: number };
  /** Times shared with people and peers (a resident look's time, send times). */
  wallClock: () => number;
  health: Health;
  /** The engine's cache counters moved by this much since the last scrape (a window to compare with the index). */
  onCounters?: (replica: Replica, delta: { hits: number; queries: number }) => void;
}

export class EngineWatcher {
  constructor(private readonly options: WatchOptions) {}

  private get timeoutMs(): number {
    return this.options.settings().healthTimeoutMs;
  }

  /** Where `replica`'s health is checked: its own health_path, else the engine's (learnt), else health.path. */
  healthPathOf(replica: Replica): string {
    return replica.config.health_path ?? replica.watch.healthPath ?? this.options.settings().healthPath;
  }

  /** Check every replica (or only those currently down) once, in parallel. */
  async checkAll(replicas: readonly Replica[], onlyDown = false): Promise<void> {
    await Promise.all(replicas.filter((r) => !onlyDown || r.state === "down").map((r) => this.check(r)));
  }

  async check(replica: Replica, learn = true): Promise<void> {
    const path = this.healthPathOf(replica);
    let failure: string | undefined;
    let refused = false;
    try {
      const res = await this.options.fetch(`${replica.config.url}${path}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      await res.body?.cancel();
      // No such route: no verdict before the engine says what it is (once, no loop).
      if (res.status === 404 && learn && replica.config.health_path === undefined && (await this.learnHealthPath(replica, path))) return this.check(replica, false);
      if (res.status !== 200) failure = `health check: HTTP ${res.status} at ${path}`;
    } catch (error) {
      const reason = describeFetchError(error);
      refused = reason === "connection refused";
      failure = `health check: ${reason}`;
    }
    if (failure) return this.options.health.checkFailed(replica, failure, refused);
    if (replica.watch.rediscover) await this.discover(replica);
    else {
      if (replica.facts?.metrics.state === "ok") await this.scrape(replica);
      if (replica.profile?.resident) await this.readResident(replica, replica.profile.resident);
    }
    this.options.health.checkPassed(replica);
  }

  /**
   * `tried` answered 404 and the replica has no health_path of its own: ask the engine what it
   * is (again: another may have replaced it behind the URL) and check it where its family
   * answers (Ollama: /api/version), or at health.path when its family has no path of its own.
   * True when there is another path to check now.
   */
  private async learnHealthPath(replica: Replica, tried: string): Promise<boolean> {
    // Checks of one replica may overlap (the interval's, a down replica's re-check, a reload's).
    if (this.healthPathOf(replica) !== tried) return true;
    await this.discover(replica);
    if (this.healthPathOf(replica) !== tried) return true;
    const own = replica.profile?.healthPath;
    if (own === replica.watch.healthPath) {
      // Nothing new: a failure; the engine is asked again at its first passing check.
      replica.watch.rediscover = true;
      return false;
    }
    replica.watch.healthPath = own;
    this.options.log.info("health checked where the engine answers", {
      replica: replica.name,
      family: replica.facts?.family ?? "unknown",
      path: this.healthPathOf(replica),
      reason: `${tried} answered 404`,
    });
    return true;
  }

  /**
   * Ask the engine what it is (family, version, capacity, counters, models): at its first
   * passing check, after a restart and after a reload. Its first scrape is read as any other.
   */
  async discover(replica: Replica): Promise<void> {
    // Discovery lists an Ollama's loaded models too: a look, as at a check.
    const look = this.residentLook(replica);
    const found = await discoverEngine(
      { url: replica.config.url, headers: authHeaders(replica.config), metricsPath: replica.config.metrics ?? DEFAULT_METRICS_PATH },
      this.options.fetch,
      this.timeoutMs,
    );
    replica.watch.rediscover = false;
    if (found.cards && replica.config.models.length > 0) {
      // The configured list decides what it serves; the engine's own card (vLLM's
      // max_model_len, root …) is what clients should see for the models it lists.
      replica.cards = replica.config.models.map((id) => found.cards!.find((c) => c.id === id) ?? configCard(id));
    } else if (found.cards) {
      replica.cards = found.cards;
      replica.discovered = true;
    }
    const before = replica.facts;
    replica.facts = { ...found.facts, cachedTokensSeen: before?.cachedTokensSeen ?? false };
    if (!before || before.family !== found.facts.family || before.capacity?.kvTokens !== found.facts.capacity?.kvTokens) {
      this.options.log.info("engine discovered", {
        replica: replica.name,
        family: found.facts.family ?? "unknown",
        from: found.facts.familyFrom,
        version: found.facts.version,
        kv_tokens: found.facts.capacity?.kvTokens,
        kv_from: found.facts.capacity?.source,
        slots: found.facts.capacity?.slots,
        block_tokens: found.facts.capacity?.blockTokens,
        metrics: found.facts.metrics.state === "ok" ? found.facts.metrics.path : found.facts.metrics.state,
      });
    }
    if (found.facts.prefixCacheOff && !before?.prefixCacheOff) this.options.log.warn("replica's prefix cache is off: no request can hit it", { replica: replica.name, evidence: found.facts.prefixCacheOff.evidence, fix: found.facts.prefixCacheOff.fix });
    if (found.resident) this.takeResident(replica, look, { models: found.resident, ...(found.residentDate !== undefined ? { date: found.residentDate } : {}) });
    if (found.scrape) this.absorb(replica, found.scrape, found.startToken);
    else {
      replica.engine = undefined;
      replica.engineWaiting = 0;
      replica.watch.startToken = found.startToken ?? replica.watch.startToken;
    }
  }

  /**
   * A request of about `tokens` prompt tokens for `model` goes to `replica` now. Longer than
   * the context its engine cuts prompts to (Ollama's num_ctx for that model, from /api/ps),
   * it is counted and said once per replica: no routing makes a cut prompt's cache hit (5 %
   * of slack for the router's estimate). True when the engine may have cut it (from 80 % of
   * the context): its usage then counts what was kept, which must not teach the router the
   * engine's tokenisation.
   */
  promptSent(replica: Replica, request: { tokens: number; model: string | undefined; endpoint: Endpoint }): boolean {
    // Kept only where loaded models are read (Ollama, which refuses unknown names with a 404).
    if (!replica.profile?.resident) return false;
    replica.residency.sent(request.model, this.options.wallClock());
    const cut = replica.profile.cutsLongPrompts;
    if (!cut || request.model === undefined || !GENERATING.has(request.endpoint)) return false;
    const context = replica.residency.contextOf(request.model, (requested, listed) => replica.reaches(requested, listed));
    if (!context || request.tokens < 0.8 * context) return false;
    if (request.tokens <= 1.05 * context || replica.stats.overContext++ > 0) return true;
    this.options.log.warn(`prompt longer than ${replica.name}'s context: ${cut.fix}`, {
      replica: replica.name,
      model: request.model,
      prompt_tokens: Math.round(request.tokens),
      context_tokens: context,
      context_from: `${replica.profile.resident.path} context_length`,
      detail: cut.how,
    });
    return true;
  }

  /** Ask the engine which models it holds in memory (Ollama /api/ps); no answer changes nothing. */
  private async readResident(replica: Replica, resident: NonNullable<EngineProfile["resident"]>): Promise<void> {
    const look = this.residentLook(replica);
    this.takeResident(replica, look, await askResident(this.options.fetch, replica.config.url, authHeaders(replica.config), this.timeoutMs, resident));
  }

  /** What a look at the loaded models compares with, taken before it is asked. */
  private residentLook(replica: Replica): LookAsked {
    return replica.residency.ask(this.options.wallClock(), replica.inflight === 0);
  }

  /** One answered look: the engine's clock, as its Date header says, onto this router's; the largest context listed is the replica's published KV; an unload loses the cache. */
  private takeResident(replica: Replica, look: LookAsked, answer: { models: ResidentModel[]; date?: number } | undefined): void {
    if (!answer || !replica.residency.accept(look)) return;
    const offset = answer.date === undefined ? 0 : look.at - answer.date;
    const unloaded = replica.residency.absorb(answer.models, { ...look, offset }, (requested, listed) => replica.reaches(requested, listed));
    const path = replica.profile?.resident?.path ?? "/api/ps";
    const capacity = residentCapacity(answer.models, path);
    if (replica.facts && capacity && (!replica.facts.capacity || (replica.facts.capacity.source === capacity.source && replica.facts.capacity.kvTokens !== capacity.kvTokens))) {
      replica.facts = { ...replica.facts, capacity };
      this.options.log.info("engine capacity learnt", { replica: replica.name, kv_tokens: capacity.kvTokens, kv_from: capacity.source });
    }
    if (!unloaded) return;
    const label = replica.profile?.label ?? "the engine";
    const reason =
      "gone" in unloaded
        ? `${label} unloaded ${unloaded.gone.join(", ")}: ${path} lists it no more (idle past its keep_alive, or its memory went to another model), and its KV went with it`
        : `${label} unloaded and loaded again ${unloaded.reloaded}: its keep_alive ran out at ${new Date(unloaded.expiredAt).toISOString()} with no request of this router running there (${path})`;
    this.options.health.loseCache(replica, reason, false);
  }

  /** Read the engine's /metrics: load, cache counters, prefill counters, restart signals. A missing name is reported, never guessed. */
  async scrape(replica: Replica): Promise<void> {
    const path = replica.config.metrics ?? DEFAULT_METRICS_PATH;
    if (path === false) return;
    const at = this.options.wallClock();
    let answer: { status: number; headers: Headers; text: string } | undefined;
    try {
      const res = await this.options.fetch(`${replica.config.url}${path}`, {
        headers: authHeaders(replica.config),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      answer = { status: res.status, headers: res.headers, text: await res.text() };
    } catch (error) {
      replica.engine = { values: {}, found: {}, missing: [], at, error: describeFetchError(error) };
      replica.engineWaiting = 0;
      return;
    }
    const read = readMetricsAnswer(answer, path);
    if (!read.metrics) {
      replica.engine = { values: {}, found: {}, missing: [], at, error: read.state.state === "absent" ? read.state.reason : "no metrics" };
      replica.engineWaiting = 0;
      return;
    }
    this.absorb(replica, read.metrics, startTokenOf(replica.profile, read.metrics, answer.headers));
  }

  /**
   * One scrape: a restart (a new start token, or counters that went back: a counter only grows
   * while its process lives) loses the cache; otherwise the window's cache counters go to the
   * feedback, and the engine's prefill counters (llama.cpp) give the measured prefill rate.
   */
  private absorb(replica: Replica, metrics: Map<string, Sample[]>, startToken: string | undefined): void {
    const at = this.options.wallClock();
    const watch = replica.watch;
    replica.engine = { ...readEngine(metrics, LOAD_SIGNALS), at };
    replica.engineWaiting = replica.engine.values.waiting ?? 0;
    if (!replica.engine.family) replica.engine.error = "no vLLM, SGLang or llama.cpp metric names found";
    const profile = replica.profile ?? (replica.engine.family ? profileOf(replica.engine.family) : undefined);
    const counters = profile?.cacheCounters(metrics);
    const promptName = profile?.metrics.prompt_tokens?.find((n) => metrics.has(n));
    const secondsName = profile?.metrics.prompt_seconds?.find((n) => metrics.has(n));
    const prefill = promptName && secondsName ? { tokens: total(metrics, promptName)!, seconds: total(metrics, secondsName)! } : undefined;

    let restart: string | undefined;
    if (startToken !== undefined && watch.startToken !== undefined && startToken !== watch.startToken) {
      // "name value" → "name old → new"
      const [name, before] = splitToken(watch.startToken);
      const [, after] = splitToken(startToken);
      restart = `engine restarted: ${name} ${before} → ${after}`;
    } else if (counters && watch.counters && counters.queries < watch.counters.queries) {
      restart = `engine restarted: ${counters.names.at(-1)} went back from ${watch.counters.queries} to ${counters.queries}`;
    } else if (prefill && watch.prefillCounters && prefill.tokens < watch.prefillCounters.tokens) {
      restart = `engine restarted: ${promptName} went back from ${watch.prefillCounters.tokens} to ${prefill.tokens}`;
    }
    const previous = restart ? undefined : watch.counters;
    const previousPrefill = restart ? undefined : watch.prefillCounters;
    watch.startToken = startToken ?? watch.startToken;
    watch.counters = counters;
    watch.prefillCounters = prefill;
    if (restart) {
      // What it published (capacity, version) may have changed with the process.
      watch.rediscover = true;
      this.options.health.loseCache(replica, restart, false);
      return;
    }
    if (counters && previous) this.options.onCounters?.(replica, { hits: counters.hits - previous.hits, queries: counters.queries - previous.queries });
    if (prefill) {
      const tokens = prefill.tokens - (previousPrefill?.tokens ?? 0);
      const seconds = prefill.seconds - (previousPrefill?.seconds ?? 0);
      replica.prefill.observeEngine(tokens, seconds);
    }
  }
}

function splitToken(token: string): [string, string] {
  const space = token.indexOf(" ");
  return space < 0 ? ["start", token] : [token.slice(0, space), token.slice(space + 1)];
}

/** The replica's own key, never the client's. */
export function authHeaders(config: ReplicaConfig): Record<string, string> {
  return config.api_key ? { authorization: `Bearer ${config.api_key}` } : {};
}
