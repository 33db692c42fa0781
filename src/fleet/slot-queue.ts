/**
 * The requests this router has in flight on an engine that runs a fixed number of them at once
 * (slots), and how long a new one would wait there for a slot.
 *
 * llama-server gives each request a slot; a request that finds none idle waits in its task
 * queue until a running one is released after its last token (server-context.cpp
 * process_single_task: no available slot → queue_tasks.defer; a released slot pops the
 * deferred tasks; seen on the real server, --parallel 1: a request sent 50 ms after a 400-token
 * one got its first byte 6–11 ms after that one's last, 2 of 2). Ollama runs llama-server with -np OLLAMA_NUM_PARALLEL, 1 by default
 * (llm/llama_server.go, envconfig/config.go). So on such an engine a request waits for the whole
 * remaining generation of the request in the slot, not only for the prefills ahead of it as on
 * vLLM's and SGLang's continuous batching, whose hundreds of sequences decode side by side.
 *
 * How long a generation takes after its first byte is measured here (decay 0.9 a sample, as the
 * prefill rate); until a streamed answer has been timed, the wait is priced at prefills only.
 */

/** Each measurement keeps this share of the previous mean. */
const DECAY = 0.9;

interface Flight {
  /** When it was sent (ms). */
  sentAt: number;
  /** Its prefill at the replica's rate then (ms). */
  prefillMs: number;
  /** Its first byte (ms), once seen. */
  firstByteAt?: number;
  /** The tag of its decision's commit (Router.commit, Replica.began). */
  commit?: number;
}

export class SlotQueue {
  private readonly flights = new Map<number, Flight>();
  private nextId = 1;
  private decodeSum = 0;
  private decodeWeight = 0;
  /** Flights past their first byte. */
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

/** What is left of a flight's prefill and generation at `now` (ms), given the mean generation time `decode`. */
function leftOf(f: Flight, decode: number, now: number): number {
  return Math.max(0, f.firstByteAt !== undefined ? decode - (now - f.firstByteAt) : Math.max(0, f.prefillMs - (now - f.sentAt)) + decode);
}
