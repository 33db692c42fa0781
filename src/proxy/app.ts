/**
 * The router's HTTP surface as a plain `fetch(Request) → Response` function, so it runs
 * in-process in tests and behind Bun.serve in production. /v1/* is proxied; /health and
 * /v1/models are answered from the fleet's state.
 */
import type { Fleet } from "../fleet/fleet.ts";
import { errorResponse } from "./errors.ts";
import type { Proxy } from "./proxy.ts";

export interface AppDeps {
  fleet: Fleet;
  proxy: Proxy;
}

export interface App {
  fetch(req: Request): Promise<Response>;
}

export function createApp(deps: AppDeps): App {
  const { fleet, proxy } = deps;
  return {
    async fetch(req) {
      const url = new URL(req.url);
      const path = url.pathname;
      if (path === "/health" && (req.method === "GET" || req.method === "HEAD")) return health(fleet);
      if (path === "/v1/models" && req.method === "GET") {
        return Response.json({ object: "list", data: fleet.models() });
      }
      if (path.startsWith("/v1/")) return proxy.forward(req, url);
      return errorResponse("other", 404, `no route for ${req.method} ${path}; llmroute serves /v1/*, /health`);
    },
  };
}

function health(fleet: Fleet): Response {
  const healthy = fleet.replicas.filter((r) => r.healthy).map((r) => r.name);
  const body = { status: healthy.length > 0 ? "ok" : "unavailable", healthy, replicas: fleet.replicas.length };
  return Response.json(body, { status: healthy.length > 0 ? 200 : 503 });
}
