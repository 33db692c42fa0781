/** Header sets for forwarding (h3 keeps these beside its proxy; so do we). */

/** Never forwarded upstream: hop-by-hop, the client's credentials, and encodings we must read. */
export const DROP_REQUEST_HEADERS = new Set([
  "host",
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "content-length",
  "accept-encoding",
  "authorization",
  "x-api-key",
  "x-llmroute-tenant",
]);

/** Never copied back to the client: hop-by-hop, and lengths/encodings a relayed stream changes. */
export const DROP_RESPONSE_HEADERS = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-length",
  "content-encoding",
  "trailer",
  "upgrade",
]);

/** Upstream statuses that mean "this replica could not take the request": fail over. */
export const RETRYABLE_STATUS = new Set([502, 503, 504]);
