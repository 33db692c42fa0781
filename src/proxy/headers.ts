/**
 * Header hygiene, both ways, the way long-attacked proxies do it (nginx, HAProxy, Envoy):
 * hop-by-hop headers and every header a `Connection` header names are dropped, `Via` is
 * appended, and upstream requests carry `X-Forwarded-For` / `-Proto` / `-Host`. The
 * client's credentials never reach a replica; the replica's own key is sent instead.
 */
import type { ReplicaConfig } from "../config.ts";
import { authHeaders } from "../fleet/watch.ts";
import type { Endpoint } from "../route/shape.ts";
import { DROP_REQUEST_HEADERS, DROP_RESPONSE_HEADERS, HOP_BY_HOP, VIA } from "./_header-sets.ts";

/** Who sent the request, as the listening socket saw it. */
export interface ClientInfo {
  ip?: string;
}

/** Headers named by `Connection` (`Connection: keep-alive, X-Secret` → x-secret). */
function connectionNamed(headers: Headers): Set<string> {
  const named = new Set<string>();
  for (const token of (headers.get("connection") ?? "").split(",")) {
    const name = token.trim().toLowerCase();
    if (name) named.add(name);
  }
  return named;
}

function copy(from: Headers, drop: Set<string>): Headers {
  const named = connectionNamed(from);
  const out = new Headers();
  from.forEach((value, key) => {
    if (!HOP_BY_HOP.has(key) && !drop.has(key) && !named.has(key)) out.append(key, value);
  });
  return out;
}

function appendVia(headers: Headers): void {
  const via = headers.get("via");
  headers.set("via", via ? `${via}, ${VIA}` : VIA);
}

/** The request headers a replica receives. */
export function upstreamHeaders(incoming: Headers, replica: ReplicaConfig, endpoint: Endpoint, client: ClientInfo = {}): Headers {
  const headers = copy(incoming, DROP_REQUEST_HEADERS);
  for (const [k, v] of Object.entries(authHeaders(replica))) headers.set(k, v);
  if (endpoint === "messages" && replica.api_key) headers.set("x-api-key", replica.api_key);
  appendVia(headers);
  if (client.ip) {
    const xff = incoming.get("x-forwarded-for");
    headers.set("x-forwarded-for", xff ? `${xff}, ${client.ip}` : client.ip);
  }
  // Set by a proxy in front of us (TLS termination) they are kept: they describe the client's request.
  if (!headers.has("x-forwarded-proto")) headers.set("x-forwarded-proto", "http");
  const host = incoming.get("host");
  if (host && !headers.has("x-forwarded-host")) headers.set("x-forwarded-host", host);
  return headers;
}

/** The response headers the client receives. */
export function downstreamHeaders(upstream: Headers): Headers {
  const headers = copy(upstream, DROP_RESPONSE_HEADERS);
  appendVia(headers);
  return headers;
}
