/** The header sets of forwarding (h3 keeps these beside its proxy; so do we). */

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1, and the RFC 2616 list proxies still meet): they
 * describe one connection, never the next one, so they are dropped in both directions,
 * together with every header a `Connection` header names.
 */
export const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "trailers",
  "transfer-encoding",
  "upgrade",
  "expect",
]);

/**
 * Also never forwarded upstream: lengths and encodings fetch sets for the body it sends,
 * the client's credentials (the replica's own key is sent instead), the router's own
 * tenant header, and Host (the replica's URL names it).
 */
export const DROP_REQUEST_HEADERS = new Set(["host", "content-length", "accept-encoding", "authorization", "x-api-key", "x-llmroute-tenant"]);

/** Also never copied back: a relayed (and possibly re-chunked, decompressed) body has its own length and encoding. */
export const DROP_RESPONSE_HEADERS = new Set(["content-length", "content-encoding"]);

/** What the router adds to `Via` (RFC 9110 §7.6.3: protocol version and a pseudonym). */
export const VIA = "1.1 llmroute";
