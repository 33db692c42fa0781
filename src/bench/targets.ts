/**
 * What the bench measures against, and the arms it compares. A target is a set of replicas:
 * simulated ones started here (`--sim N`, resettable, with a time scale) or the user's own
 * (`--config router.toml`, never reset — salting keeps arms apart). An arm is one way of
 * choosing a replica: an in-process llmroute router running one policy, or the bench-only
 * oracle, which asks every sim how much of the prompt it holds right now.
 */
import { DEFAULT_METRICS_PATH, DEFAULTS, duration, parseConfig, type Config } from "../config.ts";
import { discoverEngine } from "../engines/discover.ts";
import { profileOf } from "../engines/index.ts";
import type { PolicyName } from "../route/options.ts";
import { LlmrouteError } from "../errors.ts";
import { memoryLog } from "../log.ts";
import type { StatusDocument } from "../ops/telemetry.ts";
import type { RequestRecord } from "../proxy/proxy.ts";
import { startRouter } from "../proxy/server.ts";
import { DEFAULT_ENGINE, DEFAULT_PROFILE, startEach, startSim, type EngineProfileName, type ProfileName, type SimOptions, type SimServer, type SimState, type StartSimOptions, type TemplateName } from "../sim/index.ts";
import { startSimThread, type SimHandle } from "../sim/thread.ts";
import type { KvTokensSetting } from "./args.ts";
import { sendChat, type FetchLike, type Outcome } from "./client.ts";
import { routerFleetArm, type RouterFleetOptions } from "./routers.ts";

/** A policy; the oracle (perfect knowledge of the sims' caches); the pooled sim (one card with every card's KV, prefill and sequences). */
export type ArmName = PolicyName | "oracle" | "pooled";

export interface ReplicaInfo {
  name: string;
  url: string;
  /** The card's KV budget in tokens (0 = unknown). */
  kvTokens: number;
  /** Where its health is checked, when not the router's default /health (an Ollama sim: /api/version). */
  healthPath?: string;
  /** false: it has no /metrics to scrape (Ollama). */
  metrics?: false;
}

export interface Arm {
  name: ArmName;
  send(body: Record<string, unknown>): Promise<Outcome>;
  /** The router's /status (capacity warnings); absent for the oracle. */
  status?(): Promise<StatusDocument>;
  stop(): Promise<void>;
}

export interface Target {
  kind: "sim" | "config";
  replicas: ReplicaInfo[];
  /** Real time = model time × timeScale (1 for real replicas). */
  timeScale: number;
  model: string;
  /** What engine (and version) the replicas run, as discovered: the report names it. */
  engine?: string;
  /** Sims: the engine profile and chat template they imitate, the card they are sized as, and what the routers' router.toml says of their KV. */
  sim?: { engine: EngineProfileName; template: TemplateName; kvTokens: KvTokensSetting; card: ProfileName; threads: boolean };
  /** Empty every replica's cache and counters (sims only; a no-op on real replicas). */
  reset(): Promise<void>;
  /** Sim counters, summed over replicas (preemptions, evictions); undefined on real replicas. */
  simTotals(): Promise<SimTotals | undefined>;
  /** Sims: each replica's first-token times in model ms by sequence id (GET /sim/first-tokens); undefined on real replicas. */
  firstTokens(): Promise<Map<string, Map<number, number>> | undefined>;
  startArm(name: ArmName): Promise<Arm>;
  stop(): Promise<void>;
}

export interface SimTotals {
  preemptions: number;
  evictedBlocks: number;
  /** Per sim (the pooled sim as "pooled"): its preemptions and evicted blocks. */
  perReplica?: Record<string, { preemptions: number; evictedBlocks: number }>;
  /** First admissions by why their cache hit stopped (x-sim-prefix's stop; /sim/state stop_*_total). */
  stops?: { full: number; evicted: number; new: number; elsewhere: number };
}

export interface RouterTomlOptions {
  adminListen?: string;
  /** What kv_tokens says for each replica (default: its real KV). */
  kvTokens?: KvTokensSetting;
  /** Real ms between health checks, which also scrape each engine's /metrics (default 60 s). */
  healthIntervalMs?: number;
  /** Sims' time scale: the router's windows (routing.capacity_window, routing.index_ttl) are its defaults in model time. */
  timeScale?: number;
}

/**
 * A bench router checks (and scrapes) its sims every 10 s of model time, as a router with the
 * default health.interval checks a real card: an engine whose responses carry no cached
 * tokens (the vllm profile) is judged by its counters once per scrape, and an unscaled
 * interval would leave it unjudged for a whole arm. Not below 100 ms (health.interval's floor).
 */
