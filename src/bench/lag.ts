/**
 * How late this process's timers fire while an arm runs. With `--sim`, the bench's sims, its
 * routers and its client share one event loop: whatever one of them computes (a long prompt
 * parsed, hashed, tokenized) holds back every other's timers and sockets, and a time scale
 * below 1 magnifies that hold-up in model time (0.1: ten times). The report prints it, so a
 * TTFT difference smaller than the lag is read as the noise it is (docs/bench.md#timer-lag).
 */
import { quantile } from "./stats.ts";

/** Real milliseconds a timer fired late: quantiles over the arm. */
export interface TimerLag {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Timer firings measured. */
  n: number;
}

/** Watch this event loop with a timer every `intervalMs` until `stop()`. */
export function watchTimerLag(intervalMs = 10, now: () => number = () => performance.now()): { stop(): TimerLag } {
  const lags: number[] = [];
  let due = now() + intervalMs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const tick = () => {
    const t = now();
    lags.push(Math.max(0, t - due));
    due = t + intervalMs;
    timer = setTimeout(tick, intervalMs);
  };
  timer = setTimeout(tick, intervalMs);
  return {
    stop() {
      clearTimeout(timer);
      return lagQuantiles(lags);
    },
  };
}

export function lagQuantiles(lags: readonly number[]): TimerLag {
  if (lags.length === 0) return { p50Ms: 0, p99Ms: 0, maxMs: 0, n: 0 };
  return { p50Ms: quantile(lags, 0.5), p99Ms: quantile(lags, 0.99), maxMs: Math.max(...lags), n: lags.length };
}
