/**
 * Real processes for integration tests: spawn `bun src/cli.ts …` (or any program, such as
 * a real engine), wait for a line that says it is ready (an event, not a sleep), capture
 * its output, and kill it afterwards.
 * The conventions every test that waits follows are in test/README.md; in short:
 *
 * - wait for the event a test is about, never for time: `proc.waitFor(/line/)` for a log
 *   line (a process's or an in-process router's: test/helpers/fleet.ts), `until(check,
 *   what)` (test/helpers/wait.ts) for a state, a count or a file; a readiness line for a
 *   process start (`startSimProc`, `startRouterProc` wait for theirs);
 * - leave deadlines to the defaults (WAIT_MS per wait, TEST_TIMEOUT_MS per test, both in
 *   wait.ts, sized for a loaded 2-core machine); no per-test timeout numbers;
 * - a process only where the test is about the process (a signal, an exit code, stderr,
 *   argv, a crash): otherwise the in-process router and sims of fleet.ts;
 * - `afterAll(killAll)` in every file that starts anything.
 */
import type { Subprocess } from "bun";
import { WAIT_MS } from "./wait.ts";

const ROOT = new URL("../..", import.meta.url).pathname;
export const CLI = [process.execPath, `${ROOT}src/cli.ts`];

/** Lines printed so far, and a way to wait for one. */
export interface Lines {
  /** Every line so far (ANSI colours stripped). */
  lines: string[];
  /** Resolves with the first match of `pattern` in a line already printed or printed from now on. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
}

export interface Proc extends Lines {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  /** Resolves with the exit code. */
  exited: Promise<number>;
  kill(signal?: NodeJS.Signals | number): Promise<number>;
}

/**
 * A log read line by line as it is written: `push` each line; `waitFor` a pattern. `what`
 * names the writer in errors; when `ended` resolves (a process exited) pending waits fail
 * at once rather than at their deadline.
 */
export function lineLog(what: string, ended?: Promise<number>): Lines & { push(line: string): void } {
  const lines: string[] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: (m: RegExpMatchArray) => void }>();
  return {
    lines,
    push(line) {
      const clean = line.replace(/\x1b\[[0-9;]*m/g, "");
      lines.push(clean);
      if (process.env.LLMROUTE_TEST_VERBOSE) console.error(`[${what}] ${clean}`);
      for (const w of waiters) {
        const m = clean.match(w.pattern);
        if (m) {
          waiters.delete(w);
          w.resolve(m);
        }
      }
    },
    waitFor(pattern, timeoutMs = WAIT_MS) {
      for (const line of lines) {
        const m = line.match(pattern);
        if (m) return Promise.resolve(m);
      }
      return new Promise((resolve, reject) => {
        const settle = (outcome: () => void) => {
          waiters.delete(waiter);
          clearTimeout(timer);
          outcome();
        };
        const waiter = { pattern, resolve: (m: RegExpMatchArray) => settle(() => resolve(m)) };
        waiters.add(waiter);
        const output = () => `; output:\n${lines.join("\n")}`;
        const timer = setTimeout(() => settle(() => reject(new Error(`timed out after ${timeoutMs / 1000} s waiting for ${pattern} from ${what}${output()}`))), timeoutMs);
        ended?.then((code) => {
          if (waiters.has(waiter)) settle(() => reject(new Error(`${what} exited with ${code} before printing ${pattern}${output()}`)));
        });
      });
    },
  };
}

const running = new Set<Proc>();
const stoppers = new Set<() => Promise<void>>();

/** Have killAll stop something in-process too (a router, a sim); returns a way to stop it now. */
export function stopAtEnd(stop: () => Promise<void>): () => Promise<void> {
  let stopped: Promise<void> | undefined;
  const once = () => {
    stoppers.delete(once);
    return (stopped ??= stop());
  };
  stoppers.add(once);
  return once;
}

// A run stopped early, or a file that never reached its afterAll, must not leave
// processes behind (a real engine keeps a core busy): kill what is left as the runner
// exits, and when it is killed (the signal is then raised again, so it still ends as killed).
const killRunning = () => {
  for (const p of running) p.proc.kill("SIGKILL");
};
process.on("exit", killRunning);
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.once(signal, () => {
    killRunning();
    process.kill(process.pid, signal);
  });
}

export function spawnCli(args: string[], options: { env?: Record<string, string>; cwd?: string } = {}): Proc {
  return spawnProcess([...CLI, ...args], { ...options, label: `\`llmroute ${args.join(" ")}\``, tag: args[0] ?? "llmroute" });
}

/**
 * Spawn `command` with the same line capture, waiting and killing as the CLI gets.
 * `label` names it in timeout and early-exit errors; `tag` is kept for compatibility (lines
 * are prefixed with the label under LLMROUTE_TEST_VERBOSE).
 */
export function spawnProcess(
  command: string[],
  options: { env?: Record<string, string>; cwd?: string; label?: string; tag?: string } = {},
): Proc {
  const proc = Bun.spawn(command, {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let pumped!: () => void;
  const exited = new Promise<void>((resolve) => (pumped = resolve)).then(() => proc.exited);
  const log = lineLog(options.label ?? command.join(" "), exited);
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of stream) {
      buffered += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        log.push(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
      }
    }
    if (buffered) log.push(buffered);
  };
  void Promise.all([pump(proc.stdout), pump(proc.stderr)]).then(pumped);

  const handle: Proc = {
    proc,
    lines: log.lines,
    waitFor: log.waitFor,
    exited,
    async kill(signal = "SIGTERM") {
      proc.kill(signal);
      const code = await exited;
      running.delete(handle);
      return code;
    },
  };
  running.add(handle);
  void exited.then(() => running.delete(handle));
  return handle;
}

/** End everything a test file started: SIGKILL its processes, stop its in-process servers (call from afterAll). */
export async function killAll(): Promise<void> {
  await Promise.all([...[...running].map((p) => p.kill("SIGKILL")), ...[...stoppers].map((stop) => stop())]);
}

/** Run the CLI to completion; returns exit code and output. */
export async function runCli(args: string[], options: { env?: Record<string, string>; cwd?: string } = {}) {
  const proc = Bun.spawn([...CLI, ...args], {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  const strip = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, "");
  return { code, stdout: strip(stdout), stderr: strip(stderr) };
}
