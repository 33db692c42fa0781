/**
 * A bounded record of the block hashes an engine has computed since its last reset, so a
 * cache miss can be told apart: a block computed here and gone since was evicted; a block
 * never computed here is new (see PrefixStop in engine-api.ts). Both engines (engine.ts,
 * slots.ts) keep one.
 *
 * Bounded because a long run computes far more distinct blocks than any pool holds; the
 * oldest-touched hashes are forgotten first. The bound is a multiple of the pool, so a hash
 * is forgotten only long after its block was evicted — a forgotten one reads as `new`, which
 * under-counts evictions only for prefixes unused for many pool turnovers.
 */
import type { BlockHash } from "./block-pool.ts";

export class ComputedRecord {
  readonly capacity: number;
  /** Insertion order = last touched order (a Set keeps insertion order). */
  private readonly hashes = new Set<BlockHash>();

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`sim: ComputedRecord capacity ${capacity}`);
    this.capacity = capacity;
  }

  /** The record a pool of `blocks` blocks keeps: 16 pool turnovers, at least 65,536 hashes. */
  static forPool(blocks: number): ComputedRecord {
    return new ComputedRecord(Math.max(65_536, 16 * blocks));
  }

  get size(): number {
    return this.hashes.size;
  }

  /** Note that the block with `hash` was computed (again) now. */
  add(hash: BlockHash): void {
    if (this.hashes.has(hash)) this.hashes.delete(hash);
    this.hashes.add(hash);
    if (this.hashes.size > this.capacity) this.hashes.delete(this.hashes.values().next().value as BlockHash);
  }

  has(hash: BlockHash): boolean {
    return this.hashes.has(hash);
  }

  clear(): void {
    this.hashes.clear();
  }
}
