/**
 * The proxy flow, in one place: read the body once (bounded), decide, forward the client's
 * original bytes, fail over only before the first byte reaches the client, relay the
 * stream unbuffered while tapping usage on the side, and abort upstream when the client
 * goes away. `fetch` and the clock are injected; Bun.serve lives in server.ts.
 */
import type { Config } from "../config.ts";
import { authHeaders, describeFetchError, type FetchLike, type Fleet, type Replica } from "../fleet/fleet.ts";
import type { Log } from "../log.ts";
import type { Hasher } from "../route/hash.ts";
import { prefixChains } from "../route/chain.ts";
import type { RouteInput } from "../route/policy.ts";
import type { FleetView, RouteEstimate, Router, Verdict } from "../route/router.ts";
import { endpointOf, shapeOf, type Endpoint, type RequestShape } from "../route/shape.ts";
import { DROP_REQUEST_HEADERS, DROP_RESPONSE_HEADERS, RETRYABLE_STATUS } from "./_constants.ts";
import { errorResponse, streamErrorEvent } from "./errors.ts";
import { ResponseTap, type TapResult } from "./tap.ts";

/** What happened to one request, for the log line and the metrics. */
export interface RequestRecord {
  endpoint: Endpoint;
  model?: string;
  replica?: string;
  route?: string;
  status: number;
  stream: boolean;
  outcome: "ok" | "client_cancelled" | "upstream_error" | "rejected" | "no_replica";
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
  forward(req: Request, url: URL): Promise<Response>;
}

type Attempt =
  | { kind: "response"; response: Response }
  | { kind: "failed"; reason: string }
  | { kind: "client-gone" };

