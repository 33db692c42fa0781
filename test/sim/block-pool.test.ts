import { describe, expect, it } from "bun:test";
import { BlockPool, chainHash, rootHash } from "../../src/sim/block-pool.ts";

const h = (n: number) => chainHash(rootHash(undefined), `block-${n}`);

describe("BlockPool", () => {
  it("hands out fresh blocks in free-queue order and refuses what it cannot supply", () => {
    const pool = new BlockPool(4);
    expect(pool.allocate([], 3)).toEqual([0, 1, 2]);
    expect(pool.freeBlocks).toBe(1);
    expect(pool.allocate([], 2)).toBeNull();
    expect(pool.freeBlocks).toBe(1);
  });

  it("keeps released blocks hittable until they are needed, then evicts least recently freed first", () => {
    const pool = new BlockPool(4);
    const a = pool.allocate([], 2)!;
    a.forEach((id, i) => pool.commit(id, h(i)));
    pool.release(a);
    expect(pool.cachedBlocks).toBe(2);
    expect(pool.lookup(h(0))).toBe(a[0]);

    // Two never-used blocks are in front of them; the third fresh block evicts one cached block.
    const b = pool.allocate([], 3)!;
    expect(b).toHaveLength(3);
    expect(pool.cachedBlocks).toBe(1);
    expect(pool.evictions).toBe(1);
  });

  it("releases a sequence tail-first, so its last block is evicted before its first", () => {
    const pool = new BlockPool(3);
    const seq = pool.allocate([], 3)!;
    seq.forEach((id, i) => pool.commit(id, h(i)));
    pool.release(seq);
    expect(pool.evictionOrder()).toEqual([...seq].reverse());
    pool.allocate([], 1);
    expect(pool.lookup(h(2))).toBeUndefined();
    expect(pool.lookup(h(0))).toBe(seq[0]);
    expect(pool.lookup(h(1))).toBe(seq[1]);
  });

  it("never evicts a block a running sequence references", () => {
    const pool = new BlockPool(3);
    const running = pool.allocate([], 2)!;
    running.forEach((id, i) => pool.commit(id, h(i)));
    expect(pool.allocate([], 2)).toBeNull();
    expect(pool.allocate([], 1)).toHaveLength(1);
    expect(pool.grow()).toBeNull();
    expect(pool.lookup(h(0))).toBe(running[0]);
    expect(pool.lookup(h(1))).toBe(running[1]);
    expect(pool.evictions).toBe(0);
  });

  it("reuses a cached block by reference: a hit takes it out of the free queue without counting as fresh", () => {
    const pool = new BlockPool(2);
    const [first] = pool.allocate([], 1)!;
    pool.commit(first!, h(0));
    pool.release([first!]);
    // One hit (free, cached) + one fresh = both blocks; the hit must not be evicted to make the fresh one.
    const ids = pool.allocate([first!], 1)!;
    expect(ids[0]).toBe(first);
    expect(pool.refCount(first!)).toBe(1);
    expect(pool.lookup(h(0))).toBe(first);
    expect(pool.allocate([], 1)).toBeNull();
  });

  it("shares a block between two sequences and frees it only when both are done", () => {
    const pool = new BlockPool(2);
    const [shared] = pool.allocate([], 1)!;
    pool.commit(shared!, h(0));
    pool.allocate([shared!], 0);
    expect(pool.refCount(shared!)).toBe(2);
    pool.release([shared!]);
    expect(pool.freeBlocks).toBe(1);
    pool.release([shared!]);
    expect(pool.freeBlocks).toBe(2);
    expect(() => pool.release([shared!])).toThrow(/released twice/);
  });

  it("keeps the first copy when two blocks compute the same content", () => {
    const pool = new BlockPool(2);
    const [a, b] = pool.allocate([], 2)!;
    pool.commit(a!, h(0));
    pool.commit(b!, h(0));
    expect(pool.lookup(h(0))).toBe(a);
    expect(pool.hashOf(b!)).toBeUndefined();
  });

  it("chains hashes: equal content after a different prefix is a different block", () => {
    const root = rootHash(undefined);
    const x = chainHash(chainHash(root, "aaaa"), "bbbb");
    const y = chainHash(chainHash(root, "cccc"), "bbbb");
    expect(x).not.toBe(y);
    expect(chainHash(rootHash("salt"), "aaaa")).not.toBe(chainHash(root, "aaaa"));
  });

  it("reports usage as referenced blocks only (evictable cache counts as free, like vLLM)", () => {
    const pool = new BlockPool(4);
    const ids = pool.allocate([], 2)!;
    expect(pool.usage).toBe(0.5);
    ids.forEach((id, i) => pool.commit(id, h(i)));
    pool.release(ids);
    expect(pool.usage).toBe(0);
    expect(pool.cachedBlocks).toBe(2);
    pool.clearCache();
    expect(pool.cachedBlocks).toBe(0);
    expect(pool.lookup(h(0))).toBeUndefined();
  });
});
