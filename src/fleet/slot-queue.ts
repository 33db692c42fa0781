/**
 * The requests this router has in flight on an engine that runs a fixed number of them at once
 * (slots), and how long a new one would wait there for a slot.
 *
 * llama-server gives each request a slot; a request that finds none idle waits in its task
 * queue until a running one is released after its last token (server-context.cpp
 * process_single_task: no available slot → queue_tasks.defer; a released slot pops the
 * deferred tasks; the real server's run: docs/engines.md#llamacpp). Ollama runs llama-server with -np OLLAMA_NUM_PARALLEL, 1 by default
 * (llm/llama_server.go, envconfig/config.go). So on such an engine a request waits for the whole
 * remaining generation of the request in the slot, not only for the prefills ahead of it as on
 * vLLM's and SGLang's continuous batching, whose hundreds of sequences decode side by side.
 *
 * How long a generation takes after its first byte is measured here (decay 0.9 a sample, as the
 * prefill rate); until a streamed answer has been timed, the wait is priced at prefills only.
 */

/** Each measurement keeps this share of the previous mean. */
const DECAY = 0.9;

/** One request in a slot (or waiting for one), as the queue times it. */
interface SlotRequest {
  /** When it was sent (ms). */
  sentAt: number;
  /** Its prefill at the replica's rate then (ms). */
  prefillMs: number;
  /** Its first byte (ms), once seen. */
  firstByteAt?: number;
  /** The tag of its decision's commit (Router.commit, RunningCommits.sent). */
  commit?: number;
}

export class SlotQueue {
  private readonly flights = new Map<number, SlotRequest>();
  private nextId = 1;
  private decodeSum = 0;
  private decodeWeight = 0;
  /** Requests past their first byte. */
  private streaming = 0;
  /** The most streams seen running here at once: an engine's slot count is at least that. */
  concurrentSeen = 0;

  /** Mean time from first byte to end of a streamed answer here (ms), once measured. */
  get decodeMs(): number | undefined {
    return this.decodeWeight > 0 ? this.decodeSum / this.decodeWeight : undefined;
  }

  get size(): number {
    return this.flights.size;
  }

  /** A request (its decision committed with tag `commit`) was sent whose prefill is `prefillMs` at the measured rate; returns its handle. */
  begin(prefillMs: number, now: number, commit?: number): number {
    const id = this.nextId++;
    this.flights.set(id, { sentAt: now, prefillMs: Math.max(0, prefillMs), ...(commit === undefined ? {} : { commit }) });
    return id;
  }

  /**
   * How long until the request committed with tag `commit` ends here (ms): what is left of its
   * prefill and generation, as `waitSeconds` prices a slot's. Undefined before any generation
   * was timed here, or when no such request is in flight.
   */
  leftMs(commit: number, now: number): number | undefined {
    const decode = this.decodeMs;
    if (decode === undefined) return undefined;
    let left: number | undefined;
    for (const f of this.flights.values()) {
      if (f.commit !== commit) continue;
      left = Math.max(left ?? 0, leftOf(f, decode, now));
    }
    return left;
  }

  /** Its first byte arrived (a streamed answer: it holds a slot and decodes). No handle: not followed. */
  firstByte(id: number | undefined, now: number): void {
    if (id === undefined) return;
    const f = this.flights.get(id);
    if (!f || f.firstByteAt !== undefined) return;
    f.firstByteAt = now;
    this.streaming++;
    this.concurrentSeen = Math.max(this.concurrentSeen, this.streaming);
  }

  /** It ended; `complete`: a whole streamed answer, whose time after the first byte is a sample. */
  end(id: number | undefined, now: number, complete: boolean): void {
    if (id === undefined) return;
    const f = this.flights.get(id);
    if (!f) return;
    this.flights.delete(id);
    if (f.firstByteAt !== undefined) this.streaming--;
    if (!complete || f.firstByteAt === undefined) return;
    this.decodeSum = this.decodeSum * DECAY + (now - f.firstByteAt);
    this.decodeWeight = this.decodeWeight * DECAY + 1;
  }

