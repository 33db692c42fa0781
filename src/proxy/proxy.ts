/**
 * The proxy flow as named steps (Caddy's reverse_proxy: ServeHTTP → proxyLoopIteration →
 * reverseProxy → finalizeResponse, with the retry rule alone): `forward` reads and shapes the
 * request (request.ts), `route` runs the loop — decide, commit, one `attempt` (attempt.ts:
 * admission at the KV wall, send, the deadlines before the first byte) — and asks `retryable`
 * (retry.ts) after a failure; an answer goes to the `Relay` (relay.ts: stream, usage rewrite,
 * idle deadline, the error event mid-stream) and ends in one record (outcome.ts). A request
 * keeps the replica objects it started with, so a reload never pulls one from under it.
 * `fetch`, both clocks and the connect probe are injected; Bun.serve lives in server.ts.
 */
import type { Config } from "../config.ts";
import type { FetchLike } from "../engines/discover.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Failure } from "../fleet/failure.ts";
import type { Replica } from "../fleet/replica.ts";
import { clip, type Log } from "../log.ts";
import type { Hasher } from "../route/hash.ts";
import type { FleetView, Routed, Router } from "../route/router.ts";
import { endpointOf } from "../route/shape.ts";
import { attempt, InFlight, PROBE_FRESH_MS, type Answer, type AttemptDeps, type Decided } from "./attempt.ts";
import { errorResponse } from "./errors.ts";
import { downstreamHeaders, type ClientInfo } from "./headers.ts";
import { answerOutcome, exhaustedEnding, learnFromAnswer, publishRecord, requestRecord, type Ending, type Outcome, type RequestRecord, type RequestSeen } from "./outcome.ts";
import { createReachability, type Reachability } from "./reachability.ts";
import { Relay } from "./relay.ts";
import { BODY_TIMEOUT_MS, readRequest, type RequestContext } from "./request.ts";
import { computedNothing, retryable } from "./retry.ts";
import { holdForSlot } from "./slot-hold.ts";
import type { TapResult } from "./tap.ts";

export type { Outcome, RequestRecord } from "./outcome.ts";

/** Retry-After for a request whose only possible replica is down (it is re-checked this often). */
const RETRY_AFTER_S = 2;

