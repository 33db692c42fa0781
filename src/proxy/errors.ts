/**
 * Errors in the API's own JSON, so official clients surface them properly: OpenAI's
 * `{"error":{message,type,param,code}}` (code = HTTP status, as vLLM does), and
 * Anthropic's `{"type":"error","error":{type,message}}` on /v1/messages.
 */
import type { Endpoint } from "../route/shape.ts";

/**
 * One scheme per API. The OpenAI shape's types are llama.cpp's, which follow OpenAI's own
 * (`format_error_response` in tools/server/server-common.cpp: invalid_request_error 400,
 * authentication_error 401, not_found_error 404, server_error 500, unavailable_error 503),
 * with `code` the HTTP status as llama.cpp and vLLM write it; every other client error of
 * the router's (a wrong method, a body too large or too slow) is an invalid request, as
 * OpenAI's API calls it. The openai client picks its exception by the status, not the type.
 */
const OPENAI_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  404: "not_found_error",
  405: "invalid_request_error",
  408: "invalid_request_error",
  413: "invalid_request_error",
  502: "server_error",
  503: "unavailable_error",
  504: "server_error",
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
  return { error: { message, type: OPENAI_TYPES[status] ?? (status >= 500 ? "server_error" : "invalid_request_error"), param, code: status } };
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