  /**
   * Seconds a new request would wait for one of `slots` here: the requests holding slots (those
   * streaming, then the oldest sent) end after what is left of their prefill and generation;
   * each request queued beyond them takes the first slot freed, for a whole prefill and
   * generation. 0 while a slot is free, and before any generation was timed.
   */
  waitSeconds(slots: number, now: number): number {
    const decode = this.decodeMs;
    if (decode === undefined || slots < 1 || this.flights.size < slots) return 0;
    const order = [...this.flights.values()].sort((a, b) => (a.firstByteAt === undefined ? 1 : 0) - (b.firstByteAt === undefined ? 1 : 0) || a.sentAt - b.sentAt);
    const free: number[] = [];
    for (const f of order.slice(0, slots)) {
      free.push(leftOf(f, decode, now));
    }
    for (const f of order.slice(slots)) {
      free.sort((a, b) => a - b);
      free[0]! += f.prefillMs + decode;
    }
    return Math.min(...free) / 1000;
  }
}

/** What is left of a request's prefill and generation at `now` (ms), given the mean generation time `decode`. */
function leftOf(f: SlotRequest, decode: number, now: number): number {
  return Math.max(0, f.firstByteAt !== undefined ? decode - (now - f.firstByteAt) : Math.max(0, f.prefillMs - (now - f.sentAt)) + decode);
}

/**
 * The requests running on a replica by the tag of their decision's commit (Router.commit): which
 * prompt a slot is busy with (`busyWith`, for hybrid's slot hold), who waits for one to end
 * (`untilEnded`), and which ended since the last was sent (`overflowCleared`). A tag, not the
 * commit time: two commits can share a millisecond. 0 (no commit: a replica a reload removed)
 * is not followed.
 */
export class RunningCommits {
  /** Commit tags of the requests running here, each with how many run under it. */
  private readonly running = new Map<number, number>();
  /** Who waits for a running request to end, by its commit tag. */
  private readonly waiters = new Map<number, (() => void)[]>();
  /** Commit tags of the requests that ended here, their prompts kept in their slots, since the last one was sent. */
  private readonly endedSinceSent = new Set<number>();

  /** The request whose decision was committed with tag `commit` was sent here. */
  sent(commit: number): void {
    this.endedSinceSent.clear();
    if (commit === 0) return;
    this.running.set(commit, (this.running.get(commit) ?? 0) + 1);
  }

  /** It ended here; `keptInSlot`: its answer ran its course, or its client left, so its prompt stays in its slot. */
  ended(commit: number, keptInSlot = false): void {
    if (commit === 0) return;
    if (keptInSlot) this.endedSinceSent.add(commit);
    const n = (this.running.get(commit) ?? 0) - 1;
    if (n > 0) return void this.running.set(commit, n);
    this.running.delete(commit);
    const waiting = this.waiters.get(commit);
    this.waiters.delete(commit);
    for (const wake of waiting ?? []) wake();
  }

  busyWith(commit: number): boolean {
    return this.running.has(commit);
  }

  /**
   * The commits whose prompts a llama.cpp unified KV's overflow purged from idle slots
   * ("Context size has been exceeded."): before it gives up, its `decode` clears every idle
   * slot holding tokens, one per failed try (server-context.cpp try_clear_idle_slots:
   * prompt_clear, nothing saved). Into the host-RAM prompt cache every idle slot is saved when
   * a task starts (process_single_task, --cache-idle-slots, on by default with --cache-ram):
   * so lost are the prompts of the requests that ended here, kept in their slots, since the
   * last one was sent (no task started since to save them) — sent counts as started: one the
   * engine deferred for a slot starts later and saves more, and another client's task saves
   * them too; then this over-counts, which costs hits, never a wrong answer. (The slots the
   * overflow fails are cleared too, `send_error` … `prompt_clear`; of those the router takes
   * back only what the failed requests added: src/proxy/attempt.ts.)
   */
  overflowCleared(): Set<number> {
    return new Set(this.endedSinceSent);
  }

  /**
   * Resolves when the request committed with tag `commit` has ended here (at once if none
   * runs), when `ms` have passed, or when `signal` aborts, whichever is first.
   */
  untilEnded(commit: number, ms: number, signal: AbortSignal): Promise<void> {
    if (!this.running.has(commit) || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        const rest = this.waiters.get(commit)?.filter((w) => w !== done);
        if (rest?.length) this.waiters.set(commit, rest);
        else this.waiters.delete(commit);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.waiters.set(commit, [...(this.waiters.get(commit) ?? []), done]);
    });
  }
}
