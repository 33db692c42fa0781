/**
 * Real fleets for integration tests: `llmroute sim` replicas and `llmroute serve` as
 * separate processes on ephemeral loopback ports, driven by the official clients.
 */
import OpenAI from "openai";
import { spawnCli, type Proc } from "./proc.ts";
import { tempDir } from "./tmp.ts";

export interface SimProc extends Proc {
  name: string;
  url: string;
  state(): Promise<SimState>;
  faults(faults: Record<string, number>): Promise<void>;
}

export interface SimState {
  name: string;
  requests_total: number;
  cancelled_total: number;
  completed_total: number;
  running: number;
  waiting: number;
  [key: string]: unknown;
}

/** Start a sim replica (tiny profile, fast) and wait until it listens. */
export async function startSimProc(name: string, args: string[] = []): Promise<SimProc> {
  const proc = spawnCli(["sim", "--port", "0", "--name", name, "--profile", "tiny", ...args]);
  const [, , url] = await proc.waitFor(/sim (\S+) listening on (http:\/\/\S+)/);
  return Object.assign(proc, {
    name,
    url: url!,
    async state() {
      return (await (await fetch(`${url}/sim/state`)).json()) as SimState;
    },
    async faults(faults: Record<string, number>) {
      const res = await fetch(`${url}/sim/faults`, { method: "POST", body: JSON.stringify(faults) });
      if (!res.ok) throw new Error(`sim faults: HTTP ${res.status} ${await res.text()}`);
    },
  });
}

export interface RouterProc extends Proc {
  url: string;
  configPath: string;
  client(options?: { apiKey?: string }): OpenAI;
}

/** Write a router.toml for `replicas` (+ extra TOML) and start `llmroute serve` on port 0. */
export async function startRouterProc(
  replicas: { name: string; url: string; extra?: string }[],
  options: { toml?: string; env?: Record<string, string>; args?: string[] } = {},
): Promise<RouterProc> {
  const dir = await tempDir("llmroute-test-");
  const configPath = `${dir}/router.toml`;
  await Bun.write(configPath, routerToml(replicas, options.toml));
  const proc = spawnCli(["serve", "--config", configPath, "--listen", "127.0.0.1:0", "--log-format", "json", ...(options.args ?? [])], {
    env: options.env,
  });
  const [, url] = await proc.waitFor(/listening on (http:\/\/[^\s"]+)/);
  return Object.assign(proc, {
    url: url!,
    configPath,
    client: ({ apiKey = "unused" } = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 }),
  });
}

export function routerToml(replicas: { name: string; url: string; extra?: string }[], extra = ""): string {
  // A long health interval: these tests must see passive (request-driven) failure detection.
  const head = /^\[health\]/m.test(extra) ? "" : `[health]\ninterval = "60s"\n`;
  return `${head}${extra}\n${replicas.map((r) => `[[replica]]\nname = "${r.name}"\nurl = "${r.url}"\n${r.extra ?? ""}`).join("\n")}`;
}

/** JSON log records the router printed, optionally only those with `msg`. */
export function logRecords(proc: Proc, msg?: string): Record<string, any>[] {
  return proc.lines
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, any>)
    .filter((r) => msg === undefined || r.msg === msg);
}

/** Wait until `check` returns a value (not undefined/false), polling a live condition. */
export async function until<T>(check: () => Promise<T | undefined | false> | T | undefined | false, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}
