/**
 * Time as an injected dependency: the engine reads `now()` and arms one timer at a time, so
 * unit tests step a `ManualClock` instead of sleeping.
 */
import { readFileSync } from "node:fs";

export type TimerHandle = unknown;

export interface Clock {
  /** Milliseconds, monotonic. */
  now(): number;
  setTimer(delayMs: number, fn: () => void): TimerHandle;
  clearTimer(handle: TimerHandle): void;
}

export const realClock: Clock = {
  now: () => performance.now(),
  setTimer: (delayMs, fn) => setTimeout(fn, delayMs),
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

interface ManualTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** A clock that only moves when told to; due timers fire in time order during `advance`. */
export class ManualClock implements Clock {
  private t: number;
  private timers = new Set<ManualTimer>();
  private seq = 0;

  constructor(startMs = 0) {
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  setTimer(delayMs: number, fn: () => void): TimerHandle {
    const timer = { at: this.t + Math.max(0, delayMs), seq: this.seq++, fn };
    this.timers.add(timer);
    return timer;
  }

  clearTimer(handle: TimerHandle): void {
    this.timers.delete(handle as ManualTimer);
  }

  /** Move time forward by `ms`, firing every timer that falls due on the way, in order. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      const next = this.nextTimer();
      if (!next || next.at > end) break;
      this.timers.delete(next);
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    this.t = end;
  }

  /** Fire timers until none is left (or `limitMs` of clock time has passed); returns the time moved. */
  runUntilIdle(limitMs = 1e12): number {
    const start = this.t;
    for (;;) {
      const next = this.nextTimer();
      if (!next || next.at - start > limitMs) break;
      this.timers.delete(next);
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    return this.t - start;
  }

  get pendingTimers(): number {
    return this.timers.size;
  }

  private nextTimer(): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const timer of this.timers) {
      if (!best || timer.at < best.at || (timer.at === best.at && timer.seq < best.seq)) best = timer;
    }
    return best;
  }
}

let bootOffsetUs: number | undefined;

/**
 * CLOCK_MONOTONIC-like microseconds since boot, as llama.cpp's `ggml_time_us()` reads them
 * (its Process-Start-Time-Unix header). Bun's process.hrtime counts from process start, so
 * two restarts would read alike; /proc/uptime anchors the count to boot (Linux), and
 * performance.now() gives it microsecond resolution. Elsewhere: Unix microseconds.
 */
export function monotonicMicros(): bigint {
  if (bootOffsetUs === undefined) {
    let uptimeUs: number | undefined;
    try {
      const seconds = Number(readFileSync("/proc/uptime", "utf8").split(" ")[0]);
      if (Number.isFinite(seconds)) uptimeUs = seconds * 1e6;
    } catch {
      uptimeUs = undefined;
    }
    bootOffsetUs = (uptimeUs ?? performance.timeOrigin * 1000 + performance.now() * 1000) - performance.now() * 1000;
  }
  return BigInt(Math.round(bootOffsetUs + performance.now() * 1000));
}
