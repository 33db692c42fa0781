/**
 * Progress on stderr while a probe runs: a cold 90k-token prefill can take 20+ s, and a
 * silent terminal for that long looks like a hang. On a TTY the current step's clock ticks
 * in place; otherwise (CI, pipes) each step prints one line when it starts and one when it
 * ends, so logs stay readable. Results never go here: stdout is for them.
 */
import type { Progress } from "./run.ts";

export interface ProgressOptions {
  write: (text: string) => void;
  isTTY: boolean;
  now: () => number;
  /** Tick interval on a TTY. */
  tickMs?: number;
}

export function createProgress(options: ProgressOptions): Progress & { close(): void } {
  const { write, isTTY, now } = options;
  let timer: ReturnType<typeof setInterval> | undefined;
  const elapsed = (since: number) => `${((now() - since) / 1000).toFixed(1)} s`;
  const stop = () => {
    if (timer !== undefined) clearInterval(timer);
    timer = undefined;
  };
  return {
    step(label) {
      stop();
      const started = now();
      if (isTTY) {
        const draw = () => write(`\r\x1b[2K${label}... ${elapsed(started)}`);
        draw();
        timer = setInterval(draw, options.tickMs ?? 100);
      } else {
        write(`${label}...\n`);
      }
      return (result) => {
        stop();
        write(`${isTTY ? "\r\x1b[2K" : ""}${label}: ${result} (${elapsed(started)})\n`);
      };
    },
    note(line) {
      write(`${isTTY ? "\r\x1b[2K" : ""}${line}\n`);
    },
    close: stop,
  };
}
