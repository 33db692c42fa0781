/**
 * One attempt at one replica (Caddy's `proxyLoopIteration` and `reverseProxy`): wait at its KV
 * wall if it stands, send the client's bytes, and hold the deadlines before the first byte —
 * the connect probe (routing.connect_timeout), the first byte (routing.first_byte_timeout) —
 * until the answer's first chunk is in. What comes back is an answer to relay, or why it
 * failed (to fail over), or that the client left or the drain cut it.
 */
import type { FetchLike } from "../engines/discover.ts";
import type { Dispatch } from "../fleet/dispatch.ts";
import { describeFetchError, failureOfFetchError, type Failure, type TimerKind } from "../fleet/failure.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Replica } from "../fleet/replica.ts";
import type { Commit, RouteEstimate } from "../route/router.ts";
import { upstreamHeaders } from "./headers.ts";
import type { Reachability } from "./reachability.ts";
import type { RequestContext } from "./request.ts";
import { RETRYABLE_STATUS } from "./retry.ts";

/** How long the body of a 503 may take once its headers are in, to be read for what it says (an engine's "busy"). */
const SMALL_BODY_MS = 2_000;

/** The largest error body read for what it says (an engine's error object). */
const SMALL_BODY_MAX = 4096;

/**
 * Bun's fetch has no connect timeout (its `timeout` is an idle timer that does not run
 * while connecting), so a request still without response headers this long after it was
 * sent has the replica's TCP port probed; the probe must connect within
 * routing.connect_timeout of the request's start.
 */
export const PROBE_AFTER_MS = 200;

/** A successful probe vouches for the replica's reachability this long (concurrent requests share it). */
export const PROBE_FRESH_MS = 1_000;

/** A non-stream answer up to this size (declared by content-length) is read whole instead of relayed. */
const WHOLE_RESPONSE_MAX = 16 << 20;

/** One request in flight: cut short by the drain timeout through `abort` while an attempt runs. */
export class InFlight {
  cut = false;
  /** Its response is streaming: it stays in flight until the stream ends. */
  streaming = false;
  private abortNow?: () => void;

  /** What cuts the step it is in (an attempt, a wait for a slot); undefined between steps. */
  onCut(abort: (() => void) | undefined): void {
    this.abortNow = abort;
    if (abort && this.cut) abort();
  }

  /** The drain timeout passed: end it now. */
  cutNow(): void {
    this.cut = true;
    this.abortNow?.();
  }
}

/** Why an attempt was aborted by the router (the fetch error itself says less). */
export type Stop = { kind: "failure"; failure: Failure } | { kind: "client" } | { kind: "drain" };

/**
 * The upstream request's abort, and why it was aborted (the first reason wins): a deadline
 * or a verdict on the answer, the client leaving, or the drain. Listens to the client and
 * the drain until `detach`.
 */
export class UpstreamControl {
  readonly controller = new AbortController();
  stop?: Stop;
  private readonly onClientAbort = () => this.abort({ kind: "client" });

  constructor(
    private readonly client: AbortSignal,
    private readonly flight: InFlight,
  ) {
    client.addEventListener("abort", this.onClientAbort, { once: true });
    flight.onCut(() => this.abort({ kind: "drain" }));
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  abort(why: Stop): void {
    this.stop ??= why;
    this.controller.abort();
  }

  /** The attempt has settled: no more listening to the client or the drain. */
  detach(): void {
    this.client.removeEventListener("abort", this.onClientAbort);
    this.flight.onCut(undefined);
  }
}

/** The deadlines before the first byte: the replica must be reachable by connect_timeout and answer by first_byte_timeout. */
class FirstByteDeadlines {
  private readonly firstByte: Timer;
  private readonly probe: Timer;
  private done = false;

  constructor(control: UpstreamControl, routing: RequestContext["routing"], reachability: Reachability, url: string) {
    this.firstByte = setTimeout(
      () => control.abort(timeout("first_byte", `no first byte within ${durationText(routing.first_byte_timeout_ms)} (routing.first_byte_timeout)`)),
      routing.first_byte_timeout_ms,
    );
    const probeAt = Math.min(PROBE_AFTER_MS, routing.connect_timeout_ms / 2);
    this.probe = setTimeout(async () => {
      const reach = await reachability.check(url, routing.connect_timeout_ms - probeAt);
      if (this.done || control.stop) return;
      if (reach === "timeout") control.abort(timeout("connect", `no TCP connection within ${durationText(routing.connect_timeout_ms)} (routing.connect_timeout)`));
      else if (reach === "refused") control.abort({ kind: "failure", failure: { kind: "refused", reason: "connection refused" } });
    }, probeAt);
  }

