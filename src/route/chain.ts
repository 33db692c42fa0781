/**
 * A request's identity: one chain of hashes per prompt sequence (a chat is one sequence; a
 * batch of completion prompts is one per prompt), one link per chunk of each canonical
 * segment's text; a segment's head (role, tool-call fields) seeds its first chunk:
 *
 *   h₀ = xxh64("llmroute/2␟tenant␟model", 0)
 *   sₖ = xxh64(headₖ, hᵢ₋₁ ⊕ SEGMENT)     entering segment k
 *   hᵢ = xxh64(chunkᵢ, sₖ)                 its first chunk (it covers the head's characters too)
 *   hᵢ = xxh64(chunkᵢ, hᵢ₋₁)               its next chunks
 *
 * Every link names a prefix the engine may still hold as KV. Because every message starts
 * a link, a tiny shared prefix still matches (no "first N KiB" window); because long
 * segments are cut every `chunkChars`, a shared document inside one message matches too.
 * Seeding each link with the previous hash chains them without copying any text.
 *
 * A leading `tools` segment is hashed the same way but names no prefix of its own: no link
 * ends after it. Chat templates do not render tools first — Qwen2.5/3 write them inside the
 * system message after its text, Llama 3.1 into the first user message, Mistral 3 just
 * before the last user message — so two prompts that share only their tools share no tokens
 * beyond a template's opening markup, and a match on them would be false. The tools still
 * change every token the template writes after them, so they seed every link (a namespace),
 * and their characters still count in `ends` (positions in the prompt the shape lists).
 * Chains of requests without tools are what they always were.
 */
import type { Hasher } from "./hash.ts";
import type { Segment } from "./shape.ts";

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

export interface ChainSource {
  tenant: string;
  model?: string;
  /** Each sequence: canonical segments in prompt order. */
  sequences: readonly (readonly Segment[])[];
}

/** One chain per sequence of the request. */
export function prefixChains(source: ChainSource, hasher: Hasher, chunkChars: number): PrefixChain[] {
  if (source.sequences.length === 0) return [];
  const root = hasher.hash(`llmroute/${IDENTITY_VERSION}\u001f${source.tenant}\u001f${source.model ?? ""}`, 0n);
  return source.sequences.map((segments) => chainOf(root, segments, hasher, chunkChars));
}

/** The chain of a single sequence (tests and tools). */
export function prefixChain(source: { tenant: string; model?: string; segments: readonly Segment[] }, hasher: Hasher, chunkChars: number): PrefixChain {
  return prefixChains({ ...source, sequences: [source.segments] }, hasher, chunkChars)[0]!;
}

/** The head of a request's tool definitions (shape.ts puts them first). */
const TOOLS = "tools\u001e";

function chainOf(root: bigint, segments: readonly Segment[], hasher: Hasher, chunkChars: number): PrefixChain {
  // Leading tools: part of every link's seed, never a link (see above).
  const namespaced = segments[0]?.[0] === TOOLS ? 1 : 0;
  let links = 0;
  for (const [, text] of segments.slice(namespaced)) links += Math.max(1, Math.ceil(text.length / chunkChars));
  const lo = new Uint32Array(links);
  const hi = new Uint32Array(links);
  const ends = new Uint32Array(links);
  let h = root;
  let end = 0;
  let i = 0;
  for (const [s, [head, text]] of segments.entries()) {
    h = hasher.hash(head, h ^ SEGMENT);
    end += head.length;
    let offset = 0;
    do {
      const chunk = offset === 0 && text.length <= chunkChars ? text : text.slice(offset, offset + chunkChars);
      h = hasher.hash(chunk, h);
      end += chunk.length;
      if (s >= namespaced) {
        lo[i] = Number(h & MASK32);
        hi[i] = Number(h >> 32n);
        ends[i] = end;
        i++;
      }
      offset += chunkChars;
    } while (offset < text.length);
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
 * The hash a link would have if the chunk of `text` starting at `start` (a position inside
 * a segment's text, right after link `parent`) ended after `length` characters: used to
 * test whether a prompt extends an earlier, shorter one whose tail chunk was `length` long.
 */
export function continuationLink(parentHash: bigint, text: string, start: number, length: number, hasher: Hasher): { lo: number; hi: number } {
  const h = hasher.hash(text.slice(start, start + length), parentHash);
  return { lo: Number(h & MASK32), hi: Number(h >> 32n) };
}
