/**
 * Fleets for integration tests: `llmroute sim` replicas and an `llmroute serve` router on
 * ephemeral loopback ports, driven by the official clients — either as separate processes
 * (`startSimProc`, `startRouterProc`: for what only a process shows — signals, exit codes,
 * stderr, a crash) or in this process (`startSimInProcess`, `startRouterInProcess`: the
 * same HTTP servers and the same JSON log lines, without a process start each). Both kinds
 * have the same handles, so a test reads alike either way: `router.client()`,
 * `router.waitFor(/line/)`, `logRecords(router, msg)`, `sim.state()`, `sim.faults({…})`.
 * `killAll` (proc.ts) ends both kinds.
 */
import OpenAI from "openai";
import { loadConfigFile } from "../../src/config.ts";
import { createLog } from "../../src/log.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import type { SimState as EngineSimState } from "../../src/sim/app.ts";
import { startSim } from "../../src/sim/index.ts";
import type { SimOptions } from "../../src/sim/options.ts";
import { lineLog, spawnCli, stopAtEnd, type Lines, type Proc } from "./proc.ts";
import { tempDir } from "./tmp.ts";

export { until } from "./wait.ts";

/** A sim replica, in this process or not. */
export interface Sim {
  name: string;
  url: string;
  state(): Promise<SimState>;
  faults(faults: Record<string, number>): Promise<void>;
}

export interface SimProc extends Proc, Sim {}

export interface LocalSim extends Sim {
  /** Close its listener and every connection (to the router, as a killed process looks: refused). */
  stop(): Promise<void>;
}

export type SimState = EngineSimState & Record<string, unknown>;

function simHandle(name: string, url: string): Sim {
  return {
    name,
    url,
    async state() {
      return (await (await fetch(`${url}/sim/state`)).json()) as SimState;
    },
    async faults(faults: Record<string, number>) {
      const res = await fetch(`${url}/sim/faults`, { method: "POST", body: JSON.stringify(faults) });
      if (!res.ok) throw new Error(`sim faults: HTTP ${res.status} ${await res.text()}`);
    },
  };
}

/** Start a sim replica process (tiny profile, fast) and wait until it listens. */
export async function startSimProc(name: string, args: string[] = []): Promise<SimProc> {
  const proc = spawnCli(["sim", "--port", "0", "--name", name, "--profile", "tiny", ...args]);
  const [, , url] = await proc.waitFor(/sim (\S+) listening on (http:\/\/\S+)/);
  return Object.assign(proc, simHandle(name, url!));
}

/** Start a sim replica in this process (tiny profile unless `options` say otherwise). */
export async function startSimInProcess(name: string, options: Partial<SimOptions> & { port?: number } = {}): Promise<LocalSim> {
  const server = await startSim({ profile: "tiny", ...options, name });
  return { ...simHandle(name, server.url), stop: stopAtEnd(() => server.stop()) };
}

export type ReplicaSpec = { name: string; url: string; extra?: string };

/** A router, in this process or not: its URL, its config file, and its log lines. */
export interface Router extends Lines {
  url: string;
  configPath: string;
  client(options?: { apiKey?: string }): OpenAI;
}

export interface RouterProc extends Proc, Router {}

export interface LocalRouter extends Router {
  server: RouterServer;
  /** The admin listener's URL, with server.admin_listen. */
  adminUrl?: string;
  /** Re-read the config file and apply it, as `serve` does on SIGHUP; resolves once applied. */
  reload(): Promise<void>;
  /** Stop as `serve` does on SIGTERM (drain server.drain_timeout, save the state file). */
  stop(): Promise<void>;
}

const clientFor = (url: string) => ({ apiKey = "unused" } = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });

async function writeConfig(replicas: ReplicaSpec[], toml?: string): Promise<string> {
  const dir = await tempDir("llmroute-test-");
  const configPath = `${dir}/router.toml`;
  await Bun.write(configPath, routerToml(replicas, toml));
  return configPath;
}

/** Write a router.toml for `replicas` (+ extra TOML) and start `llmroute serve` on port 0. */
export async function startRouterProc(
  replicas: ReplicaSpec[],
  options: { toml?: string; env?: Record<string, string>; args?: string[] } = {},
): Promise<RouterProc> {
  const configPath = await writeConfig(replicas, options.toml);
  const proc = spawnCli(["serve", "--config", configPath, "--listen", "127.0.0.1:0", "--log-format", "json", ...(options.args ?? [])], {
    env: options.env,
  });
  const [, url] = await proc.waitFor(/listening on (http:\/\/[^\s"]+)/);
  return Object.assign(proc, { url: url!, configPath, client: clientFor(url!) });
}

/**
 * The same router as `llmroute serve --config FILE --listen 127.0.0.1:0 --log-format json`,
 * started in this process: config read from the file it writes (with `env` for env:
 * secrets), JSON log lines collected as the process would print them.
 */
export async function startRouterInProcess(replicas: ReplicaSpec[], options: { toml?: string; env?: Record<string, string> } = {}): Promise<LocalRouter> {
  const configPath = await writeConfig(replicas, options.toml);
  const load = () =>
    loadConfigFile(configPath, { env: { ...process.env, ...options.env }, overrides: { "server.listen": { value: "127.0.0.1:0", flag: "--listen" } } });
  const log = lineLog(`the router of ${configPath}`);
  const server = await startRouter(await load(), { log: createLog({ format: "json", write: log.push }) });
  // killAll stops it at once (as SIGKILL would end a process); stop() drains as SIGTERM does.
  let stopping: Promise<void> | undefined;
  const stopWith = (drainMs: number) => (stopping ??= server.stop({ drainMs }));
  stopAtEnd(() => stopWith(0));
  return {
    ...log,
    url: server.url,
    ...(server.adminUrl ? { adminUrl: server.adminUrl } : {}),
    configPath,
    server,
    client: clientFor(server.url),
    reload: async () => server.reload(await load()),
    stop: () => stopWith(server.config.server.drain_timeout_ms),
  };
}

/**
 * [health] for a test that must see active checks take a replica down and bring it back:
 * often enough to be quick, with a timeout a healthy replica on a loaded machine always
 * meets (a check that times out demotes at once: 150 ms did not, at load 12).
 */
export const WATCHED_HEALTH = `[health]\ninterval = "1s"\ntimeout = "900ms"\n`;

export function routerToml(replicas: ReplicaSpec[], extra = ""): string {
  // A long health interval: these tests must see passive (request-driven) failure detection.
  const head = /^\[health\]/m.test(extra) ? "" : `[health]\ninterval = "60s"\n`;
  return `${head}${extra}\n${replicas.map((r) => `[[replica]]\nname = "${r.name}"\nurl = "${r.url}"\n${r.extra ?? ""}`).join("\n")}`;
}

/** JSON log records a router printed (a process's or an in-process one's), optionally only those with `msg`. */
export function logRecords(router: { lines: string[] }, msg?: string): Record<string, any>[] {
  return router.lines
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, any>)
    .filter((r) => msg === undefined || r.msg === msg);
}