export function simHealthIntervalMs(timeScale: number): number {
  return Math.max(100, Math.round(10_000 * timeScale));
}

/** A config duration ("5m") times the time scale, in ms, at least the 1 s the validator allows. */
function scaledMs(value: string, timeScale: number): number {
  const ms = duration(value);
  if (!ms.ok) throw new Error(`bench: the default ${value} is no duration`);
  return Math.max(1000, Math.round(ms.value * timeScale));
}

/**
 * A router config for `replicas` with one policy: loopback, port 0, quiet health checks.
 * kv_tokens is each replica's real KV times the setting's factor, or left out (`none`): the
 * router then starts from what the engine publishes, or learns it from evidence.
 */
export function routerToml(replicas: readonly ReplicaInfo[], policy: PolicyName, model: string, options: RouterTomlOptions = {}): string {
  const { adminListen, kvTokens = { kind: "factor", factor: 1 }, healthIntervalMs = 60_000, timeScale = 1 } = options;
  const lines = [
    "[server]",
    `listen = "127.0.0.1:0"`,
    ...(adminListen ? [`admin_listen = "${adminListen}"`] : []),
    "[routing]",
    `policy = "${policy}"`,
    // What the router calls recent and how long it remembers, as a router in front of the
    // modelled cards would: at time scale 0.1 its default 5-minute window would span 50
    // minutes of the cards' time (a whole trace replay), its hour ten.
    ...(timeScale === 1 ? [] : [`capacity_window = "${scaledMs(DEFAULTS.routing.capacity_window, timeScale)}ms"`, `index_ttl = "${scaledMs(DEFAULTS.routing.index_ttl, timeScale)}ms"`]),
    "[health]",
    // The bench's replicas do not come and go; by default a long interval keeps checks out of the timings.
    `interval = "${healthIntervalMs}ms"`,
  ];
  for (const r of replicas) {
    lines.push("[[replica]]", `name = ${JSON.stringify(r.name)}`, `url = ${JSON.stringify(r.url)}`);
    if (kvTokens.kind === "factor") lines.push(`kv_tokens = ${Math.round(r.kvTokens * kvTokens.factor)}`);
    if (model) lines.push(`models = [${JSON.stringify(model)}]`);
    if (r.healthPath) lines.push(`health_path = ${JSON.stringify(r.healthPath)}`);
    if (r.metrics === false) lines.push("metrics = false");
  }
  return `${lines.join("\n")}\n`;
}

/** The router's per-request record, with the index's view of the cache (available, captured). */
export type IndexedRecord = RequestRecord;

/**
 * Take the router's record of the request `out` describes out of `pending`. The proxy calls
 * onRecord before it closes the client's stream, so by the time a response has been read
 * to its end, its record is in `pending`. A record carries no request id, so it is matched
 * by what both sides saw: replica, status and the engine's usage. Two pending records
 * alike in all of these may be swapped between their requests; every figure the bench
 * reports sums over requests per arm and per replica, and those sums do not change.
 */
export function claimRecord(pending: IndexedRecord[], out: Outcome): IndexedRecord | undefined {
  if (out.error) return undefined;
  const i = pending.findIndex(
    (r) =>
      r.replica === out.replica &&
      r.status === out.status &&
      (r.promptTokens ?? 0) === out.promptTokens &&
      (r.cachedTokens ?? 0) === out.cachedTokens &&
      (r.completionTokens ?? 0) === out.completionTokens,
  );
  return i < 0 ? undefined : pending.splice(i, 1)[0];
}

/** The outcome with the index's view of the cache and its verdict on the engine's report, from the router's record of it. */
export function withIndexView(out: Outcome, pending: IndexedRecord[]): Outcome {
  const record = claimRecord(pending, out);
  if (record?.availableTokens !== undefined) out.availableTokens = record.availableTokens;
  if (record?.capturedTokens !== undefined) out.capturedTokens = record.capturedTokens;
  if (record?.verdict !== undefined) out.verdict = record.verdict;
  return out;
}

async function routerArm(config: Config, fetchImpl?: FetchLike): Promise<Arm> {
  const pending: IndexedRecord[] = [];
  const server = await startRouter(config, {
    log: memoryLog(),
    onRecord: (r) => {
      if (r.outcome === "ok") pending.push(r);
    },
  });
  const name = config.routing.policy;
  return {
    name,
    async send(body) {
      return withIndexView(await sendChat(server.url, body, { fetch: fetchImpl }), pending);
    },
    async status() {
      // GET /status also refreshes the capacity readings, like `llmroute status` does.
      const res = await fetch(`${server.adminUrl ?? server.url}/status`);
      return (await res.json()) as StatusDocument;
    },
    stop: () => server.stop(),
  };
}

