/**
 * The floor for any Bun router that must read the body to route: read it, forward it, hand
 * the upstream response back as it streams. Nothing else.
 *
 *   npx bun perf/passthrough.ts <upstream-url> [port]
 */
const upstream = Bun.argv[2]!;
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: Number(Bun.argv[3] ?? 0),
  idleTimeout: 0,
  async fetch(req) {
    const url = new URL(req.url);
    const body = req.method === "POST" ? await req.arrayBuffer() : undefined;
    const res = await fetch(`${upstream}${url.pathname}${url.search}`, { method: req.method, headers: req.headers, body });
    return new Response(res.body, { status: res.status, headers: res.headers });
  },
});
console.log(`pass-through listening on http://127.0.0.1:${server.port} → ${upstream}`);
