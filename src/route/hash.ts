/**
 * xxhash64 (hash-wasm), a fixed published algorithm, so identities stay equal across
 * router versions and instances. Creating the WASM instance is async; hashing is sync.
 */
import { createXXHash64 } from "hash-wasm";

export interface Hasher {
  /** xxhash64(prev ‖ marker ‖ text) as 16 hex digits: one link of a chain. */
  link(prev: string, marker: string, text: string): string;
  /** xxhash64(text) as 16 hex digits. */
  hash(text: string): string;
}

export async function createHasher(): Promise<Hasher> {
  const h = await createXXHash64();
  return {
    link(prev, marker, text) {
      // One update of the joined string: half the cost of three (bench/decision.ts).
      return h.init().update(prev + marker + text).digest("hex");
    },
    hash(text) {
      return h.init().update(text).digest("hex");
    },
  };
}
