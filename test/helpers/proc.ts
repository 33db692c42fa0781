/**
 * Real processes for integration tests: spawn `bun src/cli.ts …` (or any program, such as
 * a real engine), wait for a line that says it is ready (an event, not a sleep), capture
 * its output, and kill it afterwards.
 */
import type { Subprocess } from "bun";

const ROOT = new URL("../..", import.meta.url).pathname;
export const CLI = [process.execPath, `${ROOT}src/cli.ts`];

export interface Proc {
  proc: Subprocess<"ignore", "pipe", "pipe">;
  /** Every line printed so far on stdout and stderr (ANSI colours stripped). */
  lines: string[];
  /** Resolves with the first match of `pattern` in a line printed from now on or already printed. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves with the exit code. */
  exited: Promise<number>;
  kill(signal?: NodeJS.Signals | number): Promise<number>;
}

const running = new Set<Proc>();

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
  return spawnProcess([...CLI, ...args], { ...options, label: `llmroute ${args.join(" ")}`, tag: args[0] ?? "llmroute" });
}

/**
 * Spawn `command` with the same line capture, waiting and killing as the CLI gets.
 * `label` names it in timeout and early-exit errors; `tag` prefixes its lines under
 * LLMROUTE_TEST_VERBOSE.
 */
export function spawnProcess(
  command: string[],
  options: { env?: Record<string, string>; cwd?: string; label?: string; tag?: string } = {},
): Proc {
  const label = options.label ?? command.join(" ");
  const tag = options.tag ?? command[0];
  const proc = Bun.spawn(command, {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: (m: RegExpMatchArray) => void }>();
  const onLine = (line: string) => {
    const clean = line.replace(/\x1b\[[0-9;]*m/g, "");
    lines.push(clean);
    if (process.env.LLMROUTE_TEST_VERBOSE) console.error(`[${tag}] ${clean}`);
    for (const w of waiters) {
      const m = clean.match(w.pattern);
      if (m) {
        waiters.delete(w);
        w.resolve(m);
      }
    }
  };
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of stream) {
      buffered += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        onLine(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
      }
    }
    if (buffered) onLine(buffered);
  };
  const pumped = Promise.all([pump(proc.stdout), pump(proc.stderr)]);
  const exited = pumped.then(() => proc.exited);

  const handle: Proc = {
    proc,
    lines,
    exited,
    waitFor(pattern, timeoutMs = 15_000) {
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
        const timer = setTimeout(
          () => settle(() => reject(new Error(`timed out waiting for ${pattern} from \`${label}\`${output()}`))),
          timeoutMs,
        );
        exited.then((code) => {
          if (waiters.has(waiter)) settle(() => reject(new Error(`\`${label}\` exited with ${code} before printing ${pattern}${output()}`)));
        });
      });
    },
    async kill(signal = "SIGTERM") {
      proc.kill(signal);
      const code = await exited;
      running.delete(handle);
      return code;
    },
  };
  running.add(handle);
  return handle;
}

/** Kill every process a test file started (call from afterAll). */
export async function killAll(): Promise<void> {
  await Promise.all([...running].map((p) => p.kill("SIGKILL")));
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