interface MatchReply {
  prompt_tokens: number;
  cached_tokens: number;
  running: number;
  waiting: number;
}

/**
 * The oracle: for each request, ask every sim how many of its prompt tokens it has cached
 * right now (POST /sim/match) and send it to the replica where it should start producing
 * soonest with perfect cache knowledge.
 *
 * It sends through a router too (`via`: one single-replica llmroute per sim), so that it
 * pays the same proxy hop as the policy arms and differs from them only in where it
 * places: without the hop, real proxy time magnified by the time scale would be charged to
 * placement (docs/bench-design.md#the-oracle).
 *
 * "Most cached tokens, ties to the least busy" alone is not that: every prompt's first
 * block (template + salt line) is cached wherever the first request ran, so every request
 * would go to that card (docs/bench-design.md#the-oracle). So the oracle weighs what the cache saves against the queue: estimated prefill work
 * (uncached tokens + `cachedTokenCost` × cached tokens) times (1 + requests busy there).
 * With an idle fleet that is "most cached"; a few cached tokens never outweigh a queue.
 * "Busy" is the larger of the sim's running+waiting and the oracle's own requests in
 * flight there: requests sent in the same instant have not reached the sim yet when the
 * next one asks.
 */
export function oracleArm(
  replicas: readonly ReplicaInfo[],
  cachedTokenCost: number,
  options: { fetch?: FetchLike; via?: ReadonlyMap<string, { url: string; stop(): Promise<void> }> } = {},
): Arm {
  const fetchImpl = options.fetch ?? fetch;
  const inflight = new Map(replicas.map((r) => [r.name, 0]));
  let counter = 0;
  return {
    name: "oracle",
    async send(body) {
      const text = JSON.stringify(body);
      const replies = await Promise.all(
        replicas.map(async (r) => {
          const res = await fetchImpl(`${r.url}/sim/match?endpoint=/v1/chat/completions`, { method: "POST", body: text });
          if (!res.ok) throw new LlmrouteError("upstream", `oracle: ${r.name} /sim/match answered HTTP ${res.status} (is it a sim?)`);
          return (await res.json()) as MatchReply;
        }),
      );
      const choice = oracleChoice(
        replicas.map((r, i) => ({
          name: r.name,
          promptTokens: replies[i]!.prompt_tokens,
          cachedTokens: replies[i]!.cached_tokens,
          busy: Math.max(replies[i]!.running + replies[i]!.waiting, inflight.get(r.name)!),
        })),
        cachedTokenCost,
        counter++,
      );
      const replica = replicas.find((r) => r.name === choice)!;
      inflight.set(choice, inflight.get(choice)! + 1);
      try {
        const out = await sendChat(options.via?.get(replica.name)?.url ?? replica.url, body, { fetch: fetchImpl, replica: replica.name, route: "oracle" });
        // The oracle's view is the sims' own: cached somewhere, and cached where it sent it.
        out.availableTokens = Math.max(...replies.map((r) => r.cached_tokens));
        out.capturedTokens = replies[replicas.indexOf(replica)]!.cached_tokens;
        return out;
      } finally {
        inflight.set(choice, inflight.get(choice)! - 1);
      }
    },
    stop: async () => {
      await Promise.all([...(options.via?.values() ?? [])].map((r) => r.stop()));
    },
  };
}

export interface OracleCandidate {
  name: string;
  promptTokens: number;
  cachedTokens: number;
  busy: number;
}

/** Least (prefill work × (1 + busy)); ties → most cached; still tied → rotate with `counter`. */
export function oracleChoice(candidates: readonly OracleCandidate[], cachedTokenCost: number, counter: number): string {
  const cost = (c: OracleCandidate) => (c.promptTokens - c.cachedTokens + cachedTokenCost * c.cachedTokens) * (1 + c.busy);
  const best = Math.min(...candidates.map(cost));
  const cheapest = candidates.filter((c) => cost(c) === best);
  const most = Math.max(...cheapest.map((c) => c.cachedTokens));
  const tied = cheapest.filter((c) => c.cachedTokens === most);
  return tied[counter % tied.length]!.name;
}

