/**
 * One request sent to a replica, from its admission at the KV wall to its end: the one owner
 * of its bookkeeping there — the in-flight count, its running commit (slot holds, overflow
 * clearing), its tokens at the KV wall, its prefill in the queue and its slot.
 */
import type { Replica } from "./replica.ts";

export interface DispatchOptions {
  /** The tag of its decision's commit (Router.commit); 0: not followed (a replica a reload removed). */
  tag: number;
  /** Its prompt tokens as admitted at the KV wall (released at the end). */
  tokens: number;
  /** Its prompt tokens the replica is expected to prefill. */
  uncachedTokens: number;
  /** When its decision was committed (the index's clock). */
  committedAt: number;
  /** Durations: how long its prefill took. */
  monotonic: () => number;
  /** Times shared with the slot queue's other readers. */
  wallClock: () => number;
  /** The load here changed (in-flight requests, queued prefill): other routers are told. */
  onLoadChanged?: () => void;
}

export class Dispatch {
  private readonly prefillId: number;
  /** Followed to its end only where requests wait for a slot (EngineProfile.servingSlots). */
  private readonly slotId: number | undefined;
  private readonly sentAt: number;
  private answered = false;
  private over = false;

  constructor(
    readonly replica: Replica,
    private readonly options: DispatchOptions,
  ) {
    replica.inflight++;
    replica.running.sent(options.tag);
    this.sentAt = options.monotonic();
    this.prefillId = replica.prefill.begin(options.uncachedTokens, options.committedAt);
    this.slotId = replica.profile?.servingSlots ? replica.slotQueue.begin((options.uncachedTokens / replica.prefill.rate) * 1000, options.wallClock(), options.tag) : undefined;
    options.onLoadChanged?.();
  }

  /**
   * Its answer's first byte arrived. `prefilled`: it was a 2xx streamed answer to a prompt,
   * whose first byte ends its prefill (timed) and starts its generation in a slot; a whole
   * answer or an error says nothing about either.
   */
  firstByte(prefilled: boolean): void {
    this.answered = true;
    const r = this.replica;
    r.prefill.end(this.prefillId, prefilled ? this.options.monotonic() - this.sentAt : undefined);
    if (prefilled) r.slotQueue.firstByte(this.slotId, this.options.wallClock());
    this.options.onLoadChanged?.();
  }

  /**
   * It is over here (once; a second call does nothing). `keptInSlot`: its answer ran its course
   * or its client left, so its prompt stays in its slot; `timedStream`: a whole streamed answer,
   * whose generation time is a sample for the slot queue. One that ends before its first byte
   * changes the load now; one that answered tells other routers through its answer's end.
   */
  end(ended: { keptInSlot: boolean; timedStream: boolean }): void {
    if (this.over) return;
    this.over = true;
    const r = this.replica;
    r.inflight--;
    r.running.ended(this.options.tag, ended.keptInSlot);
    r.wall.release(this.options.tokens);
    r.slotQueue.end(this.slotId, this.options.wallClock(), ended.timedStream);
    if (this.answered) return;
    r.prefill.end(this.prefillId);
    this.options.onLoadChanged?.();
  }
}
