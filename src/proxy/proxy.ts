/**
 * The proxy flow, in one place: read the body once (bounded in size and time), decide,
 * forward the client's original bytes, fail over only before the first byte reaches the
 * client, relay the stream unbuffered while tapping usage on the side, and abort upstream
 * when the client goes away. Deadlines: connect and first byte fail over; a stream silent
 * for `stream_idle_timeout` ends with the API's error event. A request keeps the replica
 * objects it started with, so a reload never pulls one from under it. `fetch`, the clock
 * and the connect probe are injected; Bun.serve lives in server.ts.
 */
import type { Config } from "../config.ts";
import { describeFetchError, type FetchLike, type Failure, type Fleet, type Replica } from "../fleet/fleet.ts";
import { clip, type Log } from "../log.ts";
import type { Hasher } from "../route/hash.ts";
import { prefixChains } from "../route/chain.ts";
import type { RouteInput } from "../route/policy.ts";
import type { CacheVerdict as Verdict } from "../route/evidence.ts";
import type { Commit, FleetView, RouteEstimate, Router } from "../route/router.ts";
import { endpointOf, shapeOf, type Endpoint, type RequestShape } from "../route/shape.ts";
import { BODY_TIMEOUT_MS, PROBE_AFTER_MS, PROBE_FRESH_MS, RETRY_AFTER_S, RETRYABLE_STATUS, SMALL_BODY_MS, WHOLE_RESPONSE_MAX } from "./_constants.ts";
import { errorResponse, streamErrorEvent } from "./errors.ts";
import { downstreamHeaders, upstreamHeaders, type ClientInfo } from "./headers.ts";
import { createReachability, type Reachability } from "./reachability.ts";
import { parseBody, readBody } from "./request-body.ts";
import { ResponseTap, type TapResult } from "./tap.ts";
import { reportedCachedTokens, showsCachedTokens } from "../engines/usage.ts";
import { UsageStripper, withUsageRequested } from "./usage.ts";

/**
 * How a request ended. rejected: refused by the router before routing; upstream_rejected:
 * the replica answered 4xx (the request, the replica's key or its URL is wrong: counted
 * apart so a misconfigured replica does not hide among the successes); upstream_error: it
 * answered 5xx or failed mid-response; upstream_error_in_stream: it answered 200 and then
 * ended the stream with its own error event (the engine failed the request once it began).
 */
export type Outcome = "ok" | "upstream_error" | "upstream_error_in_stream" | "upstream_rejected" | "client_cancelled" | "rejected" | "no_replica" | "timeout" | "drain_timeout";

/** What happened to one request, for the log line and the metrics. */
export interface RequestRecord {
  endpoint: Endpoint;
  model?: string;
  replica?: string;
  route?: string;
  status: number;
  stream: boolean;
  outcome: Outcome;
  promptTokens?: number;
  cachedTokens?: number;
  completionTokens?: number;
  /** Prompt tokens the index expected cached on some replica (available) and on the chosen one (captured). */
  availableTokens?: number;
  capturedTokens?: number;
  /** How the engine's cached_tokens compared with the index's expectation. */
  verdict?: Verdict;
  ttftMs?: number;
  totalMs: number;
  failovers: number;
  /** Why it did not end well (timeouts, upstream failures, rejections), for the log. */
  error?: string;
}

export interface ProxyDeps {
  /** Read per request, so a reloaded config applies to the next request. */
  config: () => Pick<Config, "server" | "routing">;
  fleet: Fleet;
  router: Router;
  hasher: Hasher;
  log: Log;
  fetch?: FetchLike;
  now?: () => number;
  /** TCP reachability checks behind routing.connect_timeout (default: a real connect). */
  reachability?: Reachability;
  /** How long a request body may take to arrive (default BODY_TIMEOUT_MS). */
  bodyTimeoutMs?: number;
  /** Called once per finished request (metrics). */
  onRecord?: (record: RequestRecord) => void;
  /** State shared with other router instances (src/cluster); absent = this instance alone. */
  cluster?: {
    /** The replica's view with the other instances' in-flight requests and queued prefill added. */
    view(replica: Replica): FleetView;
    /** This instance's in-flight requests or queued prefill changed. */
    loadChanged(): void;
    /** The answer to a decision committed at `committedAt` ends now (its load is gone too); its next turn may go to another instance. */
    answered(committedAt: number): void;
    /** The owner of a Responses API id not mirrored here yet (asks the shared store, briefly). */
    responseOwner(id: string): Promise<string | undefined>;
  };
}

export interface Proxy {
  /** Handle a /v1/* request. */
  forward(req: Request, url: URL, client?: ClientInfo): Promise<Response>;
  /** Answer a request the router refuses before routing (401, 404 …): logged and counted like any other. */
  reject(url: URL, status: number, message: string): Response;
  /** Requests in flight (waiting for a replica or streaming). */
  readonly active: number;
  /**
   * End every request in flight now (server.drain_timeout): one still waiting for its first
   * byte gets 503, a stream ends with the API's error event; each is logged as drain_timeout.
   */
  cutAll(): void;
}

