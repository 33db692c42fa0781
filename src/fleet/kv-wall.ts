/**
 * A card's KV wall: the prompt tokens in flight there through this router, and — once its
 * engine turned requests away as KV-full (llama.cpp's unified KV: "Context size has been
 * exceeded.") — how many tokens it failed at. Until that reading lapses, a request that would
 * bring the in-flight tokens to KV_WALL_SHARE of it waits here for one of them to end (`admit`,
 * `release`); one alone always goes. What waiting cost is counted (`waitedMs`) and paid when a
 * conversation leaves the card for it (`payWaits`, hybrid's `wall`).
 */

/**
 * Share of a KV wall that requests must stay under to be sent beside each other: the router
 * counts prompts from characters, the engine also holds their generated tokens.
 */
export const KV_WALL_SHARE = 0.9;

/** A wall standing: its tokens, until when, over which window, and what requests waited at it since it was last paid. */
export interface StandingWall {
  tokens: number;
  until: number;
  windowMs: number;
  waits: { at: number; ms: number }[];
  paidAt: number;
}

export class KvWall {
  /**
   * Prompt tokens of the requests in flight here through this router (as the router counts
   * them: characters ÷ a learnt ratio, so a float). Exactly 0 when none is (`admitted`): add
   * and subtract cycles of floats leave a residue (0.1 + 0.2 − 0.1 − 0.2 ≠ 0) that must not
   * read as load.
   */
  inflightTokens = 0;
  /**
   * The last reading, while one was taken: until `until`, the wall; a low reading (other
   * clients' load, a request that ended just before) only makes requests wait, and lapses after
   * a capacity window. `waits` are counted from `paidAt` at the earliest — when it was set or a
   * conversation last left this card for it.
   */
  wall?: StandingWall;
  /** Requests admitted (`admit`) that have not been released (`release`). */
  private admitted = 0;
  /** Tokens of requests turned away as full since the last admission: one overflow fails them together. */
  private overflowTokens = 0;
  private waiters: (() => void)[] = [];

  /** The wall while it stands at `now`. */
  standing(now: number): StandingWall | undefined {
    return this.wall && now < this.wall.until ? this.wall : undefined;
  }

  /**
   * Count `tokens` more in flight here, at once when they fit beside the requests in flight —
   * synchronously, so no other decision runs between the caller's and this — else once they do
   * (one ended, or the wall lapsed): a promise, false when `signal` aborted first (nothing
   * counted). The caller bounds the wait (it aborts `signal`).
   */
  admit(tokens: number, signal: AbortSignal, now: () => number): true | Promise<boolean> {
    if (!this.mustWait(tokens, now)) {
      this.reserve(tokens);
      return true;
    }
    return this.admitLater(tokens, signal, now);
  }

  private mustWait(tokens: number, now: () => number): boolean {
    return this.admitted > 0 && this.wall !== undefined && now() < this.wall.until && this.inflightTokens + tokens >= KV_WALL_SHARE * this.wall.tokens;
  }

  private reserve(tokens: number): void {
    this.admitted++;
    this.inflightTokens += tokens;
    this.overflowTokens = 0;
  }

  private async admitLater(tokens: number, signal: AbortSignal, now: () => number): Promise<boolean> {
    const since = now();
    while (!signal.aborted && this.mustWait(tokens, now)) {
      // Woken by a request that leaves, by its client leaving (or the caller's deadline), or
      // when the wall lapses — a timer of this wait's own; a wall set again moves `until` on.
      await new Promise<void>((resolve) => {
        let lapse: Timer | undefined;
        const wake = () => {
          clearTimeout(lapse);
          signal.removeEventListener("abort", wake);
          this.waiters = this.waiters.filter((w) => w !== wake);
          resolve();
        };
        lapse = setTimeout(wake, Math.max(0, this.wall!.until - now()) + 1);
        this.waiters.push(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
    // A client that gave up waiting was kept waiting too.
    const wall = this.wall;
    if (wall) {
      const at = now();
      const ms = at - Math.max(since, wall.paidAt);
      if (ms > 0) wall.waits.push({ at, ms });
    }
    if (signal.aborted) return false;
    this.reserve(tokens);
    return true;
  }

  /** A request admitted with `tokens` is over here: those waiting for room look again, in arrival order. */
  release(tokens: number): void {
    this.admitted = Math.max(0, this.admitted - 1);
    this.inflightTokens = this.admitted === 0 ? 0 : Math.max(0, this.inflightTokens - tokens);
    if (this.waiters.length === 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** What requests have waited at the wall standing at `now`, within its capacity window, since it was last paid (ms); 0 with none. */
  waitedMs(now: number): number {
    const wall = this.standing(now);
    if (!wall) return 0;
    const from = now - wall.windowMs;
    while (wall.waits.length > 0 && wall.waits[0]!.at < from) wall.waits.shift();
    return wall.waits.reduce((sum, w) => sum + w.ms, 0);
  }

  /**
   * A conversation left this card for its KV wall (hybrid's `wall`): what staying had cost is
   * paid, and waits count again from `now`. Returns how to take that back (the move failed
   * before the first byte: nothing left).
   */
  payWaits(now: number): () => void {
    const wall = this.wall;
    if (!wall) return () => {};
    const { waits, paidAt } = wall;
    wall.waits = [];
    wall.paidAt = now;
    return () => {
      if (this.wall !== wall) return;
      wall.waits = [...waits, ...wall.waits];
      wall.paidAt = paidAt;
    };
  }

  /**
   * The engine turned a request of `tokens` (still in flight here) away as KV-full: what was in
   * flight then, with the others that one overflow failed before it, is the wall for a
   * capacity window (the lowest such reading while one lasts). Returns it.
   */
  turnedAwayFull(tokens: number, now: number, windowMs: number): number {
    const reading = this.inflightTokens + this.overflowTokens;
    this.overflowTokens += tokens;
    const standing = this.standing(now);
    const next = standing
      ? Object.assign(standing, { tokens: Math.min(standing.tokens, reading), until: now + windowMs, windowMs })
      : { tokens: reading, until: now + windowMs, windowMs, waits: [], paidAt: now };
    this.wall = next;
    return next.tokens;
  }
}
