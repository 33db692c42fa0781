/**
 * The router's HTTP surface as a plain `fetch(Request) → Response` function, so it runs
 * in-process in tests and behind Bun.serve in production. /v1/* is proxied; /health,
 * /v1/models, /status, /metrics and /dashboard/data are answered from live state.
 */
import { timingSafeEqual } from "node:crypto";
import type { Fleet } from "../fleet/fleet.ts";
import { dashboardDataResponse } from "../ops/dashboard/data.ts";
import { dashboardPage } from "../ops/dashboard/page.ts";
import type { Telemetry } from "../ops/telemetry.ts";
import { errorResponse } from "./errors.ts";
import type { ClientInfo } from "./headers.ts";
import type { Proxy } from "./proxy.ts";

/** Engine endpoints outside /v1 that clients (and `llmroute probe --via`) use. */
const ENGINE_EXTRAS = new Set(["/tokenize", "/detokenize"]);

export interface AppDeps {
  fleet: Fleet;
  proxy: Proxy;
  telemetry: Telemetry;
  /** Client keys (server.api_keys); empty = open. */
  apiKeys: () => readonly string[];
  /** Which routes this listener serves: the API, the admin routes (/status, /metrics, /dashboard), or both. */
  serves: { api: boolean; admin: boolean };
  /** Refresh the capacity readings before /status and /metrics answer. */
  beforeAdmin?: () => void;
  /** The admin listener's URL when it is separate: named in this listener's 404 for /status and /metrics. */
  adminUrl?: () => string | undefined;
}

export interface App {
  /** `client` is what the listening socket knows of the sender (its address, for X-Forwarded-For). */
  fetch(req: Request, client?: ClientInfo): Promise<Response>;
}

export function createApp(deps: AppDeps): App {
  return {
    async fetch(req, client) {
      // An HTTP/1.0 request without Host has a bare path for a URL.
      const url = new URL(req.url, "http://localhost");
      const path = url.pathname;
      const read = req.method === "GET" || req.method === "HEAD";
      if (path === "/health" && read) return health(deps.fleet);

      // The page is static and holds no data: a browser cannot send a key with a navigation,
      // so it is served as is and asks for the key that its data requests need.
      if (deps.serves.admin && read && (path === "/dashboard" || path === "/dashboard/")) return dashboardPage();
      const admin = deps.serves.admin && read && (path === "/status" || path === "/metrics" || path === "/dashboard/data");
      const api = deps.serves.api && (path.startsWith("/v1/") || ENGINE_EXTRAS.has(path));
      if (!admin && !api) {
        const elsewhere = !deps.serves.admin && (path === "/status" || path === "/metrics") ? deps.adminUrl?.() : undefined;
        const message = elsewhere ? `${path} is served on the admin listener, ${elsewhere}${path} (server.admin_listen), not on this one` : `no route for ${req.method} ${path}`;
        if (!deps.serves.api) return errorResponse("other", 404, message);
        return deps.proxy.reject(url, 404, message);
      }
      // On the API listener every route needs a key; the admin listener is protected by
      // where it listens. Refusals are logged and counted like any request.
      if (deps.serves.api && !authorized(req, deps.apiKeys())) {
        return deps.proxy.reject(url, 401, "missing or invalid API key: send Authorization: Bearer <key> or x-api-key");
      }
      if (admin) {
        // Reads the capacity refreshed on the server's schedule: a poll never walks the index.
        if (path === "/dashboard/data") return dashboardDataResponse(deps.telemetry);
        deps.beforeAdmin?.();
        if (path === "/metrics") {
          return new Response(deps.telemetry.metrics(), { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
        }
        return Response.json(deps.telemetry.status(Date.now()));
      }
      if (path === "/v1/models" && req.method === "GET") {
        return Response.json({ object: "list", data: deps.fleet.models() });
      }
      return deps.proxy.forward(req, url, client);
    },
  };
}

function authorized(req: Request, keys: readonly string[]): boolean {
  if (keys.length === 0) return true;
  const bearer = /^Bearer\s+(.+)$/i.exec(req.headers.get("authorization") ?? "")?.[1];
  const given = bearer ?? req.headers.get("x-api-key");
  if (!given) return false;
  const a = Buffer.from(given);
  return keys.some((k) => {
    const b = Buffer.from(k);
    return a.length === b.length && timingSafeEqual(a, b);
  });
}

function health(fleet: Fleet): Response {
  // A half-open replica takes requests (one at a time): the router can serve.
  const healthy = fleet.replicas.filter((r) => r.state !== "down").map((r) => r.name);
  const body = { status: healthy.length > 0 ? "ok" : "unavailable", healthy, replicas: fleet.replicas.length };
  return Response.json(body, { status: healthy.length > 0 ? 200 : 503 });
}