/** GET/DELETE /v1/responses/{id}, …/input_items, POST …/cancel: the response lives on one replica. */
const RESPONSE_PATH = /^\/v1\/responses\/([^/]+)(?:\/(?:input_items|cancel))?$/;

type Attempt =
  | { kind: "response"; response: Response }
  | { kind: "failed"; failure: Failure }
  | { kind: "client-gone" }
  | { kind: "cut" };

/** One request in flight: cut short by the drain timeout through `abort` while an attempt runs. */
interface Flight {
  cut: boolean;
  /** Its response is streaming: it stays in flight until the stream ends. */
  streaming: boolean;
  abort?: () => void;
}

/** Why an attempt was aborted by the router (the fetch error itself says less). */
type Stop = { kind: "failure"; failure: Failure } | { kind: "client" } | { kind: "drain" };

interface RequestContext {
  req: Request;
  url: URL;
  client: ClientInfo;
  /** The client's bytes. */
  bytes: Uint8Array;
  /**
   * The client's bytes with stream_options.include_usage added (for an engine that streams no
   * usage unless asked), or undefined when nothing needs adding — the client asked, as
   * `asked` (its engine family's rule) reads its stream_options; made once per rule, on need.
   */
  withUsage: (asked?: (options: unknown) => boolean) => Uint8Array | undefined;
  shape: RequestShape;
  started: number;
  failovers: number;
  routing: Config["routing"];
}

