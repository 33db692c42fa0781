/**
 * How a request ended, as one record (Caddy's `finalizeResponse`, in small): the outcome of an
 * answer, what the router learns from it, the record built once from the ending, and the
 * telemetry it goes to (the log line and the metrics).
 */
import { reportedCachedTokens, showsCachedTokens } from "../engines/usage.ts";
import type { Replica } from "../fleet/replica.ts";
import { clip, type Log } from "../log.ts";
import type { CacheVerdict } from "../route/evidence.ts";
import type { Commit, RouteEstimate, Router } from "../route/router.ts";
import type { Endpoint, RequestShape } from "../route/shape.ts";
import type { TapResult } from "./tap.ts";

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
  verdict?: CacheVerdict;
  ttftMs?: number;
  totalMs: number;
  failovers: number;
  /** Why it did not end well (timeouts, upstream failures, rejections), for the log. */
  error?: string;
}

/** The request as far as it was read: its endpoint, and its model and streaming once its body was. */
export interface RequestSeen {
  endpoint: Endpoint;
  model?: string;
  stream: boolean;
  /** When it arrived (the monotonic clock). */
  started: number;
}

/** How it ended: everything a record says beyond the request itself. */
export interface Ending {
  status: number;
  outcome: Outcome;
  failovers: number;
  replica?: string;
  route?: string;
  error?: string;
  /** An answer's usage, the index's expectation and the verdict on it, its time to first byte. */
  answer?: Pick<RequestRecord, "promptTokens" | "cachedTokens" | "completionTokens" | "availableTokens" | "capturedTokens" | "verdict" | "ttftMs">;
}

/** The one place a request's record is made. */
export function requestRecord(seen: RequestSeen, ending: Ending, now: number): RequestRecord {
  return {
    endpoint: seen.endpoint,
    model: seen.model,
    replica: ending.replica,
    route: ending.route,
    status: ending.status,
    stream: seen.stream,
    outcome: ending.outcome,
    ...ending.answer,
    totalMs: now - seen.started,
    failovers: ending.failovers,
    error: ending.error,
  };
}

/** Telemetry: each finished request goes to the metrics (`onRecord`) and the log's `request` line. */
export function publishRecord(r: RequestRecord, log: Log, onRecord: ((record: RequestRecord) => void) | undefined): void {
  onRecord?.(r);
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
}

/**
 * The outcome of an answer that reached the client: how its relay `ended`, and — for one that
 * ran its course — the engine's verdict in its status, or as the stream's error event.
 */
export function answerOutcome(ended: Outcome, status: number, usage: TapResult): { outcome: Outcome; error?: string } {
  const outcome: Outcome = ended !== "ok" ? ended : status >= 500 ? "upstream_error" : status >= 400 ? "upstream_rejected" : "ok";
  if (outcome !== "ok" || usage.streamError === undefined) return { outcome };
  return { outcome: "upstream_error_in_stream", error: `the engine ended the stream with an error event: ${clip(usage.streamError)}` };
}

/** What one answer teaches the router about a replica (not one a reload removed: it is not remembered for anything). */
export interface AnswerLesson {
  replica: Replica;
  shape: RequestShape;
  status: number;
  usage: TapResult;
  estimate: RouteEstimate;
  committedAt: number;
  retract: Commit | undefined;
  /** The engine may have cut the prompt to its context (Ollama): its usage counts what was kept. */
  cutByEngine: boolean;
  /** The engine kept the prompt of this error answer (EngineProfile.keptPrompt). */
  keptPrompt: boolean;
}

/**
 * Learn from an answer: its Responses API id, the engine's tokenisation, and the cached
 * tokens it delivered against the index's expectation (the verdict); an error answer computed
 * no KV to remember, unless the engine says it did.
 */
export function learnFromAnswer(router: Router, a: AnswerLesson): CacheVerdict | undefined {
  const { replica, usage, estimate: est } = a;
  if (replica.removed) return undefined;
  if (usage.responseId && a.status < 300) router.rememberResponse(usage.responseId, replica.name);
  // A previous_response_id follow-up's prompt_tokens count the stored conversation, of
  // which the router saw only the new input: learnt from, the ratio collapses. So do those
  // of a prompt the engine cut to its context (Ollama).
  if (usage.promptTokens && est.totalChars > 0 && !a.shape.previousResponseId && !a.cutByEngine) replica.calibration.observe(est.totalChars, usage.promptTokens);
  if (a.status < 300) {
    const profile = replica.profile;
    const endpoint = a.shape.endpoint;
    if (replica.facts && showsCachedTokens(profile, endpoint, usage)) replica.facts.cachedTokensSeen = true;
    return router.feedback(replica.name, est, reportedCachedTokens(profile, endpoint, usage, replica.facts?.cachedTokensSeen ?? false), a.committedAt);
  }
  // An error answer (a 400 for a too-long prompt, a 500) computed no KV to remember,
  // unless the engine says it did (llama.cpp's output parser fails after the prompt).
  if (a.status >= 400 && !a.keptPrompt) a.retract?.();
  return undefined;
}

/** Why no replica served a request that tried them (or found none): the ending and its message. */
export function exhaustedEnding(r: {
  cut: boolean;
  ownerDown: string | undefined;
  failures: string[];
  allTimedOut: boolean;
  shape: RequestShape;
}): Ending {
  const failovers = r.failures.length;
  const ending = (status: number, outcome: Outcome, error: string): Ending => ({ status, outcome, failovers, error });
  if (r.cut) return ending(503, "drain_timeout", "the router is shutting down (server.drain_timeout passed); retry");
  if (r.ownerDown) {
    const why = failovers > 0 ? r.failures.at(-1)! : `${r.ownerDown} is down`;
    return ending(
      503,
      "no_replica",
      `response ${r.shape.previousResponseId} is stored on replica ${r.ownerDown}, which cannot take requests now (${why}); its state exists only there: retry later`,
    );
  }
  if (failovers === 0) return ending(503, "no_replica", `no healthy replica${r.shape.model ? ` serves model \`${r.shape.model}\`` : ""}`);
  const message = `no replica could serve the request (${r.failures.join("; ")})`;
  return r.allTimedOut ? ending(504, "timeout", message) : ending(503, "no_replica", message);
}