export function createProxy(deps: ProxyDeps): Proxy {
  const { router, hasher, log } = deps;
  const upstreamFetch = deps.fetch ?? fetch;
  const now = deps.now ?? (() => performance.now());

  const record = (r: RequestRecord) => {
    deps.onRecord?.(r);
    log.info("request", {
      endpoint: r.endpoint,
      model: r.model,
      replica: r.replica,
      route: r.route,
      status: r.status,
      outcome: r.outcome === "ok" ? undefined : r.outcome,
      prompt_tokens: r.promptTokens,
      cached_tokens: r.cachedTokens,
      ttft_ms: r.ttftMs === undefined ? undefined : Math.round(r.ttftMs),
      total_ms: Math.round(r.totalMs),
    });
  };

  async function forward(req: Request, url: URL): Promise<Response> {
    const started = now();
    const endpoint = endpointOf(url.pathname);
    const reject = (status: number, message: string, param?: string) => {
      record({ endpoint, status, stream: false, outcome: "rejected", totalMs: now() - started, failovers: 0 });
      return errorResponse(endpoint, status, message, { param });
    };

    if (endpoint !== "other" && req.method !== "POST") return reject(405, `${url.pathname} takes POST`);

    const config = deps.config();
    const fleet = deps.fleet;
    const bytes = await readBody(req, config.server.max_body_bytes);
    if (bytes === "too-large") {
      return reject(413, `request body is larger than server.max_body (${config.server.max_body_bytes} bytes)`);
    }

    // Routed endpoints must carry a JSON object. Others (/tokenize, …) pass through as
    // they are; if they happen to be JSON, their `model` still picks the pool.
    let body: unknown;
    if (endpoint !== "other" || (bytes.byteLength > 0 && (req.headers.get("content-type") ?? "").includes("json"))) {
      try {
        body = JSON.parse(new TextDecoder().decode(bytes));
      } catch (error) {
        if (endpoint !== "other") return reject(400, `request body is not valid JSON: ${(error as Error).message}`);
      }
      if (endpoint !== "other" && (!body || typeof body !== "object" || Array.isArray(body))) {
        return reject(400, "request body must be a JSON object");
      }
    }

    const shape = shapeOf(endpoint, body, { tenant: req.headers.get("x-llmroute-tenant"), session: req.headers.get("x-session-id") });
    const pool = fleet.pool(shape.model);
    if (shape.model !== undefined && pool.length === 0) {
      return reject(404, `The model \`${shape.model}\` does not exist on any replica.`, "model");
    }
    const input: RouteInput = { shape, chains: endpoint === "other" ? [] : prefixChains(shape, hasher, config.routing.chunk_chars) };
    // A follow-up can reach this instance before the stream brings its response id here.
    const previous = shape.previousResponseId;
    if (previous && deps.cluster && router.responseOwner(previous) === undefined) await deps.cluster.responseOwner(previous);

    const tried = new Set<string>();
    const failures: string[] = [];
    for (let attempt = 0; attempt < config.routing.max_attempts; attempt++) {
      const views = pool.map((r) => {
        const view = deps.cluster ? deps.cluster.view(r) : r.view();
        if (tried.has(r.name)) view.healthy = false;
        return view;
      });
      const committedAt = Date.now();
      const decision = router.route(input, views, committedAt);
      if (!decision) break;
      const replica = fleet.byName(decision.replica)!;
      router.commit(input, decision, committedAt);
      tried.add(replica.name);
      const route = attempt === 0 ? decision.reason : `${decision.reason},failover`;

      const result = await attemptUpstream(req, url, bytes, fleet, replica, route, {
        shape,
        estimate: decision.estimate,
        committedAt,
        started,
        failovers: attempt,
      });
      if (result.kind === "response") return result.response;
      if (result.kind === "client-gone") {
        record({ endpoint, model: shape.model, replica: replica.name, route, status: 499, stream: shape.stream, outcome: "client_cancelled", totalMs: now() - started, failovers: attempt });
        return new Response(null, { status: 499 });
      }
      replica.failovers++;
      fleet.demote(replica, result.reason);
      failures.push(`${replica.name}: ${result.reason}`);
      log.warn("failover", { replica: replica.name, reason: result.reason, attempt: attempt + 1 });
    }

    const message =
      failures.length > 0
        ? `no replica could serve the request (${failures.join("; ")})`
        : `no healthy replica${shape.model ? ` serves model \`${shape.model}\`` : ""}`;
    record({ endpoint, model: shape.model, status: 503, stream: shape.stream, outcome: "no_replica", totalMs: now() - started, failovers: failures.length });
    return errorResponse(endpoint, 503, message, { headers: { "retry-after": "1" } });
  }

  async function attemptUpstream(
    req: Request,
    url: URL,
    bytes: Uint8Array,
    fleet: Fleet,
    replica: Replica,
    route: string,
    ctx: { shape: RequestShape; estimate: RouteEstimate; committedAt: number; started: number; failovers: number },
  ): Promise<Attempt> {
    const upstream = new AbortController();
    const onClientAbort = () => upstream.abort();
    req.signal.addEventListener("abort", onClientAbort, { once: true });
    const release = () => req.signal.removeEventListener("abort", onClientAbort);
    replica.inflight++;
    const dispatched = now();
    const prefill = replica.prefill.begin(ctx.estimate.uncachedTokens, ctx.committedAt);
    deps.cluster?.loadChanged();

    const fail = (reason: string): Attempt => {
      replica.inflight--;
      replica.prefill.end(prefill);
      deps.cluster?.loadChanged();
      release();
      return req.signal.aborted ? { kind: "client-gone" } : { kind: "failed", reason };
    };

    let res: Response;
    try {
      res = await upstreamFetch(`${replica.config.url}${url.pathname}${url.search}`, {
        method: req.method,
        headers: upstreamHeaders(req.headers, replica, ctx.shape.endpoint),
        body: req.method === "GET" || req.method === "HEAD" ? undefined : bytes,
        signal: upstream.signal,
        redirect: "manual",
        // A cold prefill can keep a socket silent for minutes; the client decides when to give up.
        timeout: false,
      });
    } catch (error) {
      return fail(describeFetchError(error));
    }
    if (RETRYABLE_STATUS.has(res.status)) {
      await res.body?.cancel().catch(() => {});
      return fail(`HTTP ${res.status}`);
    }

    // Wait for the first chunk before answering: until then a failure can still fail over.
    const reader = res.body?.getReader();
    let first: { done: boolean; value?: Uint8Array } | undefined;
    if (reader) {
      try {
        first = await reader.read();
      } catch (error) {
        return fail(`${describeFetchError(error)} before the first byte`);
      }
    }
    const ttftMs = now() - ctx.started;
    // A streamed response's first byte ends its prefill; a whole answer says nothing about it.
    replica.prefill.end(prefill, ctx.shape.stream ? now() - dispatched : undefined);
    deps.cluster?.loadChanged();

    const headers = new Headers();
    res.headers.forEach((value, key) => {
      if (!DROP_RESPONSE_HEADERS.has(key)) headers.append(key, value);
    });
    headers.set("x-llmroute-replica", replica.name);
    headers.set("x-llmroute-route", route);

    const tap = new ResponseTap(res.headers.get("content-type"));
    const isSse = (res.headers.get("content-type") ?? "").includes("text/event-stream");
    let finished = false;
    const finish = (outcome: RequestRecord["outcome"]) => {
      if (finished) return;
      finished = true;
      release();
      replica.inflight--;
      if (outcome === "ok") replica.served++;
      const usage: TapResult = tap.finish();
      if (usage.responseId && res.status < 300) router.rememberResponse(usage.responseId, replica.name);
      const est = ctx.estimate;
      if (usage.promptTokens && est.totalChars > 0) replica.observeTokens(est.totalChars, usage.promptTokens);
      const verdict = res.status < 300 ? router.feedback(replica.name, est, usage.cachedTokens) : undefined;
      // What this answer taught (its response id, a correction) and its decision go out before its end does.
      deps.cluster?.answered(ctx.committedAt);
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
      });
    };

    if (!reader || first?.done) {
      finish("ok");
      return { kind: "response", response: new Response(null, { status: res.status, headers }) };
    }

    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        tap.push(first!.value!);
        controller.enqueue(first!.value!);
      },
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            finish("ok");
            controller.close();
            return;
          }
          tap.push(value);
          controller.enqueue(value);
        } catch (error) {
          if (req.signal.aborted || finished) return;
          // Bytes already reached the client: never retry. End the stream with an error.
          const reason = `${describeFetchError(error)} after the response started`;
          fleet.demote(replica, reason);
          log.warn("upstream failed mid-response", { replica: replica.name, reason });
          finish("upstream_error");
          if (isSse) {
            controller.enqueue(new TextEncoder().encode(streamErrorEvent(ctx.shape.endpoint, `replica ${replica.name} failed mid-stream: ${reason}`)));
            controller.close();
          } else controller.error(error);
        }
      },
      cancel() {
        // The client went away: stop the engine's work so it frees the KV.
        upstream.abort();
        reader.cancel().catch(() => {});
        finish("client_cancelled");
      },
    });
    return { kind: "response", response: new Response(body, { status: res.status, headers }) };
  }

  return { forward };
}

function upstreamHeaders(incoming: Headers, replica: Replica, endpoint: Endpoint): Headers {
  const headers = new Headers();
  incoming.forEach((value, key) => {
    if (!DROP_REQUEST_HEADERS.has(key)) headers.append(key, value);
  });
  for (const [k, v] of Object.entries(authHeaders(replica.config))) headers.set(k, v);
  if (endpoint === "messages" && replica.config.api_key) headers.set("x-api-key", replica.config.api_key);
  return headers;
}

/** The body, or "too-large" as soon as it passes `limit` bytes (without reading the rest). */
async function readBody(req: Request, limit: number): Promise<Uint8Array | "too-large"> {
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (declared > limit) return "too-large";
  if (!req.body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of req.body) {
    total += chunk.byteLength;
    if (total > limit) return "too-large";
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
