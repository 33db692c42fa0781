/**
 * A request's identity: one chain of hashes per prompt sequence (a chat is one sequence; a
 * batch of completion prompts is one per prompt), one link per chunk of each canonical
 * segment:
 *
 *   h₀ = xxh64("llmroute/2␟tenant␟model", 0)
 *   hᵢ = xxh64(chunkᵢ, hᵢ₋₁ ⊕ SEGMENT)   for the first chunk of a segment
 *   hᵢ = xxh64(chunkᵢ, hᵢ₋₁)             for the next chunks of the same segment
 *
 * Every link names a prefix the engine may still hold as KV. Because every message starts
 * a link, a tiny shared prefix still matches (no "first N KiB" window); because long
 * segments are cut every `chunkChars`, a shared document inside one message matches too.
 * Seeding each link with the previous hash chains them without copying any text.
 */
import type { Hasher } from "./hash.ts";

export interface PrefixChain {
  /** Link i's 64-bit hash as two 32-bit halves. */
  lo: Uint32Array;
  hi: Uint32Array;
  /** Link i covers prompt characters [ends[i-1], ends[i]). */
  ends: Uint32Array;
  length: number;
}

/** Identity version: bump when the definition above changes (saved states are then dropped). */
export const IDENTITY_VERSION = 2;

const SEGMENT = 0x9e3779b97f4a7c15n;
const MASK32 = 0xffffffffn;

export const EMPTY_CHAIN: PrefixChain = { lo: new Uint32Array(0), hi: new Uint32Array(0), ends: new Uint32Array(0), length: 0 };

export interface ChainSource {
  tenant: string;
  model?: string;
  /** Each sequence: canonical segments in prompt order. */
  sequences: readonly (readonly string[])[];
}

/** One chain per sequence of the request. */
export function prefixChains(source: ChainSource, hasher: Hasher, chunkChars: number): PrefixChain[] {
  if (source.sequences.length === 0) return [];
  const root = hasher.hash(`llmroute/${IDENTITY_VERSION}\u001f${source.tenant}\u001f${source.model ?? ""}`, 0n);
  return source.sequences.map((segments) => chainOf(root, segments, hasher, chunkChars));
}

/** The chain of a single sequence (tests and tools). */
export function prefixChain(source: { tenant: string; model?: string; segments: readonly string[] }, hasher: Hasher, chunkChars: number): PrefixChain {
  return prefixChains({ ...source, sequences: [source.segments] }, hasher, chunkChars)[0]!;
}

function chainOf(root: bigint, segments: readonly string[], hasher: Hasher, chunkChars: number): PrefixChain {
  let links = 0;
  for (const s of segments) links += Math.max(1, Math.ceil(s.length / chunkChars));
  const lo = new Uint32Array(links);
  const hi = new Uint32Array(links);
  const ends = new Uint32Array(links);
  let h = root;
  let end = 0;
  let i = 0;
  for (const segment of segments) {
    let offset = 0;
    do {
      const chunk = offset === 0 && segment.length <= chunkChars ? segment : segment.slice(offset, offset + chunkChars);
      h = hasher.hash(chunk, offset === 0 ? h ^ SEGMENT : h);
      end += chunk.length;
      lo[i] = Number(h & MASK32);
      hi[i] = Number(h >> 32n);
      ends[i] = end;
      i++;
      offset += chunkChars;
    } while (offset < segment.length);
  }
  return { lo, hi, ends, length: links };
}

/** Characters of prompt the chain covers. */
export function chainChars(chain: PrefixChain): number {
  return chain.length === 0 ? 0 : chain.ends[chain.length - 1]!;
}

/** Link i's hash as a 64-bit value (for seeding a follow-up hash, saving and sharing). */
export function linkHash(chain: PrefixChain, i: number): bigint {
  return (BigInt(chain.hi[i]!) << 32n) | BigInt(chain.lo[i]!);
}

/**
 * The hash a link would have if the segment chunk starting at `start` (a position inside
 * the chain's last segment, right after link `parent`) ended after `length` characters: used
 * to test whether a prompt extends an earlier, shorter one whose tail chunk was `length` long.
 */
export function continuationLink(parentHash: bigint, text: string, start: number, length: number, hasher: Hasher): { lo: number; hi: number } {
  const h = hasher.hash(text.slice(start, start + length), parentHash);
  return { lo: Number(h & MASK32), hi: Number(h >> 32n) };
}
