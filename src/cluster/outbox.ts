/**
 * What an instance learnt on its way to the shared stream (./cluster.ts): events gathered
 * into a batch, written after a short gap, kept in a bounded backlog while Redis is away or
 * slow, and held until Redis acknowledges them (a batch whose connection closes first is
 * sent again).
 */
import { BatchWriter, type ClusterEvent } from "./codec.ts";

/** Events kept while Redis is away, in encoded bytes; the oldest go first beyond it. */
const MAX_BACKLOG_BYTES = 64 << 20;
/** Sends not yet acknowledged; beyond it, batches wait in the backlog (a slow Redis). */
const MAX_UNACKED = 256;
/**
 * Under steady traffic, events are written at most this often, in batches (the first after a
 * quiet spell goes at once). Each write wakes this instance, Redis and every other instance
 * about three times, so a shorter gap costs router CPU on every request
 * (docs/cluster.md#what-it-costs). A continuation cannot arrive sooner than its previous
 * turn's answer, which takes longer than this.
 */
const FLUSH_GAP_MS = 20;

interface Batch {
  payload: string;
  events: number;
}

/** The events not shared yet: the batch being gathered and its flush, the encoded batches waiting to be sent, those sent and not yet acknowledged. */
export class Outbox {
  private readonly writer = new BatchWriter();
  private flushScheduled = false;
  private flushTimer?: ReturnType<typeof setTimeout>;
  /** When the oldest event of the batch being gathered happened. */
  private batchSince = 0;
  private lastFlushAt = -Infinity;
  /** Encoded batches not yet sent (Redis away or slow), oldest first, with their event counts. */
  private waiting: Batch[] = [];
  private waitingBytes = 0;
  /** Sent and not acknowledged yet, oldest first, with when they were sent (the heartbeat watches their age). */
  private readonly unacked = new Map<number, Batch & { sentAt?: number }>();
  private sendSeq = 0;
  private readonly pendingAcks = new Set<Promise<unknown>>();

  constructor(
    private readonly now: () => number,
    /** Where events sent (acknowledged) and dropped (backlog full) are counted. */
    private readonly counts: { sent: number; dropped: number },
    /** Sends what waits if Redis is up: called after each flush and each acknowledgement. */
    private readonly drain: () => void,
  ) {}

  /**
   * Adds an event to the batch. Events go out at once when this instance has been quiet,
   * else together at the end of a short gap: under steady traffic one write carries many
   * decisions, which is most of what sharing costs in CPU. A Responses id always goes at
   * once: its follow-up may come at once. Throws, with the batch as it was, if the event
   * cannot be encoded.
   */
  add(event: ClusterEvent): void {
    const first = this.writer.empty;
    this.writer.add(event);
    if (first) this.batchSince = event.at;
    if (event.kind === "response") {
      if (this.flushTimer) clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
      this.flushScheduled = true;
      setImmediate(() => this.flush());
      return;
    }
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    const wait = this.lastFlushAt + FLUSH_GAP_MS - this.now();
    if (wait <= 0) setImmediate(() => this.flush());
    else this.flushTimer = setTimeout(() => this.flush(), wait);
  }

  /** A flush is pending for a batch gathered since `at` or before: a decision committed at `at` may wait in it. */
  holds(at: number): boolean {
    return this.flushScheduled && this.batchSince <= at;
  }

  /** Writes the batch now, without waiting for the end of its gap. */
  flushNow(): void {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushScheduled = true;
    this.flush();
  }

  private flush(): void {
    if (!this.flushScheduled) return;
    this.flushScheduled = false;
    this.flushTimer = undefined;
    this.lastFlushAt = this.now();
    if (!this.writer.empty) {
      const events = this.writer.events;
      const bytes = this.writer.take(this.now());
      const payload = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
      this.waiting.push({ payload, events });
      this.waitingBytes += payload.length;
      while (this.waitingBytes > MAX_BACKLOG_BYTES && this.waiting.length > 1) {
        const dropped = this.waiting.shift()!;
        this.waitingBytes -= dropped.payload.length;
        this.counts.dropped += dropped.events;
      }
    }
    this.drain();
  }

  /**
   * Sends the waiting batches, oldest first, while fewer than MAX_UNACKED are unacknowledged:
   * `append` writes one to the stream; its acknowledgement counts its events as sent and
   * drains again; a write that fails goes to `failed`.
   */
  send(append: (payload: string) => Promise<unknown>, failed: (error: unknown) => void): void {
    while (this.waiting.length > 0 && this.unacked.size < MAX_UNACKED) {
      const batch = this.waiting.shift()!;
      this.waitingBytes -= batch.payload.length;
      const seq = this.sendSeq++;
      this.unacked.set(seq, { ...batch, sentAt: this.now() });
      const sent = append(batch.payload).then(() => {
        if (this.unacked.delete(seq)) this.counts.sent += batch.events;
        this.drain();
      }, failed);
      this.pendingAcks.add(sent);
      void sent.finally(() => this.pendingAcks.delete(sent));
    }
  }

  /** The connection closed: whatever was sent but not acknowledged goes back to the front of the backlog. */
  requeue(): void {
    if (this.unacked.size === 0) return;
    const back = [...this.unacked.values()];
    this.unacked.clear();
    this.waiting = [...back, ...this.waiting];
    this.waitingBytes += back.reduce((a, b) => a + b.payload.length, 0);
  }

  /** Settles when every send made so far is answered. */
  acked(): Promise<unknown> {
    return Promise.all([...this.pendingAcks]);
  }

  /** When the oldest batch not yet acknowledged was sent (undefined: none). */
  oldestSentAt(): number | undefined {
    return this.unacked.values().next().value?.sentAt;
  }

  /** Events not shared yet: in the batch, waiting, or sent and not acknowledged. */
  events(): number {
    let n = this.writer.events;
    for (const b of this.waiting) n += b.events;
    for (const b of this.unacked.values()) n += b.events;
    return n;
  }
}
