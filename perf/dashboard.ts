/**
 * What the dashboard costs the router. Per request: the recent-requests tracker's record()
 * next to the whole Telemetry.record() it is part of. Per update (one poll of
 * /dashboard/data, JSON included) at index sizes from empty to the default bound, next to
 * GET /status, which refreshes the capacity readings by walking the index. Also the page's
 * size. Medians and p90 from one run; no timers run during the measurement.
 *
 *   npx bun perf/dashboard.ts
 */
import { gzipSync } from "node:zlib";
import { parseConfig } from "../src/config.ts";
import { CapacityWatch } from "../src/fleet/capacity.ts";
import { Fleet } from "../src/fleet/fleet.ts";
import { memoryLog } from "../src/log.ts";
import { DASHBOARD_HTML } from "../src/ops/dashboard/page.ts";
import { RecentRequests } from "../src/ops/recent.ts";
import { Telemetry } from "../src/ops/telemetry.ts";
import { createApp } from "../src/proxy/app.ts";
import type { RequestRecord } from "../src/proxy/proxy.ts";
import { createHasher } from "../src/route/hash.ts";
import { createPolicy } from "../src/route/policies/index.ts";
import { PrefixIndex } from "../src/route/prefix.ts";
import { Router } from "../src/route/router.ts";
import { quantile } from "../src/bench/stats.ts";

const REPLICAS = 4;
/** murmur3's finaliser: a well-spread 32-bit value from a counter. */
const mix32 = (x: number) => {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
};
const LINKS_PER_CONVERSATION = 20;
const fmt = (ms: number) => ms.toFixed(3).padStart(8);

function timeEach(n: number, f: () => void): { median: number; p90: number } {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    f();
    samples.push(performance.now() - t0);
  }
  return { median: quantile(samples, 0.5), p90: quantile(samples, 0.9) };
}

const record = (i: number): RequestRecord => ({
  endpoint: "chat",
  model: "qwen3-30b",
  replica: `gpu${i % REPLICAS}`,
  route: i % 3 === 0 ? "spread" : "pin",
  status: 200,
  stream: true,
  outcome: "ok",
  promptTokens: 40_000 + i,
  cachedTokens: 38_000,
  completionTokens: 200,
  ttftMs: 300 + (i % 700),
  totalMs: 4_000,
  failovers: 0,
});

// Per request: ns per call over batches of 100k calls (a single call is below the timer's resolution).
{
  const recent = new RecentRequests();
  const telemetry = new Telemetry(() => {
    throw new Error("record() reads no live state");
  });
  const recs = Array.from({ length: 1024 }, (_, i) => record(i));
  const batch = 100_000;
  const per = (f: (i: number) => void) => {
    const { median } = timeEach(15, () => {
      for (let i = 0; i < batch; i++) f(i);
    });
    return (median / batch) * 1e6;
  };
  const now = Date.now();
  const recentNs = per((i) => recent.record(recs[i & 1023]!, now + i));
  const telemetryNs = per((i) => telemetry.record(recs[i & 1023]!));
  console.log("per request (median of 15 batches of 100,000 calls)");
  console.log(`  RecentRequests.record  ${recentNs.toFixed(0).padStart(6)} ns`);
  console.log(`  Telemetry.record       ${telemetryNs.toFixed(0).padStart(6)} ns   (includes the line above; the Prometheus counters and histograms are the rest)`);
}

// Per update, at several index sizes.
const toml = [
  "[server]",
  'admin_listen = "127.0.0.1:0"',
  ...Array.from({ length: REPLICAS }, (_, i) => [`[[replica]]`, `name = "gpu${i}"`, `url = "http://127.0.0.1:${9000 + i}"`, "kv_tokens = 122636", 'models = ["qwen3-30b"]'].join("\n")),
].join("\n");
const config = parseConfig(toml, "<bench>", { env: {} });
const hasher = createHasher();
const log = memoryLog();

console.log(`\none update: ${REPLICAS} replicas, 30 last requests, full TTFT rings; in-process app.fetch, JSON included; n = 200 (/status: 20)`);
console.log("index entries   /dashboard/data median    p90    bytes   |   /status median      p90");
for (const entries of [0, 200_000, 1_000_000]) {
  const router = new Router({
    policy: createPolicy("hybrid"),
    index: new PrefixIndex({ maxEntries: 1_000_000, ttlMs: 3_600_000, windowMs: config.routing.capacity_window_ms }),
    hasher,
    maxInflight: 0,
    cacheAware: config.routing.cache_aware,
  });
  const fleet = new Fleet(config.replicas, { log, healthPath: "/health", healthTimeoutMs: 1000, failures: 3 });
  for (const r of fleet.replicas) r.state = "up";
  const capacity = new CapacityWatch(log);
  const telemetry = new Telemetry(() => ({ config, fleet, router, capacity, startedAt: Date.now() }));
  const now = Date.now();
  for (let c = 0; router.index.size < entries; c++) {
    // Distinct links per conversation, 1,024 characters each. The low half is mixed like a
    // real hash's: the index's table is keyed by it, and 20 distinct values would make every
    // lookup probe through all conversations (the fill would never end).
    const lo = Uint32Array.from({ length: LINKS_PER_CONVERSATION }, (_, k) => mix32(c * LINKS_PER_CONVERSATION + k + 1));
    const hi = new Uint32Array(LINKS_PER_CONVERSATION).fill(c + 1);
    const ends = Uint32Array.from({ length: LINKS_PER_CONVERSATION }, (_, k) => (k + 1) * 1024);
    router.index.record({ lo, hi, ends, length: LINKS_PER_CONVERSATION }, `gpu${c % REPLICAS}`, now - (c % 600) * 1000, true);
  }
  for (let i = 0; i < 2_000; i++) telemetry.record(record(i));
  const refresh = () => capacity.update(fleet.replicas, router.index.activeWorkingSet(Date.now()), Date.now());
  refresh();
  const app = createApp({
    fleet,
    proxy: { forward: () => Promise.reject(new Error("not used")), reject: () => new Response(null, { status: 500 }), active: 0, cutAll: () => {} },
    telemetry,
    apiKeys: () => [],
    serves: { api: false, admin: true },
    beforeAdmin: refresh,
  });
  const get = async (path: string, n: number) => {
    const samples: number[] = [];
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const body = await (await app.fetch(new Request(`http://router${path}`))).arrayBuffer();
      samples.push(performance.now() - t0);
      bytes = body.byteLength;
    }
    return { median: quantile(samples, 0.5), p90: quantile(samples, 0.9), bytes };
  };
  const data = await get("/dashboard/data", 200);
  // /status walks the index each time: fewer samples keep the run short at 1M entries.
  const status = await get("/status", 20);
  console.log(
    `${String(router.index.size).padStart(13)}   ${fmt(data.median)} ms ${fmt(data.p90)} ${String(data.bytes).padStart(8)}   |  ${fmt(status.median)} ms ${fmt(status.p90)}`,
  );
}

const raw = new TextEncoder().encode(DASHBOARD_HTML).byteLength;
console.log(`\npage: ${raw.toLocaleString("en-US")} bytes (${(raw / 1024).toFixed(1)} KiB; gzip ${gzipSync(DASHBOARD_HTML).byteLength.toLocaleString("en-US")} bytes; budget 51,200)`);
