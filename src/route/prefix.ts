/**
 * Prefix identity and the index of who served which prefix.
 *
 * A request's identity is a chain of hashes, one link per chunk of each canonical segment:
 * h₀ = H(tenant ‖ model), hᵢ = H(hᵢ₋₁ ‖ marker ‖ chunkᵢ). Every link names a prefix the
 * engine may still hold as KV; the index remembers, per replica, which links it served.
 * A request's longest known prefix is its deepest link found in the index. Because every
 * message starts a link, a tiny shared prefix still matches (no "first N KiB" window).
 */
import type { Hasher } from "./hash.ts";
import type { RequestShape } from "./shape.ts";

export interface PrefixChain {
  /** hashes[i] identifies the prompt prefix that ends at ends[i] characters. */
  hashes: string[];
  ends: number[];
}

const FIRST_CHUNK = "\u0001";
const NEXT_CHUNK = "\u0002";

export function prefixChain(shape: Pick<RequestShape, "tenant" | "model" | "segments">, hasher: Hasher, chunkChars: number): PrefixChain {
  const hashes: string[] = [];
  const ends: number[] = [];
  let h = hasher.hash(`llmroute/1\u001f${shape.tenant}\u001f${shape.model ?? ""}`);
  let end = 0;
  for (const segment of shape.segments) {
    let offset = 0;
    do {
      const chunk = segment.slice(offset, offset + chunkChars);
      h = hasher.link(h, offset === 0 ? FIRST_CHUNK : NEXT_CHUNK, chunk);
      end += chunk.length;
      hashes.push(h);
      ends.push(end);
      offset += chunkChars;
    } while (offset < segment.length);
  }
  return { hashes, ends };
}

export interface PrefixMatch {
  replica: string;
  /** Number of chain links matched (0 = nothing). */
  depth: number;
  /** Characters of prompt covered by the match. */
  chars: number;
  /** When this replica last served the matched prefix (ms). */
  lastUsed: number;
}

interface Entry {
  replica: string;
  /** Characters this link adds to its parent: summed per replica, shared prefixes count once. */
  delta: number;
  lastUsed: number;
}

export interface PrefixIndexOptions {
  maxEntries: number;
  ttlMs: number;
}

/** One saved index entry: [hash, replica, delta chars, lastUsed ms]. */
export type IndexRecord = [string, string, number, number];

/**
 * Bounded index of (prefix link, replica) → last use. Map order is LRU order; a chain is
 * always recorded deepest-first so a parent link is never older than its children, which
 * keeps every replica's entries prefix-closed and lets a lookup binary-search the chain.
 */
export class PrefixIndex {
  private readonly entries = new Map<string, Entry>();
  private readonly workingSet = new Map<string, number>();

  constructor(readonly options: PrefixIndexOptions) {}

  get size(): number {
    return this.entries.size;
  }

  /** The longest prefix of `chain` each replica is known to hold. */
  match(chain: PrefixChain, replica: string): PrefixMatch {
    // Entries are prefix-closed per replica: links [0, lo) are held, links [hi, n) are not.
    let lo = 0;
    let hi = chain.hashes.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.entries.has(key(chain.hashes[mid]!, replica))) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0) return { replica, depth: 0, chars: 0, lastUsed: 0 };
    const deepest = this.entries.get(key(chain.hashes[lo - 1]!, replica))!;
    return { replica, depth: lo, chars: chain.ends[lo - 1]!, lastUsed: deepest.lastUsed };
  }

  /** Remember that `replica` now holds every prefix in `chain`. */
  record(chain: PrefixChain, replica: string, now: number): void {
    for (let i = chain.hashes.length - 1; i >= 0; i--) {
      const k = key(chain.hashes[i]!, replica);
      const existing = this.entries.get(k);
      if (existing) {
        this.entries.delete(k);
        existing.lastUsed = now;
        this.entries.set(k, existing);
      } else {
        const delta = chain.ends[i]! - (i === 0 ? 0 : chain.ends[i - 1]!);
        this.entries.set(k, { replica, delta, lastUsed: now });
        this.workingSet.set(replica, (this.workingSet.get(replica) ?? 0) + delta);
      }
    }
    while (this.entries.size > this.options.maxEntries) this.dropOldest();
  }

  /** Drop entries idle longer than the TTL; returns how many were dropped. */
  evict(now: number): number {
    let dropped = 0;
    for (const [k, entry] of this.entries) {
      if (now - entry.lastUsed <= this.options.ttlMs) break;
      this.remove(k, entry);
      dropped++;
    }
    return dropped;
  }

  /** Forget everything a replica held (it restarted, or left the fleet). */
  forget(replica: string): void {
    for (const [k, entry] of this.entries) if (entry.replica === replica) this.remove(k, entry);
    this.workingSet.delete(replica);
  }

  /** Characters of distinct prefixes a replica has served recently (shared prefixes once). */
  workingSetChars(replica: string): number {
    return this.workingSet.get(replica) ?? 0;
  }

  /** Entries per replica (for /status and /metrics). */
  countByReplica(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const entry of this.entries.values()) counts.set(entry.replica, (counts.get(entry.replica) ?? 0) + 1);
    return counts;
  }

  /** Oldest first, so `restore` rebuilds the same LRU order. */
  save(): IndexRecord[] {
    return [...this.entries].map(([k, e]) => [k.slice(0, k.indexOf("@")), e.replica, e.delta, e.lastUsed]);
  }

  restore(records: IndexRecord[], keep: (replica: string) => boolean): number {
    let restored = 0;
    for (const [hash, replica, delta, lastUsed] of records) {
      if (!keep(replica)) continue;
      const k = key(hash, replica);
      const old = this.entries.get(k);
      if (old) this.remove(k, old);
      this.entries.set(k, { replica, delta, lastUsed });
      this.workingSet.set(replica, (this.workingSet.get(replica) ?? 0) + delta);
      restored++;
    }
    while (this.entries.size > this.options.maxEntries) this.dropOldest();
    return restored;
  }

  private dropOldest(): void {
    const first = this.entries.entries().next();
    if (!first.done) this.remove(first.value[0], first.value[1]);
  }

  private remove(k: string, entry: Entry): void {
    this.entries.delete(k);
    const left = (this.workingSet.get(entry.replica) ?? 0) - entry.delta;
    if (left > 0) this.workingSet.set(entry.replica, left);
    else this.workingSet.delete(entry.replica);
  }
}

function key(hash: string, replica: string): string {
  return `${hash}@${replica}`;
}