export interface SimTargetOptions {
  replicas: number;
  timeScale: number;
  /** The engine profile the sims imitate (default vllm-details). */
  engine?: EngineProfileName;
  /** Their chat template mode (default chatml). */
  template?: TemplateName;
  /** The card profile each sim is sized as (default 3090). */
  card?: ProfileName;
  /** What the routers' router.toml says of each sim's kv_tokens (default none). */
  kvTokens?: KvTokensSetting;
  /** Every arm's router serves /status and /dashboard here (one after the other), so the address stays. */
  adminListen?: string;
  /** Several router instances per arm (--routers N). */
  fleet?: RouterFleetOptions;
  /** Each sim on its own thread (the bench CLI's default; --no-sim-threads: not), its timers apart from the routers' and the client's. */
  threads?: boolean;
}

/** N simulated replicas in this process, sized as `card` (3090-class by default). */
export async function simTarget(options: SimTargetOptions): Promise<Target> {
  const engine = options.engine ?? DEFAULT_ENGINE;
  const template = options.template ?? "chatml";
  const kvTokens = options.kvTokens ?? { kind: "none" };
  const card = options.card ?? DEFAULT_PROFILE;
  const start = (o: StartSimOptions) => (options.threads ? startSimThread(o) : startSim(o).then(inProcess));
  const sims = await startEach(options.replicas, (i) => start({ name: `gpu${i}`, profile: card, timeScale: options.timeScale, engine, template }));
  // The pooled arm's one sim, started when first asked for; reset and counted with the others.
  let pooled: SimHandle | undefined;
  const all = () => (pooled ? [...sims, pooled] : sims);
  // As `llmroute sim` prints the fragment (routerTomlSnippet): Ollama has neither /health nor /metrics.
  const ollama = (s: SimHandle) => s.family === "ollama";
  const replicas: ReplicaInfo[] = sims.map((s) => ({
    name: s.name,
    url: s.url,
    kvTokens: s.options.kvTokens,
    ...(ollama(s) ? { healthPath: "/api/version", metrics: false as const } : {}),
  }));
  const model = sims[0]!.options.model;
  const healthIntervalMs = simHealthIntervalMs(options.timeScale);
  const toml = (rs: readonly ReplicaInfo[], policy: PolicyName, adminListen?: string) =>
    routerToml(rs, policy, model, { kvTokens, healthIntervalMs, timeScale: options.timeScale, ...(adminListen ? { adminListen } : {}) });
  return {
    kind: "sim",
    replicas,
    timeScale: options.timeScale,
    model,
    sim: { engine, template, kvTokens, card, threads: options.threads === true },
    async reset() {
      await Promise.all(
        all().map(async (s) => {
          const res = await fetch(`${s.url}/sim/reset`, { method: "POST" });
          if (!res.ok) throw new LlmrouteError("upstream", `sim ${s.name}: /sim/reset answered HTTP ${res.status}`);
        }),
      );
    },
    async simTotals() {
      const fleet = all();
      const states = await Promise.all(fleet.map(async (s) => (await (await fetch(`${s.url}/sim/state`)).json()) as SimState));
      const sum = (f: (s: SimState) => number) => states.reduce((a, s) => a + f(s), 0);
      return {
        preemptions: sum((s) => s.preemptions_total),
        evictedBlocks: sum((s) => s.evicted_blocks_total),
        perReplica: Object.fromEntries(fleet.map((s, i) => [s.name, { preemptions: states[i]!.preemptions_total, evictedBlocks: states[i]!.evicted_blocks_total }])),
        stops: {
          full: sum((s) => s.stop_full_total),
          evicted: sum((s) => s.stop_evicted_total),
          new: sum((s) => s.stop_new_total),
          // (0 from an engine that cannot hold a prefix out of a request's reach)
          elsewhere: sum((s) => s.stop_elsewhere_total ?? 0),
        },
      };
    },
    async firstTokens() {
      const fleet = all();
      const docs = await Promise.all(fleet.map(async (s) => (await (await fetch(`${s.url}/sim/first-tokens`)).json()) as { first_token_model_ms: Record<string, number> }));
      return new Map(fleet.map((s, i) => [s.name, new Map(Object.entries(docs[i]!.first_token_model_ms).map(([id, ms]) => [Number(id), ms]))]));
    },
    async startArm(name) {
      if (name === "oracle") {
        // One router per sim, each with only that sim: the oracle's hop, with no choice to make.
        const via = new Map(
          await Promise.all(
            replicas.map(async (r) => {
              const server = await startRouter(parseConfig(toml([r], "hybrid"), "<bench oracle>", { env: {} }), { log: memoryLog() });
              return [r.name, { url: server.url, stop: () => server.stop() }] as const;
            }),
          ),
        );
        return oracleArm(replicas, sims[0]!.options.cachedTokenCost, { via });
      }
      if (name === "pooled") {
        pooled ??= await start(pooledSimOptions(sims[0]!.options, sims.length));
        const one: ReplicaInfo = { name: pooled.name, url: pooled.url, kvTokens: pooled.options.kvTokens };
        // Like the oracle's hop: one router with one replica, no choice to make.
        return { ...(await routerArm(parseConfig(toml([one], "hybrid"), "<bench pooled>", { env: {} }))), name: "pooled" };
      }
      const config = parseConfig(toml(replicas, name, options.adminListen), "<bench>", { env: {} });
      return options.fleet ? routerFleetArm(config, options.fleet) : routerArm(config);
    },
    async stop() {
      await Promise.all(all().map((s) => s.stop()));
    },
  };
}