export function createProxy(deps: ProxyDeps): Proxy {
  const { router, hasher, log } = deps;
  const upstreamFetch = deps.fetch ?? fetch;
  const now = deps.now ?? (() => performance.now());
  const reachability = deps.reachability ?? createReachability({ freshMs: PROBE_FRESH_MS });
  const bodyTimeoutMs = deps.bodyTimeoutMs ?? BODY_TIMEOUT_MS;
  /** Every request in flight, until its response is complete. */
  const flights = new Set<Flight>();

  /** A llama.cpp unified KV overflowed there: forget the prompts it purged from idle slots (Replica.overflowCleared). */
  const overflowed = (replica: Replica) => {
    if (!replica.removed) router.forgetCommits(replica.name, replica.overflowCleared());
  };

  const record = (r: RequestRecord) => {
    deps.onRecord?.(r);
    log.info("request", {
      endpoint: r.endpoint,
      model: clip(r.model),
      replica: r.replica,
      route: r.route,
      status: r.status,
      outcome: r.outcome === "ok" ? undefined : r.outcome,
      error: r.error,
      prompt_tokens: r.promptTokens,
      cached_tokens: r.cachedTokens,
      ttft_ms: r.ttftMs === undefined ? undefined : Math.round(r.ttftMs),
      total_ms: Math.round(r.totalMs),
    });
  };

  function reject(url: URL, status: number, message: string, started = now(), param?: string): Response {
    const endpoint = endpointOf(url.pathname);
    record({ endpoint, status, stream: false, outcome: "rejected", totalMs: now() - started, failovers: 0, error: message });
    return errorResponse(endpoint, status, message, { param });
  }

  async function forward(req: Request, url: URL, client: ClientInfo = {}): Promise<Response> {
    const flight: Flight = { cut: false, streaming: false };
    flights.add(flight);
    try {
      return await route(req, url, client, flight);
    } finally {
      // A streaming response stays in flight until its last byte (or its cut).
      if (!flight.streaming) flights.delete(flight);
    }
  }

  async function route(req: Request, url: URL, client: ClientInfo, flight: Flight): Promise<Response> {
    const started = now();
    const endpoint = endpointOf(url.pathname);
    if (endpoint !== "other" && req.method !== "POST") return reject(url, 405, `${url.pathname} takes POST`, started);

    const config = deps.config();
    const fleet = deps.fleet;
    const read = await readBody(req, config.server.max_body_bytes, bodyTimeoutMs);
    if (!read.ok && read.status === 499) {
      record({ endpoint, status: 499, stream: false, outcome: "client_cancelled", totalMs: now() - started, failovers: 0, error: read.message });
      return new Response(null, { status: 499 });
    }
    if (!read.ok) return reject(url, read.status, read.message, started);
    const bytes = read.bytes;

    // Routed endpoints must carry a JSON object. Others (/tokenize, …) pass through as
    // they are; if they happen to be JSON, their `model` still picks the pool.
    let body: Record<string, unknown> | undefined;
    if (endpoint !== "other") {
      const checked = await parseBody(endpoint, bytes);
      if (!checked.ok) return reject(url, 400, checked.message, started, checked.param);
      body = checked.body;
    } else if (bytes.byteLength > 0 && (req.headers.get("content-type") ?? "").includes("json")) {
      const checked = await parseBody(endpoint, bytes);
      if (checked.ok) body = checked.body;
    }

    let shape = shapeOf(endpoint, body, { tenant: req.headers.get("x-llmroute-tenant"), session: req.headers.get("x-session-id") });
    const responseId = RESPONSE_PATH.exec(url.pathname)?.[1];
    if (responseId) {
      let id: string;
      try {
        id = decodeURIComponent(responseId);
      } catch {
        return reject(url, 400, `the response id in the path is not valid percent-encoding: ${clip(responseId)}`, started);
      }
      shape = { ...shape, previousResponseId: id };
    }
    // The pool is this request's snapshot: a reload may replace fleet.replicas meanwhile.
    const pool = fleet.pool(shape.model);
    if (shape.model !== undefined && pool.length === 0) {
      return reject(url, 404, `The model \`${clip(shape.model)}\` does not exist on any replica.`, started, "model");
    }
    const input: RouteInput = { shape, chains: endpoint === "other" ? [] : prefixChains(shape, hasher, config.routing.chunk_chars) };
    const withUsage = new Map<((options: unknown) => boolean) | undefined, Uint8Array | undefined>();
    const ctx: RequestContext = {
      req,
      url,
      client,
      bytes,
      withUsage: (asked) => {
        if (!withUsage.has(asked)) withUsage.set(asked, body ? withUsageRequested(endpoint, body, bytes, asked) : undefined);
        return withUsage.get(asked);
      },
      shape,
      started,
      failovers: 0,
      routing: config.routing,
    };
    // A follow-up can reach this instance before the cluster brings its response id here.
    const previous = shape.previousResponseId;
    if (previous && deps.cluster && router.responseOwner(previous) === undefined) await deps.cluster.responseOwner(previous);
    // A Responses API follow-up can only be served where its response is stored.
    const owner = previous ? router.responseOwner(previous) : undefined;

    const tried = new Set<string>();
    const failures: string[] = [];
    let allTimedOut = true;
    /** While hybrid holds it for a busy slot (`holdForSlot`): the reason it was held, and until when it may wait in all. */
    let hold: { reason: string; until: number } | undefined;
    let ownerDown: string | undefined;
    for (let attempt = 0; attempt < config.routing.max_attempts && !flight.cut; attempt++) {
      // A failover picks from the fleet as it is now (a reload may have removed or added
      // replicas meanwhile); only when none of those is left untried, from the snapshot. So
      // does a request routed again after a hold.
      const candidates = attempt === 0 && !hold ? pool : untriedOr(fleet.pool(shape.model), tried, pool);
      const { views, panic } = fleet.views(candidates, tried, shape.model, deps.cluster ? (r) => deps.cluster!.view(r) : undefined);
      // Its replica is here but cannot take it: the state exists nowhere else. (A replica
      // outside this pool, e.g. serving another model, is the engines' business.)
      if (owner && views.some((v) => v.name === owner && !v.healthy)) {
        ownerDown = owner;
        break;
      }
      const committedAt = Date.now();
      const decision = router.route(input, views, committedAt);
      if (!decision) break;
      if (attempt === 0 && decision.estimate.busyWith !== undefined) {
        const chosen = candidates.find((r) => r.name === decision.replica)!;
        const waited = await holdForSlot(chosen, decision.estimate, hold?.until, req.signal, flight);
        if (waited) {
          hold ??= { reason: decision.reason, until: waited.until };
          if (flight.cut) break;
          if (req.signal.aborted) {
            record({ endpoint, model: shape.model, replica: chosen.name, route: `${hold.reason},held`, status: 499, stream: shape.stream, outcome: "client_cancelled", totalMs: now() - started, failovers: 0 });
            return new Response(null, { status: 499 });
          }
          // Routed again from the fleet as it is now: the slot is free, or another request
          // held for it took it first (then this one may wait for that one, within its time).
          attempt--;
          continue;
        }
      }
      const replica = candidates.find((r) => r.name === decision.replica)!;
      // A replica a reload removed still serves this request, but is not remembered.
      const retract = replica.removed ? undefined : router.commit(input, decision, committedAt);
      // A conversation left its card's KV wall: what waiting there had cost is paid by the move
      // (taken back if the move fails before the first byte).
      const unpay = decision.from ? candidates.find((r) => r.name === decision.from)?.wallLeft(committedAt) : undefined;
      fleet.dispatched(replica, panic);
      tried.add(replica.name);
      const route = `${decision.reason}${hold ? ",held" : ""}${attempt === 0 ? "" : ",failover"}`;

      const result = await attemptUpstream(ctx, fleet, replica, route, flight, { estimate: decision.estimate, committedAt, tag: retract?.tag ?? 0, retract });
      if (result.kind === "response") return result.response;
      unpay?.();
      if (result.kind === "client-gone") {
        record({ endpoint, model: shape.model, replica: replica.name, route, status: 499, stream: shape.stream, outcome: "client_cancelled", totalMs: now() - started, failovers: attempt });
        return new Response(null, { status: 499 });
      }
      if (result.kind === "cut") break;
      const { failure } = result;
      // Refused, or answered 502/503/504 (busy included), or never connected, or never sent (it
      // waited at the wall): it computed none of the prompt. Full: the engine cleared what it
      // had computed of it (server-context.cpp prompt_clear).
      if (failure.kind === "refused" || failure.kind === "status" || failure.kind === "busy" || failure.kind === "full" || failure.kind === "wall" || failure.timer === "connect") retract?.();
      if (failure.timer) replica.timeouts[failure.timer]++;
      allTimedOut &&= failure.kind === "timeout" || failure.kind === "wall";
      fleet.failed(replica, failure);
      failures.push(`${replica.name}: ${failure.reason}`);
      // Full is not for good: the card can take it once what runs there ends (its wall now
      // makes the request wait for that), so it stays a candidate.
      if (failure.kind === "full") tried.delete(replica.name);
      if (decision.reason === "sticky") {
        ownerDown = replica.name;
        break;
      }
      replica.failovers++;
      ctx.failovers = attempt + 1;
      log.warn("failover", { replica: replica.name, reason: failure.reason, attempt: attempt + 1 });
    }

    const retry = { headers: { "retry-after": String(RETRY_AFTER_S) } };
    const finished = (status: number, outcome: Outcome, message: string) => {
      record({ endpoint, model: shape.model, status, stream: shape.stream, outcome, totalMs: now() - started, failovers: failures.length, error: message });
      return errorResponse(endpoint, status, message, retry);
    };
    if (flight.cut) return finished(503, "drain_timeout", "the router is shutting down (server.drain_timeout passed); retry");
    if (ownerDown) {
      const why = failures.length > 0 ? failures.at(-1)! : `${ownerDown} is down`;
      return finished(
        503,
        "no_replica",
        `response ${shape.previousResponseId} is stored on replica ${ownerDown}, which cannot take requests now (${why}); its state exists only there: retry later`,
      );
    }
    if (failures.length === 0) return finished(503, "no_replica", `no healthy replica${shape.model ? ` serves model \`${shape.model}\`` : ""}`);
    const message = `no replica could serve the request (${failures.join("; ")})`;
    return allTimedOut ? finished(504, "timeout", message) : finished(503, "no_replica", message);
  }

  /**
   * llama.cpp keeps one prompt per slot and gives a request an idle slot, never a busy one
   * (server-context.cpp `get_available_slot` skips slots that are processing; the best match
   * among idle ones wins by similarity, else the least recently used, which restores the best
   * match from the RAM prompt cache), so a request whose prefix the chosen card keeps only in a
   * slot another request is using prefills all of it again in another slot — on the bench's
   * `pressured` documents, most of the 3 % of prompt tokens lost "elsewhere" (perf/results/
   * bench-llamacpp-20261203T1043.txt). It waits here for that request to end when that is
   * expected sooner than the prefill it saves, and at most as long as that prefill — at worst
   * its first token comes twice as late as cold, when that request runs longer than the
   * generations timed here. Another request held for the same slot may take it first: this one
   * then waits for that one, within the same time (`until`, set by the first wait). Returns
   * when the wait ended and until when it may wait in all, or undefined when it did not wait.
   * (llama.cpp itself defers a request that names a busy slot in `id_slot`, in
   * `process_single_task`; but that would change the client's body, and the router does not
   * see which slot holds what. Nor does it see the RAM prompt cache: a copy saved there, since
   * llama.cpp saves every idle slot when a task starts (`--cache-idle-slots`, on by default),
   * makes the wait needless, which the bound keeps below the prefill.)
   */
  async function holdForSlot(replica: Replica, estimate: RouteEstimate, until: number | undefined, client: AbortSignal, flight: Flight): Promise<{ until: number } | undefined> {
    const busy = estimate.busyWith!;
    const started = Date.now();
    const deadline = until ?? started + (estimate.capturedChars / estimate.charsPerToken / replica.prefill.rate) * 1000;
    const left = replica.flights.leftMs(busy, started);
    // Not before a generation was timed here: a burst sharing a prefix would wait for its first
    // request's whole prefill and answer, then go cold anyway. Nor while every slot is taken:
    // the engine queues it itself, and gives it a slot only when one frees — the best match
    // among the idle ones then (process_single_task defers it; a released slot brings the
    // deferred tasks back) — where a request held here would queue behind those sent meanwhile.
    const serving = replica.servingSlots;
    if (flight.cut || left === undefined || !(started + left < deadline) || (serving !== undefined && replica.flights.size >= serving)) return undefined;
    // Its client leaving, or the drain cutting it, ends the wait.
    const stop = new AbortController();
    const onStop = () => stop.abort();
    client.addEventListener("abort", onStop, { once: true });
    flight.abort = onStop;
    await replica.untilEnded(busy, deadline - started, stop.signal);
    client.removeEventListener("abort", onStop);
    flight.abort = undefined;
    if (until === undefined) replica.holds++;
    replica.heldMs += Date.now() - started;
    return { until: deadline };
  }

  async function attemptUpstream(
    ctx: RequestContext,
    fleet: Fleet,
    replica: Replica,
    route: string,
    flight: Flight,
    decided: { estimate: RouteEstimate; committedAt: number; tag: number; retract: Commit | undefined },
  ): Promise<Attempt> {
    const { req, url, routing } = ctx;
    const upstream = new AbortController();
    let stop: Stop | undefined;
    const abort = (why: Stop) => {
      stop ??= why;
      upstream.abort();
    };
    const onClientAbort = () => abort({ kind: "client" });
    req.signal.addEventListener("abort", onClientAbort, { once: true });
    flight.abort = () => abort({ kind: "drain" });
    if (flight.cut) flight.abort();
    let settled = false;
    const release = () => {
      settled = true;
      req.signal.removeEventListener("abort", onClientAbort);
      flight.abort = undefined;
    };
    // Usage is asked for only from an engine that would not say the cached tokens otherwise
    // (llama.cpp's stream carries them unasked): then the client gets the engine's own bytes.
    const unasked = replica.usageUnasked(ctx.shape.endpoint);
    const added = unasked ? undefined : ctx.withUsage(replica.profile?.stream.usageAsked);
    const sent = added ?? ctx.bytes;
    // A card that turned requests away as KV-full takes no more beside its in-flight ones than
    // it failed at: this one waits here until one ends or the wall lapses (the engine would fail
    // them all), for routing.first_byte_timeout at most; then the card is given up as one that
    // sent no first byte would be — another card, or 504 — but its health is not judged: it is
    // busy, not broken. Its deadlines start after: the wait is the router's queue, not the
    // replica's silence.
    const tokens = decided.estimate.totalChars / decided.estimate.charsPerToken;
    const admitted = replica.admit(tokens, upstream.signal, Date.now);
    if (admitted !== true) {
      const waited = setTimeout(() => {
        const wall = Math.round(replica.kvWall?.tokens ?? 0).toLocaleString("en-US");
        const reason = `waited ${ms(routing.first_byte_timeout_ms)} at its KV wall (~${wall} prompt tokens in flight there) without sending it: routing.first_byte_timeout`;
        abort({ kind: "failure", failure: { kind: "wall", timer: "first_byte", reason } });
      }, routing.first_byte_timeout_ms);
      const ok = await admitted;
      clearTimeout(waited);
      if (!ok) {
        release();
        fleet.released(replica);
        if (stop?.kind === "failure") return { kind: "failed", failure: stop.failure };
        return stop?.kind === "drain" ? { kind: "cut" } : { kind: "client-gone" };
      }
    }
    replica.inflight++;
    replica.began(decided.tag);
    // Longer than the context its engine cuts prompts to: the usage will count what was kept.
    const cutByEngine = fleet.promptSent(replica, { tokens, model: ctx.shape.model, endpoint: ctx.shape.endpoint });
    const dispatched = now();
    const prefill = replica.prefill.begin(decided.estimate.uncachedTokens, decided.committedAt);
    // Followed to its end only where requests wait for a slot (EngineProfile.servingSlots).
    const inSlot = replica.profile?.servingSlots ? replica.flights.begin((decided.estimate.uncachedTokens / replica.prefill.rate) * 1000, Date.now(), decided.tag) : undefined;
    deps.cluster?.loadChanged();
    const timeout = (timer: "connect" | "first_byte" | "stream_idle", reason: string) => () =>
      abort({ kind: "failure", failure: { kind: "timeout", timer, reason } });

    // Before the first byte: the replica must be reachable by connect_timeout and answer by first_byte_timeout.
    let headersIn = false;
    const firstByteTimer = setTimeout(timeout("first_byte", `no first byte within ${ms(routing.first_byte_timeout_ms)} (routing.first_byte_timeout)`), routing.first_byte_timeout_ms);
    const probeAt = Math.min(PROBE_AFTER_MS, routing.connect_timeout_ms / 2);
    const probeTimer = setTimeout(async () => {
      const reach = await reachability.check(replica.config.url, routing.connect_timeout_ms - probeAt);
      if (headersIn || stop || settled) return;
      if (reach === "timeout") timeout("connect", `no TCP connection within ${ms(routing.connect_timeout_ms)} (routing.connect_timeout)`)();
      else if (reach === "refused") abort({ kind: "failure", failure: { kind: "refused", reason: "connection refused" } });
    }, probeAt);
    const clearDeadlines = () => {
      clearTimeout(firstByteTimer);
      clearTimeout(probeTimer);
    };

    const fail = (error?: unknown, when = ""): Attempt => {
      clearDeadlines();
      replica.inflight--;
      replica.ended(decided.tag);
      replica.leave(tokens);
      replica.prefill.end(prefill);
      replica.flights.end(inSlot, Date.now(), false);
      deps.cluster?.loadChanged();
      release();
      if (stop?.kind === "client" || req.signal.aborted) {
        fleet.released(replica);
        return { kind: "client-gone" };
      }
      if (stop?.kind === "drain") {
        fleet.released(replica);
        return { kind: "cut" };
      }
      if (stop?.kind === "failure") return { kind: "failed", failure: stop.failure };
      return { kind: "failed", failure: classify(error, when) };
    };

    let res: Response;
    try {
      // A reset before any byte of answer is a kept-alive connection the engine had closed
      // (llama-server closes one after every streamed answer): sent again once on a fresh
      // connection to the same replica — no verdict on its health, its conversations stay.
      res = await fetchFreshOnReset(upstreamFetch, `${replica.config.url}${url.pathname}${url.search}`, {
        method: req.method,
        headers: upstreamHeaders(req.headers, replica.config, ctx.shape.endpoint, ctx.client),
        body: req.method === "GET" || req.method === "HEAD" ? undefined : sent,
        signal: upstream.signal,
        redirect: "manual",
        // Our own deadlines apply (a cold prefill can keep a socket silent for minutes).
        timeout: false,
      });
    } catch (error) {
      return fail(error);
    }
    headersIn = true;
    clearTimeout(probeTimer);
    if (RETRYABLE_STATUS.has(res.status)) {
      // A 503 may be the engine's queue turning the request away (Ollama's scheduler): busy,
      // not dead. Its body is read only when the engine is one that says so, and is small.
      const busyTest = res.status === 503 ? replica.profile?.busy : undefined;
      const body = busyTest ? await smallBody(res) : undefined;
      if (!busyTest) await res.body?.cancel().catch(() => {});
      clearDeadlines();
      const failure: Failure = errorSays(busyTest, res.status, false, body)
        ? { kind: "busy", reason: "its queue is full (HTTP 503: the engine turned it away before computing anything)" }
        : { kind: "status", reason: `HTTP ${res.status}` };
      stop ??= { kind: "failure", failure };
      return fail();
    }

    // An answer of known, bounded length that is not a stream (a non-streamed completion, an
    // error, /v1/models) is read whole: one read, no relay, and a failure while reading it
    // can still fail over. Anything else waits for its first chunk, until which the same holds.
    const contentType = res.headers.get("content-type") ?? "";
    const isSse = contentType.includes("text/event-stream");
    const declared = Number(res.headers.get("content-length") ?? Number.NaN);
    const whole = !isSse && declared >= 0 && declared <= WHOLE_RESPONSE_MAX;
    let all: Uint8Array | undefined;
    const reader = whole ? undefined : res.body?.getReader();
    let first: { done: boolean; value?: Uint8Array } | undefined;
    try {
      if (whole) all = await res.bytes();
      else if (reader) first = await reader.read();
    } catch (error) {
      return fail(error, " before the first byte");
    }
    clearDeadlines();
    if (stop) {
      reader?.cancel().catch(() => {});
      return fail();
    }
    // The engine turned it away for want of KV beside the requests it runs (llama.cpp's
    // unified KV), producing nothing: nothing reached the client, another replica can take it.
    if (errorSays(replica.profile?.kvFull, res.status, isSse, all ?? first?.value)) {
      reader?.cancel().catch(() => {});
      const wall = replica.turnedAwayFull(tokens, Date.now(), routing.capacity_window_ms);
      overflowed(replica);
      const reason = `its KV is full ("Context size has been exceeded." with ~${Math.round(wall).toLocaleString("en-US")} prompt tokens in flight there: requests wait beyond that for ${ms(routing.capacity_window_ms)})`;
      stop = { kind: "failure", failure: { kind: "full", reason } };
      return fail();
    }
    // An error the engine sent after computing the prompt, which it keeps (EngineProfile.keptPrompt).
    const keptPrompt = !isSse && errorSays(replica.profile?.keptPrompt, res.status, isSse, all ?? first?.value);
    const ttftMs = now() - ctx.started;
    // A streamed answer's first byte ends its prefill. A whole answer says nothing about it,
    // nor does an error (a 400 for a prompt over the context comes at once, prefilling
    // nothing: taken as a sample, one made a replica's rate ten times too fast).
    const prefilled = ctx.shape.stream && ctx.shape.endpoint !== "other" && res.status >= 200 && res.status < 300;
    replica.prefill.end(prefill, prefilled ? now() - dispatched : undefined);
    if (prefilled) replica.flights.firstByte(inSlot, Date.now());
    deps.cluster?.loadChanged();
    // It answered. A 500 (or 501 …) is passed on as the engine's verdict on this request, not on its health.
    if (res.status < 500) fleet.succeeded(replica);
    else fleet.released(replica);

    const headers = downstreamHeaders(res.headers);
    headers.set("x-llmroute-replica", replica.name);
    headers.set("x-llmroute-route", route);

    const tap = new ResponseTap(contentType);
    const stripper = added !== undefined && isSse ? new UsageStripper() : undefined;
    let finished = false;
    const finish = (ended: Outcome, error?: string) => {
      if (finished) return;
      finished = true;
      const usage: TapResult = tap.finish();
      // A complete answer is "ok" only when it is a success: the engine's error is its verdict,
      // in the status or as the stream's error event.
      let outcome: Outcome = ended !== "ok" ? ended : res.status >= 500 ? "upstream_error" : res.status >= 400 ? "upstream_rejected" : "ok";
      if (outcome === "ok" && usage.streamError !== undefined) {
        outcome = "upstream_error_in_stream";
        error = `the engine ended the stream with an error event: ${clip(usage.streamError)}`;
        // The KV overflowed while it streamed: the same clearing as before a first byte.
        if (replica.profile?.kvFull?.(usage.streamErrorEvent)) overflowed(replica);
      }
      release();
      flights.delete(flight);
      replica.inflight--;
      // An answer that ran its course (or that its client left) leaves its prompt in its slot.
      replica.ended(decided.tag, outcome === "ok" || outcome === "client_cancelled");
      replica.leave(tokens);
      replica.flights.end(inSlot, Date.now(), outcome === "ok" && prefilled);
      if (outcome === "ok") replica.served++;
      const est = decided.estimate;
      let verdict: Verdict | undefined;
      // A replica a reload removed is not remembered for anything.
      if (!replica.removed) {
        if (usage.responseId && res.status < 300) router.rememberResponse(usage.responseId, replica.name);
        // A previous_response_id follow-up's prompt_tokens count the stored conversation, of
        // which the router saw only the new input: learnt from, the ratio collapses. So do those
        // of a prompt the engine cut to its context (Ollama).
        if (usage.promptTokens && est.totalChars > 0 && !ctx.shape.previousResponseId && !cutByEngine) replica.observeTokens(est.totalChars, usage.promptTokens);
        if (res.status < 300) {
          const profile = replica.profile;
          const endpoint = ctx.shape.endpoint;
          if (replica.facts && showsCachedTokens(profile, endpoint, usage)) replica.facts.cachedTokensSeen = true;
          verdict = router.feedback(replica.name, est, reportedCachedTokens(profile, endpoint, usage, replica.facts?.cachedTokensSeen ?? false), decided.committedAt);
        }
        // An error answer (a 400 for a too-long prompt, a 500) computed no KV to remember,
        // unless the engine says it did (llama.cpp's output parser fails after the prompt).
        else if (res.status >= 400 && !keptPrompt) decided.retract?.();
      }
      // What this answer taught (its response id, a correction) and its decision go out before its end does.
      deps.cluster?.answered(decided.committedAt);
      record({
        endpoint: ctx.shape.endpoint,
        model: ctx.shape.model,
        replica: replica.name,
        route,
        status: res.status,
        stream: ctx.shape.stream,
        outcome,
        promptTokens: usage.promptTokens,
        cachedTokens: usage.cachedTokens,
        completionTokens: usage.completionTokens,
        availableTokens: Math.round(est.availableChars / est.charsPerToken),
        capturedTokens: Math.round(est.capturedChars / est.charsPerToken),
        ...(verdict ? { verdict } : {}),
        ttftMs: ctx.shape.stream ? ttftMs : undefined,
        totalMs: now() - ctx.started,
        failovers: ctx.failovers,
        error,
      });
    };

    if (all !== undefined || !reader || first?.done) {
      if (all && all.byteLength > 0) tap.push(all);
      finish("ok");
      return { kind: "response", response: new Response(all && all.byteLength > 0 ? all : null, { status: res.status, headers }) };
    }

    /** Pass a chunk on; false when nothing of it is for the client (the usage stripper took it all). */
    const relay = (controller: ReadableStreamDefaultController<Uint8Array>, chunk: Uint8Array): boolean => {
      tap.push(chunk);
      const out = stripper ? stripper.push(chunk) : chunk;
      if (out.byteLength === 0) return false;
      controller.enqueue(out);
      return true;
    };
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        relay(controller, first!.value!);
      },
      async pull(controller) {
        // A pull that enqueues nothing is not called again, and the client would wait forever
        // (the stripper takes a usage chunk that arrives on its own whole): read on until
        // something is for the client, or the end.
        for (;;) {
          if (await relayNext(controller)) return;
        }
      },
      cancel() {
        // The client went away (or the drain timeout closed its connection): stop the engine's work so it frees the KV.
        const outcome = stop?.kind === "drain" ? "drain_timeout" : "client_cancelled";
        abort({ kind: "client" });
        reader.cancel().catch(() => {});
        finish(outcome);
      },
    });

    /** Read the next upstream chunk and pass it on; true once the client got something or the stream ended. */
    async function relayNext(controller: ReadableStreamDefaultController<Uint8Array>): Promise<boolean> {
      // Only while the client reads: a client that does not read holds the upstream back, not this timer.
      const idle = setTimeout(timeout("stream_idle", `no data for ${ms(routing.stream_idle_timeout_ms)} (routing.stream_idle_timeout)`), routing.stream_idle_timeout_ms);
      try {
        const { done, value } = await reader!.read();
        if (done) {
          const rest = stripper?.end();
          if (rest && rest.byteLength > 0) controller.enqueue(rest);
          finish("ok");
          controller.close();
          return true;
        }
        return relay(controller, value);
      } catch (error) {
        if (stop?.kind === "client" || finished) return true;
        // Bytes already reached the client: never retry. End the stream with an error.
        let outcome: Outcome = "upstream_error";
        let status = 502;
        let message: string;
        if (stop?.kind === "drain") {
          outcome = "drain_timeout";
          status = 503;
          message = "the router is shutting down: server.drain_timeout passed before this response finished";
        } else {
          const failure = stop?.kind === "failure" ? stop.failure : classify(error, " after the response started");
          if (failure.timer) replica.timeouts[failure.timer]++;
          if (failure.kind === "timeout") {
            outcome = "timeout";
            status = 504;
          }
          fleet.failed(replica, failure);
          message = `replica ${replica.name} failed mid-stream: ${failure.reason}`;
          log.warn("upstream failed mid-response", { replica: replica.name, reason: failure.reason });
        }
        upstream.abort();
        finish(outcome, message);
        if (isSse) {
          controller.enqueue(new TextEncoder().encode(streamErrorEvent(ctx.shape.endpoint, message, status)));
          controller.close();
        } else controller.error(error);
        return true;
      } finally {
        clearTimeout(idle);
      }
    }
    flight.streaming = true;
    return { kind: "response", response: new Response(body, { status: res.status, headers }) };
  }

  return {
    forward,
    reject: (url, status, message) => reject(url, status, message),
    get active() {
      return flights.size;
    },
    cutAll() {
      for (const flight of [...flights]) {
        flight.cut = true;
        flight.abort?.();
      }
    },
  };
}

/**
 * Does this error answer say what `test` looks for (an EngineProfile reading of the engine's
 * error object)? A whole error body (status ≥ 500), or a stream whose first event is an error:
 * llama-server sends it as one small write, so it is the whole first chunk.
 */
function errorSays(test: ((error: unknown) => boolean) | undefined, status: number, isSse: boolean, bytes: Uint8Array | undefined): boolean {
  if (!test || !bytes || bytes.length > 4096 || (!isSse && status < 500)) return false;
  const text = new TextDecoder().decode(bytes);
  const json = isSse ? /^(?:event:[^\n]*\n)?data: ?(\{[^\n]*\})\n/.exec(text)?.[1] : text;
  if (json === undefined) return false;
  try {
    return test(JSON.parse(json));
  } catch {
    return false;
  }
}

/**
 * The body of an error answer, when it is small (an error object: at most 4,096 bytes, with or
 * without a Content-Length) and comes at once (within SMALL_BODY_MS); else undefined, and the
 * rest is cancelled.
 */
async function smallBody(res: Response): Promise<Uint8Array | undefined> {
  const declared = Number(res.headers.get("content-length") ?? Number.NaN);
  if (declared > 4096 || !res.body) {
    await res.body?.cancel().catch(() => {});
    return undefined;
  }
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  let timer: Timer | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), SMALL_BODY_MS)));
  try {
    while (size <= 4096) {
      const chunk = await Promise.race([reader.read(), late]);
      if (chunk === "late") break;
      if (chunk.done) return Buffer.concat(parts);
      parts.push(chunk.value);
      size += chunk.value.byteLength;
    }
  } catch {
    // Cut while reading: no body to judge.
  } finally {
    clearTimeout(timer);
  }
  await reader.cancel().catch(() => {});
  return undefined;
}

/**
 * `fetch`, and once more on a fresh connection when a kept-alive one is reset before any byte
 * of answer (Bun's `keepalive: false` takes no connection from its pool — src/http/
 * HTTPContext.rs `connect` looks there only when `is_keep_alive_possible` — and does not put
 * this one back). llama-server closes every connection that carried a streamed answer though
 * its headers said keep-alive (tools/server/server-http.cpp process_handler_response: the
 * chunked content provider returns false after `sink.done()`; cpp-httplib's
 * write_content_chunked takes that as a cancel, and process_server_socket_core ends the
 * keep-alive loop): a request that reuses it before the close arrives is reset, unread. Bun
 * sends a request without a body again by itself (a /health check on such a connection went
 * again on a new one); one with a body it does not. Not when `init.signal` has aborted (the
 * attempt's own deadline or cancel): that reset is the router's.
 */
async function fetchFreshOnReset(fetchFn: FetchLike, url: string, init: RequestInit & { timeout?: number | boolean }): Promise<Response> {
  try {
    return await fetchFn(url, init);
  } catch (error) {
    if (init.signal?.aborted || describeFetchError(error) !== "connection reset") throw error;
    return fetchFn(url, { ...init, keepalive: false });
  }
}

/** A fetch error, as health weighs it. */
function classify(error: unknown, when = ""): Failure {
  const reason = describeFetchError(error);
  if (reason === "connection refused") return { kind: "refused", reason };
  if (reason === "timed out") return { kind: "timeout", reason: `timed out${when}` };
  return { kind: "network", reason: `${reason}${when}` };
}

function ms(value: number): string {
  return value % 60_000 === 0 ? `${value / 60_000}m` : value % 1000 === 0 ? `${value / 1000}s` : `${value}ms`;
}

/** `current` if it has a replica not yet tried, else `snapshot` (the pool the request started with). */
function untriedOr(current: Replica[], tried: ReadonlySet<string>, snapshot: Replica[]): Replica[] {
  return current.some((r) => !tried.has(r.name)) ? current : snapshot;
}