  /** The response headers are in: it connected. */
  connected(): void {
    this.done = true;
    clearTimeout(this.probe);
  }

  clear(): void {
    this.done = true;
    clearTimeout(this.firstByte);
    clearTimeout(this.probe);
  }
}

export function timeout(timer: TimerKind, reason: string): Stop {
  return { kind: "failure", failure: { kind: "timeout", timer, reason } };
}

/** What the router decided for this attempt. */
export interface Decided {
  estimate: RouteEstimate;
  committedAt: number;
  /** Its commit's tag (0: not committed, a replica a reload removed). */
  tag: number;
  retract: Commit | undefined;
}

export interface AttemptDeps {
  fleet: Fleet;
  fetch: FetchLike;
  reachability: Reachability;
  /** Durations (prefill, time to first byte). */
  monotonic: () => number;
  /** Times shared with the index and peers (the KV wall, the slot queue). */
  wallClock: () => number;
  /** This instance's in-flight requests or queued prefill changed (other routers are told). */
  loadChanged?: () => void;
  /** A llama.cpp unified KV overflowed at `replica`: forget the prompts it purged from idle slots. */
  overflowed: (replica: Replica) => void;
}

/** One read of the answer's body. */
type ChunkRead = { done: boolean; value?: Uint8Array };
const readerOf = (res: Response) => res.body?.getReader();
type BodyReader = NonNullable<ReturnType<typeof readerOf>>;

/** An answer whose first chunk is in, for the relay. */
export interface Answer {
  res: Response;
  contentType: string;
  isSse: boolean;
  /** The whole body, when it was read whole (known, bounded length, not a stream). */
  whole?: Uint8Array;
  reader?: BodyReader;
  first?: ChunkRead;
  /** Usage was asked for on the client's behalf (its chunk is taken out of the stream). */
  usageAdded: boolean;
  /** A 2xx streamed answer to a prompt: its first byte ended its prefill. */
  prefilled: boolean;
  /** The engine kept the prompt of this error answer (EngineProfile.keptPrompt). */
  keptPrompt: boolean;
  /** The engine may have cut the prompt to its context. */
  cutByEngine: boolean;
  ttftMs: number;
  tokens: number;
  dispatch: Dispatch;
  control: UpstreamControl;
}

export type AttemptResult = { kind: "answer"; answer: Answer } | { kind: "failed"; failure: Failure } | { kind: "client-gone" } | { kind: "cut" };

/** One attempt: admission at the KV wall, send, the deadlines, and the first chunk of the answer. */
export async function attempt(ctx: RequestContext, replica: Replica, flight: InFlight, decided: Decided, deps: AttemptDeps): Promise<AttemptResult> {
  const { req, url, routing } = ctx;
  const control = new UpstreamControl(req.signal, flight);
  // Usage is asked for only from an engine that would not say the cached tokens otherwise
  // (llama.cpp's stream carries them unasked): then the client gets the engine's own bytes.
  const added = replica.usageUnasked(ctx.shape.endpoint) ? undefined : ctx.withUsage(replica.profile?.stream.usageAsked);
  const tokens = decided.estimate.totalChars / decided.estimate.charsPerToken;
  // Admitted at once, synchronously: no other decision runs between this one's commit and its dispatch.
  const admitted = admitAtWall(replica, tokens, control, routing.first_byte_timeout_ms, deps.wallClock);
  if (admitted !== true && !(await admitted)) {
    control.detach();
    if (control.stop?.kind === "failure") return { kind: "failed", failure: control.stop.failure };
    return notJudged(control, replica, deps.fleet);
  }
  const dispatch = replica.dispatch({
    tag: decided.tag,
    tokens,
    uncachedTokens: decided.estimate.uncachedTokens,
    committedAt: decided.committedAt,
    monotonic: deps.monotonic,
    wallClock: deps.wallClock,
    ...(deps.loadChanged ? { onLoadChanged: deps.loadChanged } : {}),
  });
  // Longer than the context its engine cuts prompts to: the usage will count what was kept.
  const cutByEngine = deps.fleet.watch.promptSent(replica, { tokens, model: ctx.shape.model, endpoint: ctx.shape.endpoint });
  const deadlines = new FirstByteDeadlines(control, routing, deps.reachability, replica.config.url);
  const fail = (error?: unknown, when = ""): AttemptResult => {
    deadlines.clear();
    dispatch.end({ keptInSlot: false, timedStream: false });
    control.detach();
    if (control.stop?.kind === "client" || control.stop?.kind === "drain" || req.signal.aborted) return notJudged(control, replica, deps.fleet);
    if (control.stop?.kind === "failure") return { kind: "failed", failure: control.stop.failure };
    return { kind: "failed", failure: failureOfFetchError(error, when) };
  };

  let res: Response;
  try {
    res = await fetchFreshOnReset(deps.fetch, `${replica.config.url}${url.pathname}${url.search}`, {
      method: req.method,
      headers: upstreamHeaders(req.headers, replica.config, ctx.shape.endpoint, ctx.client),
      body: req.method === "GET" || req.method === "HEAD" ? undefined : (added ?? ctx.bytes),
      signal: control.signal,
      redirect: "manual",
      // Our own deadlines apply (a cold prefill can keep a socket silent for minutes).
      timeout: false,
    });
  } catch (error) {
    return fail(error);
  }
  deadlines.connected();
  if (RETRYABLE_STATUS.has(res.status)) {
    const failure = await refusal(res, replica);
    control.stop ??= { kind: "failure", failure };
    return fail();
  }

  // An answer of known, bounded length that is not a stream (a non-streamed completion, an
  // error, /v1/models) is read whole: one read, no relay, and a failure while reading it
  // can still fail over. Anything else waits for its first chunk, until which the same holds.
  const contentType = res.headers.get("content-type") ?? "";
  const isSse = contentType.includes("text/event-stream");
  const declared = Number(res.headers.get("content-length") ?? Number.NaN);
  const readWhole = !isSse && declared >= 0 && declared <= WHOLE_RESPONSE_MAX;
  const reader = readWhole ? undefined : readerOf(res);
  let whole: Uint8Array | undefined;
  let first: ChunkRead | undefined;
  try {
    if (readWhole) whole = await res.bytes();
    else if (reader) first = await reader.read();
  } catch (error) {
    return fail(error, " before the first byte");
  }
  deadlines.clear();
  if (control.stop) {
    reader?.cancel().catch(() => {});
    return fail();
  }
  const head = whole ?? first?.value;
  // The engine turned it away for want of KV beside the requests it runs (llama.cpp's
  // unified KV), producing nothing: nothing reached the client, another replica can take it.
  if (errorBodySays(replica.profile?.kvFull, res.status, isSse, head)) {
    reader?.cancel().catch(() => {});
    const wall = replica.wall.turnedAwayFull(tokens, deps.wallClock(), routing.capacity_window_ms);
    deps.overflowed(replica);
    const reason = `its KV is full ("Context size has been exceeded." with ~${Math.round(wall).toLocaleString("en-US")} prompt tokens in flight there: requests wait beyond that for ${durationText(routing.capacity_window_ms)})`;
    control.stop = { kind: "failure", failure: { kind: "full", reason } };
    return fail();
  }
  // An error the engine sent after computing the prompt, which it keeps (EngineProfile.keptPrompt).
  const keptPrompt = !isSse && errorBodySays(replica.profile?.keptPrompt, res.status, isSse, head);
  const ttftMs = deps.monotonic() - ctx.started;
  // A streamed answer's first byte ends its prefill. A whole answer says nothing about it,
  // nor does an error (a 400 for a prompt over the context comes at once, prefilling
  // nothing: taken as a sample, one made a replica's rate ten times too fast).
  const prefilled = ctx.shape.stream && ctx.shape.endpoint !== "other" && res.status >= 200 && res.status < 300;
  dispatch.firstByte(prefilled);
  // It answered. A 500 (or 501 …) is passed on as the engine's verdict on this request, not on its health.
  if (res.status < 500) deps.fleet.health.succeeded(replica);
  else deps.fleet.health.released(replica);
  const answer: Answer = { res, contentType, isSse, usageAdded: added !== undefined, prefilled, keptPrompt, cutByEngine, ttftMs, tokens, dispatch, control };
  if (whole !== undefined) answer.whole = whole;
  if (reader) answer.reader = reader;
  if (first) answer.first = first;
  return { kind: "answer", answer };
}

/**
 * A card that turned requests away as KV-full takes no more beside its in-flight ones than it
 * failed at: this one waits until one ends or the wall lapses (the engine would fail them
 * all), for routing.first_byte_timeout at most; then the card is given up as one that sent no
 * first byte would be — another card, or 504 — but its health is not judged: it is busy, not
 * broken. The attempt's deadlines start after: the wait is the router's queue, not the
 * replica's silence. False when it was not admitted (the wait ran out, the client left, the drain).
 */
function admitAtWall(replica: Replica, tokens: number, control: UpstreamControl, boundMs: number, wallClock: () => number): true | Promise<boolean> {
  const admitted = replica.wall.admit(tokens, control.signal, wallClock);
  if (admitted === true) return true;
  return boundedWait(replica, admitted, control, boundMs);
}

async function boundedWait(replica: Replica, admitted: Promise<boolean>, control: UpstreamControl, boundMs: number): Promise<boolean> {
  const bound = setTimeout(() => {
    const wall = Math.round(replica.wall.wall?.tokens ?? 0).toLocaleString("en-US");
    const reason = `waited ${durationText(boundMs)} at its KV wall (~${wall} prompt tokens in flight there) without sending it: routing.first_byte_timeout`;
    control.abort({ kind: "failure", failure: { kind: "wall", timer: "first_byte", reason } });
  }, boundMs);
  const ok = await admitted;
  clearTimeout(bound);
  return ok;
}

/** An attempt that ended without a verdict on the replica: the client left, or the drain cut it. */
function notJudged(control: UpstreamControl, replica: Replica, fleet: Fleet): AttemptResult {
  fleet.health.released(replica);
  return control.stop?.kind === "drain" ? { kind: "cut" } : { kind: "client-gone" };
}

/**
 * A 502/503/504: the replica could not take it. A 503 may be the engine's queue turning the
 * request away (Ollama's scheduler, vLLM's admission control): busy, not dead. Its body is
 * read only when the engine is one that says so, and is small.
 */
async function refusal(res: Response, replica: Replica): Promise<Failure> {
  const busyTest = res.status === 503 ? replica.profile?.busy : undefined;
  const body = busyTest ? await readSmallErrorBody(res) : undefined;
  if (!busyTest) await res.body?.cancel().catch(() => {});
  return errorBodySays(busyTest, res.status, false, body)
    ? { kind: "busy", reason: "its queue is full (HTTP 503: the engine turned it away before computing anything)" }
    : { kind: "status", reason: `HTTP ${res.status}` };
}

/**
 * Does this error answer say what `test` looks for (an EngineProfile reading of the engine's
 * error object)? A whole error body (status ≥ 500), or a stream whose first event is an error:
 * llama-server sends it as one small write, so it is the whole first chunk.
 */
export function errorBodySays(test: ((error: unknown) => boolean) | undefined, status: number, isSse: boolean, bytes: Uint8Array | undefined): boolean {
  if (!test || !bytes || bytes.length > SMALL_BODY_MAX || (!isSse && status < 500)) return false;
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
 * The body of an error answer, when it is small (an error object: at most SMALL_BODY_MAX
 * bytes, with or without a Content-Length) and comes at once (within SMALL_BODY_MS); else
 * undefined, and the rest is cancelled.
 */
async function readSmallErrorBody(res: Response): Promise<Uint8Array | undefined> {
  const declared = Number(res.headers.get("content-length") ?? Number.NaN);
  if (declared > SMALL_BODY_MAX || !res.body) {
    await res.body?.cancel().catch(() => {});
    return undefined;
  }
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  let timer: Timer | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(() => resolve("late"), SMALL_BODY_MS)));
  try {
    while (size <= SMALL_BODY_MAX) {
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
 * attempt's own deadline or cancel): that reset is the router's. No verdict on the replica's
 * health: its conversations stay.
 */
async function fetchFreshOnReset(fetchFn: FetchLike, url: string, init: RequestInit & { timeout?: number | boolean }): Promise<Response> {
  try {
    return await fetchFn(url, init);
  } catch (error) {
    if (init.signal?.aborted || describeFetchError(error) !== "connection reset") throw error;
    return fetchFn(url, { ...init, keepalive: false });
  }
}

/** A duration as routing's settings are written: 10m, 30s, 250ms. */
export function durationText(value: number): string {
  return value % 60_000 === 0 ? `${value / 60_000}m` : value % 1000 === 0 ? `${value / 1000}s` : `${value}ms`;
}