export interface ProxyDeps {
  /** Read per request, so a reloaded config applies to the next request. */
  config: () => Pick<Config, "server" | "routing">;
  fleet: Fleet;
  router: Router;
  hasher: Hasher;
  log: Log;
  fetch?: FetchLike;
  /** Durations: time to first byte, total time, prefill time (default performance.now). */
  monotonic?: () => number;
  /** Times shared with the index and peers: commit times, the KV wall, the slot queue (default Date.now). */
  wallClock?: () => number;
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

/** Where a request stands in its loop over replicas. */
class Tries {
  readonly tried = new Set<string>();
  readonly failures: string[] = [];
  allTimedOut = true;
  /** While hybrid holds it for a busy slot: the reason it was held, and until when it may wait in all. */
  hold?: { reason: string; until: number };
  /** Its Responses API state is on this replica, which cannot take it. */
  ownerDown?: string;
  failovers = 0;
}

export function createProxy(deps: ProxyDeps): Proxy {
  const { router, hasher, log } = deps;
  const monotonic = deps.monotonic ?? (() => performance.now());
  const wallClock = deps.wallClock ?? Date.now;
  const bodyTimeoutMs = deps.bodyTimeoutMs ?? BODY_TIMEOUT_MS;
  /** Every request in flight, until its response is complete. */
  const flights = new Set<InFlight>();
  const attemptDeps: AttemptDeps = {
    fleet: deps.fleet,
    fetch: deps.fetch ?? fetch,
    reachability: deps.reachability ?? createReachability({ freshMs: PROBE_FRESH_MS }),
    monotonic,
    wallClock,
    ...(deps.cluster ? { loadChanged: () => deps.cluster!.loadChanged() } : {}),
    // A llama.cpp unified KV overflowed there: forget the prompts it purged from idle slots (RunningCommits.overflowCleared).
    overflowed: (replica) => {
      if (!replica.removed) router.forgetCommits(replica.name, replica.running.overflowCleared());
    },
  };

  /** The one way a request ends without an answer relayed: its record, and the client's response. */
  const end = (seen: RequestSeen, ending: Ending, response: Response): Response => {
    publishRecord(requestRecord(seen, ending, monotonic()), log, deps.onRecord);
    return response;
  };

  function reject(url: URL, status: number, message: string, started = monotonic(), param?: string): Response {
    const endpoint = endpointOf(url.pathname);
    return end({ endpoint, stream: false, started }, { status, outcome: "rejected", failovers: 0, error: message }, errorResponse(endpoint, status, message, { param }));
  }

  async function forward(req: Request, url: URL, client: ClientInfo = {}): Promise<Response> {
    const flight = new InFlight();
    flights.add(flight);
    try {
      const started = monotonic();
      const read = await readRequest(req, url, client, started, { config: deps.config(), hasher, bodyTimeoutMs });
      if (read.kind === "rejected") return reject(url, read.status, read.message, started, read.param);
      if (read.kind === "cancelled") {
        const seen = { endpoint: endpointOf(url.pathname), stream: false, started };
        return end(seen, { status: 499, outcome: "client_cancelled", failovers: 0, error: read.message }, new Response(null, { status: 499 }));
      }
      return await route(read.ctx, flight);
    } finally {
      // A streaming response stays in flight until its last byte (or its cut).
      if (!flight.streaming) flights.delete(flight);
    }
  }

  /** The retry loop (Caddy's ServeHTTP): decide, attempt, and after a failure ask the retry rule. */
  async function route(ctx: RequestContext, flight: InFlight): Promise<Response> {
    const { shape, input } = ctx;
    const fleet = deps.fleet;
    const seen: RequestSeen = { endpoint: shape.endpoint, model: shape.model, stream: shape.stream, started: ctx.started };
    // The pool is this request's snapshot: a reload may replace fleet.replicas meanwhile.
    const pool = fleet.pool(shape.model);
    if (shape.model !== undefined && pool.length === 0) return reject(ctx.url, 404, `The model \`${clip(shape.model)}\` does not exist on any replica.`, ctx.started, "model");
    const owner = await responseOwner(shape.previousResponseId);
    const tries = new Tries();
    for (let n = 0; n < ctx.routing.max_attempts && !flight.cut; n++) {
      // A failover picks from the fleet as it is now (a reload may have removed or added
      // replicas meanwhile); only when none of those is left untried, from the snapshot. So
      // does a request routed again after a hold.
      const candidates = n === 0 && !tries.hold ? pool : poolWithUntried(fleet.pool(shape.model), tries.tried, pool);
      const { views, panic } = fleet.views(candidates, tries.tried, shape.model, deps.cluster ? (r) => deps.cluster!.view(r) : undefined);
      // Its replica is here but cannot take it: the state exists nowhere else. (A replica
      // outside this pool, e.g. serving another model, is the engines' business.)
      if (owner && views.some((v) => v.name === owner && !v.healthy)) {
        tries.ownerDown = owner;
        break;
      }
      const committedAt = wallClock();
      const decision = router.route(input, views, committedAt);
      if (!decision) break;
      const replica = candidates.find((r) => r.name === decision.replica)!;
      if (n === 0 && decision.estimate.busyWith !== undefined) {
        const waited = await holdForSlot(replica, decision.estimate, tries.hold?.until, ctx.req.signal, flight, wallClock);
        if (waited) {
          tries.hold ??= { reason: decision.reason, until: waited.until };
          if (flight.cut) break;
          if (ctx.req.signal.aborted) {
            return end(seen, { status: 499, outcome: "client_cancelled", failovers: 0, replica: replica.name, route: `${tries.hold.reason},held` }, new Response(null, { status: 499 }));
          }
          // Routed again from the fleet as it is now: the slot is free, or another request
          // held for it took it first (then this one may wait for that one, within its time).
          n--;
          continue;
        }
      }
      const routeName = `${decision.reason}${tries.hold ? ",held" : ""}${n === 0 ? "" : ",failover"}`;
      const result = await attemptOn(router, attemptDeps, ctx, flight, candidates, replica, decision, committedAt, panic, tries);
      if (result.kind === "answer") return relay({ deps, attemptDeps, flights, monotonic }, ctx, flight, result.answer, result.decided, routeName, tries.failovers);
      if (result.kind === "client-gone") {
        return end(seen, { status: 499, outcome: "client_cancelled", failovers: n, replica: replica.name, route: routeName }, new Response(null, { status: 499 }));
      }
      if (result.kind === "cut") break;
      if (!failedOver(deps.fleet, log, replica, decision, result.failure, result.decided, tries, n)) break;
    }
    const ending = exhaustedEnding({ cut: flight.cut, ownerDown: tries.ownerDown, failures: tries.failures, allTimedOut: tries.allTimedOut, shape });
    return end(seen, ending, errorResponse(shape.endpoint, ending.status, ending.error!, { headers: { "retry-after": String(RETRY_AFTER_S) } }));
  }

  /** A Responses API follow-up can only be served where its response is stored; it can reach this instance before the cluster brings the id here. */
  async function responseOwner(previous: string | undefined): Promise<string | undefined> {
    if (!previous) return undefined;
    if (deps.cluster && router.responseOwner(previous) === undefined) await deps.cluster.responseOwner(previous);
    return router.responseOwner(previous);
  }

  return {
    forward,
    reject: (url, status, message) => reject(url, status, message),
    get active() {
      return flights.size;
    },
    cutAll() {
      for (const flight of [...flights]) flight.cutNow();
    },
  };
}

/** Commit the decision and make one attempt at `replica`. */
async function attemptOn(router: Router, attemptDeps: AttemptDeps, ctx: RequestContext, flight: InFlight, candidates: Replica[], replica: Replica, decision: Routed, committedAt: number, panic: boolean, tries: Tries) {
  // A replica a reload removed still serves this request, but is not remembered.
  const retract = replica.removed ? undefined : router.commit(ctx.input, decision, committedAt);
  // A conversation left its card's KV wall: what waiting there had cost is paid by the move
  // (taken back if the move fails before the first byte).
  const unpay = decision.from ? candidates.find((r) => r.name === decision.from)?.wall.payWaits(committedAt) : undefined;
  attemptDeps.fleet.dispatched(replica, panic);
  tries.tried.add(replica.name);
  const decided: Decided = { estimate: decision.estimate, committedAt, tag: retract?.tag ?? 0, retract };
  const result = await attempt(ctx, replica, flight, decided, attemptDeps);
  if (result.kind !== "answer") unpay?.();
  return { ...result, decided };
}

/** After a failed attempt: what the failure says of the replica, and whether the retry rule lets the request go on. */
function failedOver(fleet: Fleet, log: Log, replica: Replica, decision: Routed, failure: Failure, decided: Decided, tries: Tries, n: number): boolean {
  if (computedNothing(failure)) decided.retract?.();
  if (failure.timer) replica.stats.timeouts[failure.timer]++;
  tries.allTimedOut &&= failure.kind === "timeout" || failure.kind === "wall";
  fleet.health.failed(replica, failure);
  tries.failures.push(`${replica.name}: ${failure.reason}`);
  const rule = retryable(failure, decision.reason);
  if (rule === "same-too") tries.tried.delete(replica.name);
  if (rule === "never") {
    tries.ownerDown = replica.name;
    return false;
  }
  replica.stats.failovers++;
  tries.failovers = n + 1;
  log.warn("failover", { replica: replica.name, reason: failure.reason, attempt: n + 1 });
  return true;
}

/** What relaying an answer needs of the proxy around it. */
interface RelayEnv {
  deps: ProxyDeps;
  attemptDeps: AttemptDeps;
  flights: Set<InFlight>;
  monotonic: () => number;
}

/** Relay an answer to the client; when the relay ends, learn from it and record it (Caddy's finalizeResponse). */
function relay(env: RelayEnv, ctx: RequestContext, flight: InFlight, answer: Answer, decided: Decided, routeName: string, failovers: number): Response {
  const { deps, attemptDeps, flights, monotonic } = env;
  const replica = answer.dispatch.replica;
  const headers = downstreamHeaders(answer.res.headers);
  headers.set("x-llmroute-replica", replica.name);
  headers.set("x-llmroute-route", routeName);
  const finish = (ended: Outcome, usage: TapResult, error?: string) => {
    const status = answer.res.status;
    const { outcome, error: streamError } = answerOutcome(ended, status, usage);
    // The KV overflowed while it streamed: the same clearing as before a first byte.
    if (streamError && replica.profile?.kvFull?.(usage.streamErrorEvent)) attemptDeps.overflowed(replica);
    answer.control.detach();
    flights.delete(flight);
    // An answer that ran its course (or that its client left) leaves its prompt in its slot.
    answer.dispatch.end({ keptInSlot: outcome === "ok" || outcome === "client_cancelled", timedStream: outcome === "ok" && answer.prefilled });
    if (outcome === "ok") replica.stats.served++;
    const est = decided.estimate;
    const verdict = learnFromAnswer(deps.router, { replica, shape: ctx.shape, status, usage, estimate: est, committedAt: decided.committedAt, retract: decided.retract, cutByEngine: answer.cutByEngine, keptPrompt: answer.keptPrompt });
    // What this answer taught (its response id, a correction) and its decision go out before its end does.
    deps.cluster?.answered(decided.committedAt);
    const seen: RequestSeen = { endpoint: ctx.shape.endpoint, model: ctx.shape.model, stream: ctx.shape.stream, started: ctx.started };
    const answerFacts: Ending["answer"] = {
      promptTokens: usage.promptTokens,
      cachedTokens: usage.cachedTokens,
      completionTokens: usage.completionTokens,
      availableTokens: Math.round(est.availableChars / est.charsPerToken),
      capturedTokens: Math.round(est.capturedChars / est.charsPerToken),
      ...(verdict ? { verdict } : {}),
      ttftMs: ctx.shape.stream ? answer.ttftMs : undefined,
    };
    const ending: Ending = { status, outcome, failovers, replica: replica.name, route: routeName, error: streamError ?? error, answer: answerFacts };
    publishRecord(requestRecord(seen, ending, monotonic()), deps.log, deps.onRecord);
  };
  const relayed = new Relay(answer, { fleet: deps.fleet, log: deps.log, endpoint: ctx.shape.endpoint, idleTimeoutMs: ctx.routing.stream_idle_timeout_ms, onEnd: finish }).response(headers);
  if (relayed.streaming) flight.streaming = true;
  return relayed.response;
}

/** `current` if it has a replica not yet tried, else `snapshot` (the pool the request started with). */
function poolWithUntried(current: Replica[], tried: ReadonlySet<string>, snapshot: Replica[]): Replica[] {
  return current.some((r) => !tried.has(r.name)) ? current : snapshot;
}
