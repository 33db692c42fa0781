/**
 * The KV pool, shaped like vLLM's block manager with prefix caching.
 *
 * A fixed number of blocks; each has a reference count and, once a sequence has filled and
 * computed it, a chained content hash under which later prompts can find it. Blocks with
 * no reference sit in a free queue in LRU order — still holding their hash, so still
 * hittable — and are evicted from the front when fresh blocks are needed. Blocks a running
 * sequence references are never in the free queue, so they cannot be evicted: running
 * sequences and cached prefixes compete for the same pool.
 */

export type BlockHash = bigint;

/** The chained hash of one full block: its content, seeded by the previous block's hash. */
export function chainHash(parent: BlockHash, content: string): BlockHash {
  return Bun.hash.wyhash(content, parent);
}

/** The hash every chain starts from; a `cache_salt` makes a separate family of chains. */
export function rootHash(salt: string | undefined): BlockHash {
  return Bun.hash.wyhash(`llmroute-sim\u0000${salt ?? ""}`, 0n);
}

export class BlockPool {
  readonly numBlocks: number;
  private readonly refs: Int32Array;
  private readonly hashes: (BlockHash | undefined)[];
  private readonly byHash = new Map<BlockHash, number>();
  /** ref == 0 blocks in eviction order (first = evicted first). A Set keeps insertion order. */
  private readonly free = new Set<number>();
  /** Cached blocks dropped to make room, since the last reset. */
  evictions = 0;

  constructor(numBlocks: number) {
    this.numBlocks = numBlocks;
    this.refs = new Int32Array(numBlocks);
    this.hashes = new Array<BlockHash | undefined>(numBlocks).fill(undefined);
    for (let id = 0; id < numBlocks; id++) this.free.add(id);
  }

  /** Blocks no sequence references (some still hold cached content that may be hit or evicted). */
  get freeBlocks(): number {
    return this.free.size;
  }

  /** Blocks holding a hash, referenced or not. */
  get cachedBlocks(): number {
    return this.byHash.size;
  }

  /** Blocks referenced by sequences. */
  get usedBlocks(): number {
    return this.numBlocks - this.free.size;
  }

  /** vLLM's kv_cache_usage_perc: referenced blocks / all blocks (evictable cache counts as free). */
  get usage(): number {
    return this.usedBlocks / this.numBlocks;
  }

  /** The block cached under `hash`, if any. Never touches LRU order. */
  lookup(hash: BlockHash): number | undefined {
    return this.byHash.get(hash);
  }

  refCount(id: number): number {
    return this.refs[id]!;
  }

  hashOf(id: number): BlockHash | undefined {
    return this.hashes[id];
  }

  /** Block ids in the order they would be evicted (tests and /sim/state). */
  evictionOrder(): number[] {
    return [...this.free];
  }

  /**
   * Take the cached blocks `hits` (by id, from `lookup`) plus `fresh` new blocks, all with one
   * more reference, or nothing at all when the pool cannot supply them without touching
   * blocks that running sequences hold. Fresh blocks come from the front of the free queue,
   * evicting whatever they cached.
   */
  allocate(hits: readonly number[], fresh: number): number[] | null {
    let hitsInFreeQueue = 0;
    for (const id of hits) if (this.refs[id] === 0) hitsInFreeQueue++;
    if (fresh > this.free.size - hitsInFreeQueue) return null;
    for (const id of hits) {
      if (this.refs[id] === 0) this.free.delete(id);
      this.refs[id]!++;
    }
    const ids = [...hits];
    for (let i = 0; i < fresh; i++) ids.push(this.takeFresh());
    return ids;
  }

  /** One more fresh block, or null when every block is referenced. */
  grow(): number | null {
    return this.free.size === 0 ? null : this.takeFresh();
  }

  /**
   * Record that block `id` now holds the full block with `hash`. If another block already
   * caches that hash (two sequences computed the same prefix concurrently), the first one
   * stays the cached copy and this one stays anonymous, as in vLLM.
   */
  commit(id: number, hash: BlockHash): void {
    if (this.hashes[id] !== undefined || this.byHash.has(hash)) return;
    this.hashes[id] = hash;
    this.byHash.set(hash, id);
  }

  /**
   * Drop one reference from each block. Blocks reaching zero join the back of the free queue
   * tail-first, so a sequence's last blocks are evicted before its first ones (a shared
   * prefix outlives the unique tails built on it) — vLLM frees in the same order.
   */
  release(ids: readonly number[]): void {
    for (let i = ids.length - 1; i >= 0; i--) {
      const id = ids[i]!;
      const ref = --this.refs[id]!;
      if (ref < 0) throw new Error(`sim: block ${id} released twice`);
      if (ref === 0) this.free.add(id);
    }
  }

  /** Forget every cached hash (referenced blocks stay allocated). */
  clearCache(): void {
    this.byHash.clear();
    this.hashes.fill(undefined);
    this.evictions = 0;
  }

  private takeFresh(): number {
    const id = this.free.values().next().value as number;
    this.free.delete(id);
    const hash = this.hashes[id];
    if (hash !== undefined) {
      this.byHash.delete(hash);
      this.hashes[id] = undefined;
      this.evictions++;
    }
    this.refs[id] = 1;
    return id;
  }
}
