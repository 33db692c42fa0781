/**
 * What router instances tell each other, and how it travels.
 *
 * Events (the index's commits and corrections, Responses API ids) go into a Redis stream as
 * compact binary batches, base64 in one field (Bun's client sends and receives strings).
 * A commit carries its chains as they are — three arrays of 32-bit words per chain — so the
 * receiver records exactly what the sender recorded, and its tag, by which a retract names
 * it. A batch is the events one instance produced within one flush gap; it carries the
 * sender's clock when it was taken, so a receiver places each event as long ago as it
 * happened without comparing two clocks (another instance's may be an hour off).
 *
 * Load (per replica: requests in flight, queued prefill tokens) is a small JSON message on a
 * pub/sub channel: it is only worth its latest value, so it has no history.
 */
import type { PrefixChain } from "../route/chain.ts";

export type ClusterEvent =
  /**
   * `commit`: the commit's tag (Router.commit). `session`: the session key's 64-bit
   * identity, never the client's own (unbounded) string.
   */
  | { kind: "commit"; at: number; replica: string; commit: number; continued: boolean; session?: bigint; chains: readonly PrefixChain[] }
  | { kind: "forget"; at: number; replica: string }
  | { kind: "forget-used-by"; at: number; replica: string; usedBy: number }
  | { kind: "response"; at: number; replica: string; id: string }
  /** The commit tagged `commit`, which the replica never computed: per chain, how many deepest links it created. */
  | { kind: "retract"; at: number; replica: string; commit: number; chains: readonly PrefixChain[]; created: readonly number[] };

/**
 * The batch format. Instances on different formats cannot read each other's events (a
 * rolling upgrade): the reader says so (BatchFormatError) instead of counting them malformed.
 * 2: the sender's clock when the batch was taken; session keys as 64-bit hashes; commits
 * and retracts carry the commit's tag; 32-bit counts and lengths.
 */
export const BATCH_FORMAT = 2;
const KIND = { commit: 1, forget: 2, "forget-used-by": 3, response: 4, retract: 5 } as const;
const CONTINUED = 1;
const HAS_SESSION = 2;

/**
 * Appends events to one growing batch; `take` returns the bytes and starts the next batch.
 * Counts and lengths are 32-bit (a completions batch may carry 65,536 prompts); an event that
 * fails part-way is taken back whole, so the batch holds only whole events.
 */
export class BatchWriter {
  private bytes = new Uint8Array(4096);
  private view = new DataView(this.bytes.buffer);
  private at = 0;
  private readonly encoder = new TextEncoder();
  events = 0;

  get empty(): boolean {
    return this.events === 0;
  }

  /** Throws (with the batch as it was) if the event cannot be encoded. */
  add(event: ClusterEvent): void {
    const start = this.at;
    try {
      this.write(event);
    } catch (error) {
      this.at = start;
      throw error;
    }
    this.events++;
  }

  private write(event: ClusterEvent): void {
    if (this.at === 0) {
      this.u8(BATCH_FORMAT);
      this.f64(0); // when taken: written by `take`
    }
    this.u8(KIND[event.kind]);
    this.f64(event.at);
    this.str(event.replica);
    switch (event.kind) {
      case "commit": {
        this.u8((event.continued ? CONTINUED : 0) | (event.session !== undefined ? HAS_SESSION : 0));
        if (event.session !== undefined) this.u64(event.session);
        this.u32(event.commit);
        this.u32(event.chains.length);
        for (const chain of event.chains) {
          this.u32(chain.length);
          this.words(chain.lo, chain.length);
          this.words(chain.hi, chain.length);
          this.words(chain.ends, chain.length);
        }
        break;
      }
      case "forget-used-by":
        this.f64(event.usedBy);
        break;
      case "response":
        this.str(event.id);
        break;
      case "retract": {
        this.u32(event.commit);
        this.u32(event.chains.length);
        event.chains.forEach((chain, c) => {
          // Only the created links are needed: the deepest `created` of the chain.
          const created = Math.min(event.created[c] ?? 0, chain.length);
          this.u32(created);
          this.words(chain.lo.subarray(chain.length - created), created);
          this.words(chain.hi.subarray(chain.length - created), created);
        });
        break;
      }
      case "forget":
        break;
    }
  }

