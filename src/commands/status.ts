import { defineCommand } from "citty";
import { shownUrl } from "../_shown-url.ts";
import { loadConfigFile, type Listen } from "../config.ts";
import { LlmrouteError } from "../errors.ts";
import { describeFetchError } from "../fleet/failure.ts";
import { duration, int, pct, table } from "../ops/table.ts";
import type { ReplicaStatus, StatusDocument } from "../ops/telemetry.ts";

const DEFAULT_CONFIG = "router.toml";
const DEFAULT_URL = "http://127.0.0.1:8080";

export default defineCommand({
  meta: { name: "status", description: "Show a running router's replicas, load, pins and capacity (exit 0 ok, 1 degraded, 2 unreachable)" },
  args: {
    url: { type: "string", description: `Router (or admin listener) URL; default from --config, else ${DEFAULT_URL}` },
    config: { type: "string", alias: "c", description: `Config file to find the router's address in (default ./${DEFAULT_CONFIG} when it exists)` },
    "api-key": { type: "string", description: "Key for a router with server.api_keys (default: env LLMROUTE_API_KEY)" },
    json: { type: "boolean", description: "Print the raw /status JSON" },
  },
  async run({ args }) {
    const base = (args.url === undefined ? await urlFromConfig(args.config) : routerUrl(args.url)).replace(/\/+$/, "");
    const shown = shownUrl(base);
    const flagKey = args["api-key"];
    const key = flagKey || process.env.LLMROUTE_API_KEY || undefined;
    const status = await readStatus(base, key);
    // The router's own 401 tells an API client to send a header; this command's user needs
    // its flag or variable. The key itself is never printed.
    if (status === "unauthorized") {
      const message = key
        ? `status: ${shown}/status refused the key given ${flagKey ? "with --api-key" : "in LLMROUTE_API_KEY"} (server.api_keys): pass one of the router's client keys`
        : `status: ${shown}/status needs a client key (server.api_keys): pass --api-key KEY or set LLMROUTE_API_KEY`;
      throw new LlmrouteError("unreachable", message, { exitCode: 2 });
    }
    if (args.json) console.log(JSON.stringify(status, null, 2));
    else console.log(formatStatus(status, Date.now()));
    return status.healthy === status.replicas.length && status.warnings.length === 0 ? 0 : 1;
  },
});

