/**
 * Responses API ids between instances (./cluster.ts): each id's owner key, written to Redis
 * for a follow-up that outruns the id's event, and the lookups that wait for that event.
 */

/**
 * Responses ids whose owner key is still to be written while Redis is away; the oldest go
 * first beyond it (their events still travel in the backlog, which is how the other
 * instances learn them when Redis is back: the key only serves a follow-up that outruns
 * its event). A key older than the index's TTL is not written at all.
 */
const MAX_PENDING_RESPONSE_KEYS = 100_000;

/** The owner keys of Responses ids not written yet, and the lookups waiting for an id's event from the stream. */
export class ResponseKeys {
  /** Owner keys not yet written (Redis away), oldest first, with when each was learnt. */
  private pending: { id: string; replica: string; at: number }[] = [];
  /** Lookups of a Responses API id waiting for its event to come through the stream. */
  private readonly waiters = new Map<string, Set<() => void>>();

  constructor(
    /** How long Redis keeps an id's owner key (the index's TTL). */
    private readonly ttlMs: number,
  ) {}

  /** `id` was answered by `replica` at `at`: its owner key waits to be written. */
  learnt(id: string, replica: string, at: number): void {
    this.pending.push({ id, replica, at });
    if (this.pending.length > MAX_PENDING_RESPONSE_KEYS) {
      // Past the bound, the expired go, else the oldest tenth: one splice now and then, not a shift per request.
      const live = this.pending.findIndex((k) => at - k.at < this.ttlMs);
      this.pending.splice(0, Math.max(live === -1 ? this.pending.length : live, MAX_PENDING_RESPONSE_KEYS / 10));
    }
  }

  /** Owner keys waiting for Redis (bounded by MAX_PENDING_RESPONSE_KEYS). */
  get size(): number {
    return this.pending.length;
  }

  /** Hands every waiting key to `write` with how long Redis should keep it (ms), and forgets them; the expired are dropped. */
  take(now: number, write: (id: string, replica: string, ttlMs: number) => void): void {
    for (const { id, replica, at } of this.pending.splice(0)) {
      // The key lives as long as the index remembers the id, counted from when it was learnt.
      const ttl = this.ttlMs - (now - at);
      if (ttl <= 0) continue;
      write(id, replica, Math.max(1_000, ttl));
    }
  }

  /** Resolves when the stream brings `id`'s response event (`arrived`), or after `ms`. */
  wait(id: string, ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let waiters = this.waiters.get(id);
      if (!waiters) this.waiters.set(id, (waiters = new Set()));
      const wake = () => {
        clearTimeout(timer);
        waiters!.delete(wake);
        if (waiters!.size === 0 && this.waiters.get(id) === waiters) this.waiters.delete(id);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      waiters.add(wake);
    });
  }

  /** `id`'s response event came through the stream: the lookups waiting for it go on. */
  arrived(id: string): void {
    const waiters = this.waiters.get(id);
    this.waiters.delete(id);
    for (const wake of waiters ?? []) wake();
  }
}