const inProcess = (s: SimServer): SimHandle => ({ name: s.name, url: s.url, options: s.app.options, family: s.app.profile.family, stop: () => s.stop() });

/**
 * The pooled arm's sim: one card with the KV, prefill rate and running sequences of all `n`
 * (and on llama.cpp's slots, n times the slots and RAM cache), its decode slowdown per
 * running sequence divided by n, so n times the sequences decode as fast as they would
 * spread over n cards. A request may be no longer than on one card.
 */
export function pooledSimOptions(card: SimOptions, n: number): Partial<SimOptions> {
  const slots = card.parallel > 0 ? { parallel: card.parallel * n, kvUnified: card.kvUnified } : {};
  return {
    ...card,
    ...slots,
    name: "pooled",
    kvTokens: card.kvTokens * n,
    prefillTps: card.prefillTps * n,
    maxSeqs: card.maxSeqs * n,
    decodeBatchSlowdown: card.decodeBatchSlowdown / n,
    cacheRam: card.cacheRam > 0 ? card.cacheRam * n : card.cacheRam,
    maxModelLen: card.maxModelLen,
  };
}

/**
 * The replicas of the user's router.toml. The routers the bench starts listen on loopback
 * port 0 with no client keys and no state file; everything else (upstream keys, thresholds,
 * kv_tokens) is the user's.
 */
export async function configTarget(config: Config, model: string | undefined, fleet?: RouterFleetOptions): Promise<Target> {
  const replicas = config.replicas.map((r) => ({ name: r.name, url: r.url, kvTokens: r.kv_tokens }));
  const resolved = model ?? config.replicas.find((r) => r.models.length > 0)?.models[0] ?? (await discoverModel(config));
  const engine = await describeEngines(config);
  return {
    kind: "config",
    replicas,
    timeScale: 1,
    model: resolved,
    ...(engine ? { engine } : {}),
    reset: async () => {},
    simTotals: async () => undefined,
    firstTokens: async () => undefined,
    async startArm(name) {
      if (name === "oracle" || name === "pooled") throw new LlmrouteError("usage", `bench: the ${name} arm needs simulated replicas (--sim); it cannot ${name === "oracle" ? "see a real engine's cache" : "pool real cards"}`);
      const routing = { ...config.routing, policy: name };
      delete routing.state_file;
      const server = { ...config.server, listen: { host: "127.0.0.1", port: 0 }, api_keys: [] };
      delete server.admin_listen;
      return fleet ? routerFleetArm({ ...config, server, routing }, fleet) : routerArm({ ...config, server, routing });
    },
    stop: async () => {},
  };
}

/** "llama.cpp b1-80fb11a", or per replica when they differ; undefined when none says. */
async function describeEngines(config: Config): Promise<string | undefined> {
  const found = await Promise.all(
    config.replicas.map(async (r) => {
      const d = await discoverEngine({ url: r.url, headers: r.api_key ? { authorization: `Bearer ${r.api_key}` } : {}, metricsPath: r.metrics ?? DEFAULT_METRICS_PATH }, fetch, 5_000);
      return d.facts.family ? `${profileOf(d.facts.family).label}${d.facts.version ? ` ${d.facts.version}` : ""}` : "engine not recognised";
    }),
  );
  const distinct = [...new Set(found)];
  if (distinct.length === 1) return distinct[0];
  return config.replicas.map((r, i) => `${r.name}: ${found[i]}`).join(", ");
}

async function discoverModel(config: Config): Promise<string> {
  for (const r of config.replicas) {
    try {
      const res = await fetch(`${r.url}/v1/models`, { headers: r.api_key ? { authorization: `Bearer ${r.api_key}` } : {} });
      const body = (await res.json()) as { data?: { id?: string }[] };
      const id = body.data?.[0]?.id;
      if (id) return id;
    } catch {
      // try the next replica
    }
  }
  throw new LlmrouteError("usage", "bench: no replica answered /v1/models; pass --model");
}