  /** The batch, stamped with `sentAt` (the sender's clock, ms). */
  take(sentAt: number): Uint8Array {
    if (this.at > 0) this.view.setFloat64(1, sentAt, true);
    const out = this.bytes.slice(0, this.at);
    this.at = 0;
    this.events = 0;
    return out;
  }

  private room(n: number): void {
    if (this.at + n <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.at + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.bytes.subarray(0, this.at));
    this.bytes = next;
    this.view = new DataView(next.buffer);
  }
  private u8(v: number): void {
    this.room(1);
    this.bytes[this.at++] = v;
  }
  private u32(v: number): void {
    if (!(v >= 0 && v <= 0xffff_ffff)) throw new RangeError(`${v} does not fit in 32 bits`);
    this.room(4);
    this.view.setUint32(this.at, v, true);
    this.at += 4;
  }
  private u64(v: bigint): void {
    this.room(8);
    this.view.setBigUint64(this.at, v, true);
    this.at += 8;
  }
  private f64(v: number): void {
    this.room(8);
    this.view.setFloat64(this.at, v, true);
    this.at += 8;
  }
  private words(a: Uint32Array, n: number): void {
    this.room(4 * n);
    for (let i = 0; i < n; i++) this.view.setUint32(this.at + 4 * i, a[i]!, true);
    this.at += 4 * n;
  }
  private str(s: string): void {
    // At most 3 bytes per UTF-16 unit; the length is written once the bytes are.
    this.room(4 + s.length * 3);
    const { written } = this.encoder.encodeInto(s, this.bytes.subarray(this.at + 4));
    this.u32(written);
    this.at += written;
  }
}

/** A batch written by a router of another version: well formed, but not readable here. */
export class BatchFormatError extends RangeError {
  constructor(readonly format: number) {
    super(`events in batch format ${format}, and this router reads format ${BATCH_FORMAT}: ${format < BATCH_FORMAT ? "an older" : "a newer"} llmroute wrote them`);
  }
}

/**
 * One batch's events and when the sender took it (its clock); a malformed batch throws a
 * RangeError (the caller counts and drops it).
 */
