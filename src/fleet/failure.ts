/** Why a request to a replica failed, as health weighs it, and how a fetch error reads. */

/** Which deadline fired, for a timeout. */
export type TimerKind = "connect" | "first_byte" | "stream_idle";

export interface Failure {
  /**
   * refused: nothing listens (demote at once); full: the engine's KV could not hold the
   * request beside those running (llama.cpp's unified KV), busy: its queue is full (Ollama's
   * scheduler), and wall: the request waited at the card's KV wall until
   * routing.first_byte_timeout without being sent — verdicts on its load, not its health
   * (never counted); the others count towards `health.failures`.
   */
  kind: "refused" | "status" | "timeout" | "network" | "full" | "busy" | "wall";
  reason: string;
  /** Which deadline fired, for a timeout. */
  timer?: TimerKind;
}

export function describeFetchError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: string }).code;
    if (error.name === "TimeoutError") return "timed out";
    if (code === "ConnectionRefused" || code === "ECONNREFUSED") return "connection refused";
    if (code === "ECONNRESET" || code === "ConnectionClosed") return "connection reset";
    return code ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

/** A fetch error as a Failure (`when` says when it came, e.g. " before the first byte"). */
export function failureOfFetchError(error: unknown, when = ""): Failure {
  const reason = describeFetchError(error);
  if (reason === "connection refused") return { kind: "refused", reason };
  if (reason === "timed out") return { kind: "timeout", reason: `timed out${when}` };
  return { kind: "network", reason: `${reason}${when}` };
}
