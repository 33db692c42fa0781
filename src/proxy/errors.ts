/**
 * Errors in the API's own JSON, so official clients surface them properly: OpenAI's
 * `{"error":{message,type,param,code}}` (code = HTTP status, as vLLM does), and
 * Anthropic's `{"type":"error","error":{type,message}}` on /v1/messages.
 */
import type { Endpoint } from "../route/shape.ts";

/**
 * vLLM's types: its application errors are named as the openai client names the exception
 * for that status (create_error_response in vllm/entrypoints/serve/utils/error_response.py:
 * BadRequestError, NotFoundError …), and the openai client has no such name for 405 or 413;
 * an HTTPException it types by the status's reason phrase (http_exception_handler in
 * vllm/entrypoints/serve/utils/server_utils.py: `HTTPStatus(code).phrase`). The router's
 * 405 and 413 are errors of that kind: they get the phrase. (413's on the Python 3.12 of
 * vLLM's images; 3.13 renamed it "Content Too Large", after RFC 9110. OpenAI's own API
 * calls a wrong method or URL "invalid_request_error", the Anthropic shape's type here.)
 */
const OPENAI_TYPES: Record<number, string> = {
  400: "BadRequestError",
  401: "AuthenticationError",
  404: "NotFoundError",
  405: "Method Not Allowed",
  408: "RequestTimeoutError",
  413: "Request Entity Too Large",
  502: "UpstreamError",
  503: "ServiceUnavailableError",
  504: "GatewayTimeoutError",
};

const ANTHROPIC_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  404: "not_found_error",
  405: "invalid_request_error",
  408: "timeout_error",
  413: "request_too_large",
  502: "api_error",
  503: "overloaded_error",
  504: "timeout_error",
};

export function errorBody(endpoint: Endpoint, status: number, message: string, param: string | null = null): unknown {
  if (endpoint === "messages") {
    return { type: "error", error: { type: ANTHROPIC_TYPES[status] ?? "api_error", message } };
  }
  return { error: { message, type: OPENAI_TYPES[status] ?? "Error", param, code: status } };
}

export function errorResponse(
  endpoint: Endpoint,
  status: number,
  message: string,
  options: { param?: string; headers?: Record<string, string> } = {},
): Response {
  return Response.json(errorBody(endpoint, status, message, options.param ?? null), { status, headers: options.headers });
}

/** The event that ends a stream cut after bytes were sent (upstream failed 502, went silent 504, drain 503). */
export function streamErrorEvent(endpoint: Endpoint, message: string, status = 502): string {
  const body = JSON.stringify(errorBody(endpoint, status, message));
  return endpoint === "messages" ? `event: error\ndata: ${body}\n\n` : `data: ${body}\n\n`;
}