export function decodeBatch(bytes: Uint8Array): { sentAt: number; events: ClusterEvent[] } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let at = 0;
  const need = (n: number) => {
    if (at + n > bytes.byteLength) throw new RangeError(`batch truncated at byte ${at} (needs ${n} more of ${bytes.byteLength})`);
  };
  const u8 = () => (need(1), bytes[at++]!);
  const u32 = () => (need(4), (at += 4), view.getUint32(at - 4, true));
  const u64 = () => (need(8), (at += 8), view.getBigUint64(at - 8, true));
  const f64 = () => {
    need(8);
    at += 8;
    const v = view.getFloat64(at - 8, true);
    if (!Number.isFinite(v)) throw new RangeError(`non-finite number at byte ${at - 8}`);
    return v;
  };
  const str = () => {
    const n = u32();
    need(n);
    at += n;
    try {
      return decoder.decode(bytes.subarray(at - n, at));
    } catch {
      throw new RangeError(`invalid UTF-8 at byte ${at - n}`);
    }
  };
  const words = (n: number) => {
    const a = new Uint32Array(n);
    for (let i = 0; i < n; i++) a[i] = view.getUint32(at + 4 * i, true);
    at += 4 * n;
    return a;
  };

  if (bytes.byteLength === 0) return { sentAt: 0, events: [] };
  const format = u8();
  if (format !== BATCH_FORMAT) throw new BatchFormatError(format);
  const sentAt = f64();
  const events: ClusterEvent[] = [];
  while (at < bytes.byteLength) {
    const kind = u8();
    const eventAt = f64();
    const replica = str();
    switch (kind) {
      case KIND.commit: {
        const flags = u8();
        const session = flags & HAS_SESSION ? u64() : undefined;
        const commit = u32();
        const count = u32();
        const chains: PrefixChain[] = [];
        for (let c = 0; c < count; c++) {
          const length = u32();
          need(12 * length);
          const lo = words(length);
          const hi = words(length);
          const ends = words(length);
          for (let i = 1; i < length; i++) if (ends[i]! < ends[i - 1]!) throw new RangeError("chain ends are not ascending");
          chains.push({ lo, hi, ends, length });
        }
        events.push({ kind: "commit", at: eventAt, replica, commit, continued: (flags & CONTINUED) !== 0, ...(session === undefined ? {} : { session }), chains });
        break;
      }
      case KIND.forget:
        events.push({ kind: "forget", at: eventAt, replica });
        break;
      case KIND["forget-used-by"]:
        events.push({ kind: "forget-used-by", at: eventAt, replica, usedBy: f64() });
        break;
      case KIND.response:
        events.push({ kind: "response", at: eventAt, replica, id: str() });
        break;
      case KIND.retract: {
        const commit = u32();
        const count = u32();
        const chains: PrefixChain[] = [];
        const created: number[] = [];
        for (let c = 0; c < count; c++) {
          const length = u32();
          need(8 * length);
          const lo = words(length);
          const hi = words(length);
          chains.push({ lo, hi, ends: new Uint32Array(length), length });
          created.push(length);
        }
        events.push({ kind: "retract", at: eventAt, replica, commit, chains, created });
        break;
      }
      default:
        throw new RangeError(`unknown event kind ${kind} at byte ${at - 1}`);
    }
  }
  return { sentAt, events };
}

/**
 * Per replica: [in flight, queued prefill tokens, requests still prefilling, oldest of their
 * commit times (0 = none), measured prefill rate in tokens/s (0 = not measured yet)].
 */
export type ReplicaLoad = [inflight: number, queuedTokens: number, pending: number, oldestCommit: number, prefillRate: number];

/** An instance's heartbeat and load report, published on every change (coalesced) and every heartbeat. */
export interface LoadMessage {
  v: 1;
  /** The sender's incarnation: a random id per process start, so a restarted instance is a new one. */
  i: string;
  /** Its configured name. */
  n: string;
  /** The batch format its events are written in (absent before format 2: format 1). */
  f?: number;
  /** Sender's clock (ms). */
  at: number;
  /** The stream id the sender has applied up to; its lag behind the stream's newest event (ms). */
  applied: string;
  lag: number;
  r: Record<string, ReplicaLoad>;
  /** The sender is stopping: drop its load now. */
  bye?: true;
}

/** Parse and check a load message; undefined for anything malformed (counted by the caller). */
export function decodeLoad(text: string): LoadMessage | undefined {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!m || typeof m !== "object") return undefined;
  const o = m as Record<string, unknown>;
  if (o.v !== 1 || typeof o.i !== "string" || typeof o.n !== "string" || typeof o.at !== "number" || typeof o.applied !== "string") return undefined;
  if (typeof o.lag !== "number" || !o.r || typeof o.r !== "object" || Array.isArray(o.r)) return undefined;
  const r: Record<string, ReplicaLoad> = {};
  for (const [name, value] of Object.entries(o.r as Record<string, unknown>)) {
    if (!Array.isArray(value) || value.length !== 5 || !value.every((x) => typeof x === "number" && Number.isFinite(x) && x >= 0)) return undefined;
    r[name] = value as ReplicaLoad;
  }
  return { v: 1, i: o.i, n: o.n, ...(typeof o.f === "number" ? { f: o.f } : {}), at: o.at, applied: o.applied, lag: o.lag, r, ...(o.bye === true ? { bye: true as const } : {}) };
}
