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
  /** Key of the parent link on the same replica (undefined for a first link). */
  parent?: string;
  /** Links on the same replica that extend this one; 0 = a tip (a conversation's latest turn). */
  children: number;
  /** Recorded again after it was created: the prefix was reused (a later turn, a shared document). */
  reused: boolean;
  /** Recorded by a continuation: part of a conversation, likely to be sent again. */
  continued: boolean;
}

/** Per-replica totals kept as entries come and go. */
export interface ReplicaIndexStats {
  /** Characters of distinct prefixes held (shared prefixes once). */
  chars: number;
  entries: number;
  /** Remembered prompt tips: conversations (their latest turn) and one-shots. */
  tips: number;
}

export interface PrefixIndexOptions {
  maxEntries: number;
  ttlMs: number;
}

/** One saved index entry: [hash, replica, delta chars, lastUsed ms, parent hash or null, flags (1 reused, 2 continued)]. */
export type IndexRecord = [string, string, number, number, string | null, number];

/**
 * Bounded index of (prefix link, replica) → last use. Map order is LRU order; a chain is
 * always recorded deepest-first so a parent link is never older than its children, which
 * keeps every replica's entries prefix-closed and lets a lookup binary-search the chain.
 */
export class PrefixIndex {
  private readonly entries = new Map<string, Entry>();
  private readonly stats = new Map<string, ReplicaIndexStats>();

  /** Bounds; mutable so a config reload applies them (the next record/evict enforces them). */
  constructor(public options: PrefixIndexOptions) {}

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

  /** Remember that `replica` now holds every prefix in `chain` (sent by a continuation or not). */
  record(chain: PrefixChain, replica: string, now: number, continued = false): void {
    const stats = this.statsOf(replica);
    let childInserted = false;
    for (let i = chain.hashes.length - 1; i >= 0; i--) {
      const k = key(chain.hashes[i]!, replica);
      const existing = this.entries.get(k);
      if (existing) {
        this.entries.delete(k);
        existing.lastUsed = now;
        existing.reused = true;
        if (continued) existing.continued = true;
        if (childInserted && existing.children++ === 0) stats.tips--;
        this.entries.set(k, existing);
        childInserted = false;
      } else {
        const delta = chain.ends[i]! - (i === 0 ? 0 : chain.ends[i - 1]!);
        const parent = i === 0 ? undefined : key(chain.hashes[i - 1]!, replica);
        const children = childInserted ? 1 : 0;
        this.entries.set(k, { replica, delta, lastUsed: now, parent, children, reused: false, continued });
        stats.chars += delta;
        stats.entries++;
        if (children === 0) stats.tips++;
        childInserted = true;
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
    for (const [k, entry] of this.entries) if (entry.replica === replica) this.entries.delete(k);
    this.stats.delete(replica);
  }

  /** Characters of distinct prefixes a replica has served recently (shared prefixes once). */
  workingSetChars(replica: string): number {
    return this.stats.get(replica)?.chars ?? 0;
  }

  replicaStats(replica: string): ReplicaIndexStats {
    return { ...(this.stats.get(replica) ?? { chars: 0, entries: 0, tips: 0 }) };
  }

  /**
   * The active working set in characters: distinct prefixes used at or after `since` (ms)
   * that belong to a conversation or were reused — per replica, and for the whole fleet
   * with a prefix held on several replicas counted once. A one-shot's own text, never sent
   * again, occupies the cache only until evicted and is not what makes a card thrash.
   */
  activeWorkingSet(since: number): { perReplica: Map<string, number>; fleet: number } {
    const perReplica = new Map<string, number>();
    const seen = new Set<string>();
    let fleet = 0;
    for (const [k, e] of this.entries) {
      if (e.lastUsed < since || !(e.reused || e.continued)) continue;
      perReplica.set(e.replica, (perReplica.get(e.replica) ?? 0) + e.delta);
      const hash = hashOf(k);
      if (!seen.has(hash)) {
        seen.add(hash);
        fleet += e.delta;
      }
    }
    return { perReplica, fleet };
  }

  /** Oldest first, so `restore` rebuilds the same LRU order. */
  save(): IndexRecord[] {
    return [...this.entries].map(([k, e]) => [
      hashOf(k),
      e.replica,
      e.delta,
      e.lastUsed,
      e.parent ? hashOf(e.parent) : null,
      (e.reused ? 1 : 0) | (e.continued ? 2 : 0),
    ]);
  }

  /** Load saved entries (e.g. from routing.state_file) for the replicas `keep` accepts. */
  restore(records: IndexRecord[], keep: (replica: string) => boolean): number {
    let restored = 0;
    for (const [hash, replica, delta, lastUsed, parent, flags] of records) {
      if (!keep(replica)) continue;
      const k = key(hash, replica);
      this.entries.delete(k);
      const parentKey = parent ? key(parent, replica) : undefined;
      this.entries.set(k, { replica, delta, lastUsed, parent: parentKey, children: 0, reused: (flags & 1) !== 0, continued: (flags & 2) !== 0 });
      restored++;
    }
    this.rebuildStats();
    while (this.entries.size > this.options.maxEntries) this.dropOldest();
    return restored;
  }

  private rebuildStats(): void {
    this.stats.clear();
    for (const e of this.entries.values()) e.children = 0;
    for (const e of this.entries.values()) {
      const parent = e.parent ? this.entries.get(e.parent) : undefined;
      if (parent) parent.children++;
    }
    for (const e of this.entries.values()) {
      const stats = this.statsOf(e.replica);
      stats.chars += e.delta;
      stats.entries++;
      if (e.children === 0) stats.tips++;
    }
  }

  private statsOf(replica: string): ReplicaIndexStats {
    let stats = this.stats.get(replica);
    if (!stats) this.stats.set(replica, (stats = { chars: 0, entries: 0, tips: 0 }));
    return stats;
  }

  private dropOldest(): void {
    const first = this.entries.entries().next();
    if (!first.done) this.remove(first.value[0], first.value[1]);
  }

  private remove(k: string, entry: Entry): void {
    this.entries.delete(k);
    const stats = this.statsOf(entry.replica);
    stats.chars -= entry.delta;
    stats.entries--;
    if (entry.children === 0) stats.tips--;
    const parent = entry.parent ? this.entries.get(entry.parent) : undefined;
    if (parent && --parent.children === 0) stats.tips++;
    if (stats.entries === 0) this.stats.delete(entry.replica);
  }
}

function key(hash: string, replica: string): string {
  return `${hash}@${replica}`;
}

function hashOf(k: string): string {
  return k.slice(0, k.indexOf("@"));
}
