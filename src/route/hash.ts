/**
 * xxhash64 with a 64-bit seed, over a string's UTF-8 bytes: a fixed, published algorithm,
 * so identities stay equal across router instances and, within one identity version,
 * across releases. Bun's built-in xxHash64 hashes the text where it lies, with the same
 * hashes as hash-wasm, the earlier choice, which copies it into WASM memory per call
 * (docs/dependencies.md#why-not-hash-wasm-the-measurement).
 *
 * This is the routing core's one touch of a runtime global; everything else receives the
 * Hasher as an argument.
 */

export interface Hasher {
  /** xxhash64(utf8(text), seed). */
  hash(text: string, seed: bigint): bigint;
}

export function createHasher(): Hasher {
  return { hash: (text, seed) => Bun.hash.xxHash64(text, seed) as bigint };
}

/** 16 lowercase hex digits. */
export function hex64(value: bigint): string {
  return value.toString(16).padStart(16, "0");
}
