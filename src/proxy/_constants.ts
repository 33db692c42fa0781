/** Header sets and fixed values for forwarding (h3 keeps these beside its proxy; so do we). */

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

/** Upstream statuses that mean "this replica could not take the request": fail over. */
export const RETRYABLE_STATUS = new Set([502, 503, 504]);

/** How long the whole request body may take to arrive (slow-loris bound); a 32 MiB body needs ≥ 0.6 MB/s. */
export const BODY_TIMEOUT_MS = 60_000;

/** How long the body of a 503 may take once its headers are in, to be read for what it says (an engine's "busy"). */
export const SMALL_BODY_MS = 2_000;

/**
 * Bun's fetch has no connect timeout (its `timeout` is an idle timer that does not run
 * while connecting), so a request still without response headers this long after it was
 * sent has the replica's TCP port probed; the probe must connect within
 * routing.connect_timeout of the request's start.
 */
export const PROBE_AFTER_MS = 200;

/** A successful probe vouches for the replica's reachability this long (concurrent requests share it). */
export const PROBE_FRESH_MS = 1_000;

/** Retry-After for a request whose only possible replica is down (it is re-checked this often). */
export const RETRY_AFTER_S = 2;

/** A non-stream answer up to this size (declared by content-length) is read whole instead of relayed. */
export const WHOLE_RESPONSE_MAX = 16 << 20;