/** GET /status; "unauthorized" for a 401 (the caller says which key to give); any other failure throws. */
async function readStatus(base: string, key: string | undefined): Promise<StatusDocument | "unauthorized"> {
  try {
    const res = await fetch(`${base}/status`, {
      headers: key ? { authorization: `Bearer ${key}` } : {},
      signal: AbortSignal.timeout(5000),
    });
    if (res.status === 401) {
      await res.body?.cancel();
      return "unauthorized";
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${errorMessage(await res.text())}`);
    return (await res.json()) as StatusDocument;
  } catch (error) {
    throw new LlmrouteError("unreachable", shownUrl(`status: cannot read ${base}/status: ${describeFetchError(error)}`), { exitCode: 2 });
  }
}

/** --url as given: an http:// or https:// URL, else a usage error (exit 2) saying what to give. */
function routerUrl(raw: string): string {
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    // reported below
  }
  if (url?.protocol === "http:" || url?.protocol === "https:") return raw;
  throw new LlmrouteError("usage", `status: --url ${JSON.stringify(shownUrl(raw))}: not an http:// or https:// URL; give the router's (or its admin listener's) address, like ${DEFAULT_URL}`, { exitCode: 2 });
}

/** The API's error JSON carries the reason (e.g. where the admin listener is); anything else, its first 200 characters. */
function errorMessage(body: string): string {
  try {
    const message = (JSON.parse(body) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === "string") return message;
  } catch {
    // not JSON: show it as it is
  }
  return body.slice(0, 200);
}

/**
 * The admin listener (else the API listener) from the config. Only the address is needed,
 * so `env:` secrets are not resolved: status works where the service's secrets are not
 * exported. Without --config, a missing ./router.toml means the default address.
 */
async function urlFromConfig(path: string | undefined): Promise<string> {
  if (path === undefined && !(await Bun.file(DEFAULT_CONFIG).exists())) return DEFAULT_URL;
  const config = await loadConfigFile(path ?? DEFAULT_CONFIG, { resolveSecrets: false });
  const l: Listen = config.server.admin_listen ?? config.server.listen;
  const host = l.host === "0.0.0.0" ? "127.0.0.1" : l.host === "::" ? "::1" : l.host;
  return `http://${host.includes(":") ? `[${host}]` : host}:${l.port}`;
}

/**
 * The hit rate explained, as shares of the prompt tokens routed here: cached somewhere in
 * the fleet by the index (available), on this replica by the index (captured), and by the
 * engine's own report (delivered). available > captured: placement lost hits; captured >
 * delivered: the engine evicted what the index believed held.
 */
function hitCell(r: ReplicaStatus): string {
  if (!(r.prompt_tokens > 0)) return "-";
  const share = (n: number) => pct(Math.min(1, n / r.prompt_tokens));
  return `${share(r.hit.available_tokens)}/${share(r.hit.captured_tokens)}/${share(r.hit.delivered_tokens)}`;
}

export function formatStatus(s: StatusDocument, now: number): string {
  const head = `llmroute ${s.version} · policy ${s.policy} · up ${duration(s.uptime_s)} · ${s.healthy}/${s.replicas.length} healthy · index ${int(s.index.entries)}/${int(s.index.max_entries)} entries`;
  // A scrape happens with each passing health check; two intervals without one means the
  // figures describe the past (the replica is down, or its /metrics fails).
  const staleAfterMs = 2 * (s.health_interval_s ?? 10) * 1000 + 1000;
  const rows = s.replicas.map((r) => [
    r.name,
    r.state === "up" ? "up" : r.state === "half-open" ? "half-open" : "DOWN",
    r.inflight,
    int(r.served),
    r.failovers,
    r.conversations,
    workingSet(r.working_set_tokens, r.kv_tokens),
    hitCell(r),
    r.engine ? engineCell(r.engine, now, staleAfterMs) : "-",
  ]);
  const window = `WORKING SET (${Math.round(s.capacity_window_s / 60)}m) / KV`;
  const body = table(["REPLICA", "HEALTH", "INFLIGHT", "SERVED", "FAILOVERS", "CONVERSATIONS", window, "HIT avail/capt/deliv", "ENGINE run/wait/kv"], rows, { right: [2, 3, 4, 5] });
  const models = modelRows(s.replicas);
  const warnings = s.replicas.flatMap((r) => r.warnings.map((w) => `  ${r.name}: ${w}`));
  // The capacity findings are one line each; what helps is the same for every card over its
  // budget (it is the fleet's and the policy's), so it is said once.
  const advice = new Map<string, string[]>();
  for (const r of s.replicas) if (r.capacity_advice) advice.set(r.capacity_advice, [...(advice.get(r.capacity_advice) ?? []), r.name]);
  for (const [text, names] of advice) warnings.push(`  what helps (${names.join(", ")}): ${text}`);
  const global = s.warnings.filter((w) => w.startsWith("cluster: ")).map((w) => `  ${w}`);
  return [
    head,
    "",
    body,
    // Per model, because a model's prefixes can only live on the replicas that serve it:
    // a fleet-wide sum counts other models' cards as room this model does not have.
    ...(models.length > 0 ? ["", table(["MODEL", "REPLICAS", `${window} (its replicas, summed)`], models)] : []),
    ...clusterSection(s, now),
    ...(warnings.length + global.length ? ["", "warnings:", ...warnings, ...global] : []),
  ].join("\n");
}

/** The router instances sharing state (absent without [cluster], and from older routers). */
function clusterSection(s: StatusDocument, now: number): string[] {
  const c = s.cluster;
  if (!c) return [];
  // Every instance is heard through Redis: while it is away, this one hears no other, which
  // says nothing about how many are running.
  const reach =
    c.state === "up"
      ? `connected · ${c.instances.length} instance${c.instances.length === 1 ? "" : "s"}`
      : c.state === "down"
        ? `Redis away for ${duration((now - Date.parse(c.since)) / 1000)} · other instances unknown until it is back`
        : c.state.toUpperCase();
  const head = `cluster ${c.namespace} on ${c.redis} · ${reach} · backlog ${int(c.backlog_events)} event${c.backlog_events === 1 ? "" : "s"}`;
  const rows = c.instances.map((i) => [
    i.self ? `${i.name} (this)` : i.name,
    i.self ? "-" : `${(i.last_heartbeat_ms / 1000).toFixed(1)}s ago`,
    `${i.lag_ms.toFixed(1)} ms`,
    i.inflight,
  ]);
  return ["", head, "", table(["INSTANCE", "LAST HEARTBEAT", "SYNC LAG", "INFLIGHT"], rows, { right: [1, 2, 3] })];
}

function modelRows(replicas: readonly ReplicaStatus[]): string[][] {
  const byModel = new Map<string, ReplicaStatus[]>();
  for (const r of replicas) for (const m of new Set(r.models)) byModel.set(m, [...(byModel.get(m) ?? []), r]);
  return [...byModel].map(([model, rs]) => {
    const kv = rs.some((r) => r.kv_tokens === 0) ? 0 : rs.reduce((n, r) => n + r.kv_tokens, 0);
    return [model, rs.map((r) => r.name).join(","), workingSet(rs.reduce((n, r) => n + r.working_set_tokens, 0), kv)];
  });
}

function workingSet(tokens: number, kv: number): string {
  return kv > 0 ? `${int(tokens)} / ${int(kv)} ${pct(tokens / kv)}` : `${int(tokens)} / ?`;
}

function engineCell(e: Record<string, unknown>, now: number, staleAfterMs: number): string {
  const at = typeof e.at === "string" ? Date.parse(e.at) : Number.NaN;
  if (Number.isFinite(at) && now - at > staleAfterMs) return `- (last scrape ${duration((now - at) / 1000)} ago)`;
  if (e.error) return `error: ${e.error}`;
  const v = (k: string) => (typeof e[k] === "number" ? (k === "kv_usage" ? pct(e[k] as number) : String(e[k])) : "?");
  return `${v("running")}/${v("waiting")}/${v("kv_usage")}`;
}
