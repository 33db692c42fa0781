/**
 * Progress while a probe runs, through `ui` (stderr): a cold 90k-token prefill can take
 * 20+ s, and a silent terminal for that long looks like a hang. On a terminal the current
 * step's clock ticks in place (a transient line); elsewhere (CI, pipes) each step prints
 * one line when it starts and one when it ends, so logs stay readable. Results never go
 * here: stdout is for them.
 */
import { showsStatus, ui } from "../ui.ts";
import type { Progress } from "./run.ts";

export interface ProgressOptions {
  now: () => number;
  /** Tick interval on a terminal. */
  tickMs?: number;
}

export function createProgress(options: ProgressOptions): Progress & { close(): void } {
  const { now } = options;
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
      if (showsStatus()) {
        // The clock first: a status line is cut to the terminal's width from the right.
        const draw = () => ui.start({ args: [`${elapsed(started).padStart(6)}  ${label}...`], transient: true });
        draw();
        timer = setInterval(draw, options.tickMs ?? 100);
      } else {
        ui.start(`${label}...`);
      }
      return (result) => {
        stop();
        ui.success(`${label}: ${result} (${elapsed(started)})`);
      };
    },
    note(line) {
      ui.info(line);
    },
    close: stop,
  };
}
