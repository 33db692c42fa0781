/**
 * Processes for the perf scripts: start a server (pinned to CPUs when asked), wait until it
 * answers, read its CPU time, stop it. A server's output goes to a log file, never to a pipe
 * the harness must drain: draining would put the harness's own work on the measured path,
 * and only for the servers that log (llmroute logs a line per request; the others do not).
 *
 * Not the test suite's helper (test/helpers/proc.ts spawns the CLI and reads its lines):
 * this one starts any command, and waits on the port it was given.
 */
import { closeSync, existsSync, openSync, readFileSync } from "node:fs";

export interface Server {
  name: string;
  /** http://127.0.0.1:PORT */
  url: string;
  pid: number;
  /** Where its stdout and stderr go. */
  log: string;
  exited: Promise<number>;
  stop(): Promise<void>;
}

export interface StartOptions {
  name: string;
  cmd: string[];
  /** The URL it will listen on (the caller chose the port). */
  url: string;
  /** Answered with 200 once the server is ready; default /health. */
  readyPath?: string;
  log: string;
  /** A taskset CPU list ("1", "0,1"); ignored when taskset is missing. */
  cpus?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
}

/** The path of an executable on PATH or in the sbin directories Debian puts servers in. */
export function which(name: string): string | undefined {
  return Bun.which(name) ?? ["/usr/sbin", "/sbin", "/usr/local/sbin"].map((d) => `${d}/${name}`).find((p) => existsSync(p));
}

const TASKSET = which("taskset");

/** The command, run on `cpus` when pinning is asked for and possible. */
export function pinned(cmd: string[], cpus: string | undefined): string[] {
  return cpus && TASKSET ? [TASKSET, "-c", cpus, ...cmd] : cmd;
}

export const canPin = () => TASKSET !== undefined;

/**
 * Where processes run when pinned: the proxy under test gets the last core to itself, the
 * client, the engine and the script share the others. Undefined when not pinning (asked
 * not to, or one core only).
 */
export function cpuLayout(cores: number, pin: boolean): { proxy: string; load: string } | undefined {
  if (!pin || cores < 2) return undefined;
  return { proxy: String(cores - 1), load: cores === 2 ? "0" : `0-${cores - 2}` };
}

/** A process's resident set (VmRSS), in bytes. */
export function rssBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) * 1024;
}

/** A port nothing listens on right now (bind to 0, read it, close). */
export async function freePort(): Promise<number> {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = s.port!;
  await s.stop(true);
  return port;
}

export async function startServer(o: StartOptions): Promise<Server> {
  const fd = openSync(o.log, "a");
  const proc = Bun.spawn(pinned(o.cmd, o.cpus), {
    stdin: "ignore",
    stdout: fd,
    stderr: fd,
    env: { ...process.env, NO_COLOR: "1", ...o.env },
  });
  closeSync(fd);
  let code: number | undefined;
  const exited = proc.exited.then((c) => (code = c));
  const stop = async () => {
    if (code !== undefined) return;
    proc.kill("SIGTERM");
    const killed = await Promise.race([exited.then(() => true), Bun.sleep(10_000).then(() => false)]);
    if (!killed) {
      proc.kill("SIGKILL");
      await exited;
    }
  };
  const deadline = performance.now() + (o.timeoutMs ?? 20_000);
  const ready = `${o.url}${o.readyPath ?? "/health"}`;
  while (performance.now() < deadline) {
    if (code !== undefined) throw new Error(`${o.name} exited with ${code} before answering ${ready}:\n${tail(o.log)}`);
    const ok = await fetch(ready, { signal: AbortSignal.timeout(1000) }).then(
      async (r) => (await r.arrayBuffer(), r.status === 200),
      () => false,
    );
    if (ok) return { name: o.name, url: o.url, pid: proc.pid, log: o.log, exited, stop };
    await Bun.sleep(25);
  }
  await stop();
  throw new Error(`${o.name} did not answer ${ready} within ${o.timeoutMs ?? 20_000} ms:\n${tail(o.log)}`);
}

/** Run a command to its end: exit code, output, and the CPU time it used (ms). */
export async function run(cmd: string[], options: { cpus?: string; cwd?: string } = {}) {
  const proc = Bun.spawn(pinned(cmd, options.cpus), { stdin: "ignore", stdout: "pipe", stderr: "pipe", cwd: options.cwd });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  const usage = proc.resourceUsage();
  const cpuMs = usage ? Number(usage.cpuTime.user + usage.cpuTime.system) / 1000 : NaN;
  return { code, stdout, stderr, cpuMs };
}

/** The last lines of a log file, for an error message. */
export function tail(file: string, lines = 15): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no output)";
  }
}
