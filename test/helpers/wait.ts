/**
 * How long tests wait, in one place. The suite must give the same verdict on a quiet
 * machine and on a 2-core box at load 15 (another build beside it), where everything
 * real — a process start, a health check, a request — takes 5–10× as long. So a test
 * never sleeps to let something happen: it waits for the event itself (a log line, a
 * state, a count, a port), and these deadlines only bound how long a test waits for an
 * event that never comes. They are not timings: a green run never gets near them.
 */

/**
 * The most one wait for one event may take before it fails naming what it waited for
 * (`until`, `Proc.waitFor`, a process's readiness line). At load 15 the slowest waits
 * in the suite take a few seconds.
 */
export const WAIT_MS = 30_000;

/**
 * Every test's and hook's timeout: `npm test` passes it as `bun test --timeout` (Bun 1.4
 * has no bunfig key for it), and the preload (test/helpers/preload.ts) sets it for a
 * single file run directly. Larger than a few WAIT_MS, so a missing event fails with its
 * own message first. At load 15 the slowest test took 16 s; on a quiet machine 6 s.
 */
export const TEST_TIMEOUT_MS = 120_000;

/**
 * Wait until `check` returns a value (anything but undefined/false) and return it:
 * polls a live condition — a status field, a count, a file — every 20–100 ms.
 * `what` names the event in the error if it does not come within `timeoutMs`.
 */
export async function until<T>(check: () => Promise<T | undefined | false> | T | undefined | false, what: string, timeoutMs = WAIT_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  // Start fast (most events are near), then back off: many tests poll at once on a busy machine.
  for (let pause = 20; ; pause = Math.min(100, pause * 1.5)) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await Bun.sleep(pause);
  }
}
