/**
 * The one error the sim's HTTP edge throws and catches: an HTTP status plus what the API's
 * error JSON needs. `toResponse` renders OpenAI's shape (vLLM's `type` names) or, for
 * /v1/messages, Anthropic's.
 */

export class ApiError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  /** Engine-specific fields written beside message and type (llama.cpp's n_prompt_tokens, n_ctx). */
  readonly extra: Record<string, unknown>;
  /** true when `type` was given, not derived from the status (profiles keep it then). */
  readonly explicitType: boolean;

  constructor(status: number, message: string, options: { type?: string; param?: string | null; cause?: unknown; extra?: Record<string, unknown> } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ApiError";
    this.status = status;
    this.type = options.type ?? openaiType(status);
    this.explicitType = options.type !== undefined;
    this.param = options.param ?? null;
    this.extra = options.extra ?? {};
  }
}

export type ErrorShape = "openai" | "anthropic";

export function errorResponse(error: ApiError, shape: ErrorShape, headers: Record<string, string> = {}): Response {
  const body =
    shape === "anthropic"
      ? { type: "error", error: { type: anthropicType(error.status), message: error.message } }
      : { error: { message: error.message, type: error.type, param: error.param, code: error.status } };
  return Response.json(body, { status: error.status, headers });
}

function openaiType(status: number): string {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 429:
      return "RateLimitError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

function anthropicType(status: number): string {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}
