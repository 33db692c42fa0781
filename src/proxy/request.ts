/**
 * The first step of a request: read its body once (bounded in size and time), check it, and
 * shape it for routing — its endpoint, model, prefix chains, and the bytes to send with usage
 * asked for, made once per engine rule on need.
 */
import type { Config } from "../config.ts";
import { clip } from "../log.ts";
import { prefixChains } from "../route/chain.ts";
import type { Hasher } from "../route/hash.ts";
import type { RouteInput } from "../route/policy.ts";
import { endpointOf, shapeOf, type RequestShape } from "../route/shape.ts";
import type { ClientInfo } from "./headers.ts";
import { parseBody, readBody } from "./request-body.ts";
import { withUsageRequested } from "./usage.ts";

/** How long the whole request body may take to arrive (slow-loris bound); a 32 MiB body needs ≥ 0.6 MB/s. */
export const BODY_TIMEOUT_MS = 60_000;

/** GET/DELETE /v1/responses/{id}, …/input_items, POST …/cancel: the response lives on one replica. */
const RESPONSE_PATH = /^\/v1\/responses\/([^/]+)(?:\/(?:input_items|cancel))?$/;

/** One request read and shaped, as every later step sees it. */
export interface RequestContext {
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
  input: RouteInput;
  /** When it arrived (the monotonic clock). */
  started: number;
  routing: Config["routing"];
}

export type RequestRead =
  | { kind: "ready"; ctx: RequestContext }
  | { kind: "rejected"; status: number; message: string; param?: string }
  | { kind: "cancelled"; message: string };

/** Read, check and shape a request; a bad one is rejected with the API's status and message. */
export async function readRequest(
  req: Request,
  url: URL,
  client: ClientInfo,
  started: number,
  deps: { config: Pick<Config, "server" | "routing">; hasher: Hasher; bodyTimeoutMs: number },
): Promise<RequestRead> {
  const endpoint = endpointOf(url.pathname);
  if (endpoint !== "other" && req.method !== "POST") return { kind: "rejected", status: 405, message: `${url.pathname} takes POST` };
  const read = await readBody(req, deps.config.server.max_body_bytes, deps.bodyTimeoutMs);
  if (!read.ok && read.status === 499) return { kind: "cancelled", message: read.message };
  if (!read.ok) return { kind: "rejected", status: read.status, message: read.message };
  const bytes = read.bytes;

  // Routed endpoints must carry a JSON object. Others (/tokenize, …) pass through as
  // they are; if they happen to be JSON, their `model` still picks the pool.
  let body: Record<string, unknown> | undefined;
  if (endpoint !== "other") {
    const checked = await parseBody(endpoint, bytes);
    if (!checked.ok) return { kind: "rejected", status: 400, message: checked.message, ...(checked.param ? { param: checked.param } : {}) };
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
      return { kind: "rejected", status: 400, message: `the response id in the path is not valid percent-encoding: ${clip(responseId)}` };
    }
    shape = { ...shape, previousResponseId: id };
  }
  const input: RouteInput = { shape, chains: endpoint === "other" ? [] : prefixChains(shape, deps.hasher, deps.config.routing.chunk_chars) };
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
    input,
    started,
    routing: deps.config.routing,
  };
  return { kind: "ready", ctx };
}
