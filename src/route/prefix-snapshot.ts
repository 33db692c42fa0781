/**
 * The prefix index's snapshot format (routing.state_file, a cluster's catch-up): every entry
 * in a compact binary form, each replica's oldest first, so a restore rebuilds the same LRU
 * order. Layout (little-endian): "LRIX", version, entry count, replica count, the replica
 * names (u16 length + UTF-8), then one 36-byte record per entry: hash lo, hash hi, replica id
 * (u16), flags (u8), pad, delta chars, tail chars, last use (f64 ms), parent position (i32,
 * −1 = none), commit tag (u32; version 2 on — version 1's records are 32 bytes without it,
 * and still restore). What the entries mean, and how they are loaded into a live index, is
 * ./prefix.ts's.
 */

const MAGIC = [0x4c, 0x52, 0x49, 0x58]; // "LRIX"
/** 2: each record carries its commit tag (36 bytes). */
const SNAPSHOT_VERSION = 2;
const RECORD_BYTES = 36;
const HEADER_BYTES = 16;
const NO_PARENT = -1;

/** Writes a snapshot: the replica names, then `count` records in the order they are added. */
export class SnapshotWriter {
  private readonly out: Uint8Array;
  private readonly view: DataView;
  private at: number;

  constructor(names: readonly string[], count: number) {
    const encoder = new TextEncoder();
    const encoded = names.map((n) => encoder.encode(n));
    const headerBytes = HEADER_BYTES + encoded.reduce((s, n) => s + 2 + n.length, 0);
    this.out = new Uint8Array(headerBytes + count * RECORD_BYTES);
    this.view = new DataView(this.out.buffer);
    this.out.set(MAGIC, 0);
    this.view.setUint32(4, SNAPSHOT_VERSION, true);
    this.view.setUint32(8, count, true);
    this.view.setUint32(12, encoded.length, true);
    this.at = HEADER_BYTES;
    for (const n of encoded) {
      this.view.setUint16(this.at, n.length, true);
      this.out.set(n, this.at + 2);
      this.at += 2 + n.length;
    }
  }

  /** One entry; `parent`: the position of its parent's record (−1: none). */
  add(lo: number, hi: number, replica: number, flags: number, delta: number, tail: number, last: number, parent: number, commit: number): void {
    const { view, at } = this;
    view.setUint32(at, lo, true);
    view.setUint32(at + 4, hi, true);
    view.setUint16(at + 8, replica, true);
    view.setUint8(at + 10, flags);
    view.setUint32(at + 12, delta, true);
    view.setUint32(at + 16, tail, true);
    view.setFloat64(at + 20, last, true);
    view.setInt32(at + 28, parent, true);
    view.setUint32(at + 32, commit, true);
    this.at += RECORD_BYTES;
  }

  bytes(): Uint8Array {
    return this.out;
  }
}

/**
 * Reads a snapshot's header on construction (throws a RangeError for what is not a snapshot,
 * or a version it does not know) and its records by position, without copying them.
 */
export class SnapshotReader {
  readonly names: string[] = [];
  /** Records present (a truncated snapshot holds fewer than its header counts). */
  readonly records: number;
  /** Records the header counts that are not there. */
  readonly missing: number;
  private readonly version: number;
  private readonly view: DataView;
  private readonly base: number;
  private readonly recordBytes: number;

  constructor(bytes: Uint8Array) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const bad = () => {
      throw new RangeError("not an llmroute index snapshot (or a truncated one)");
    };
    if (bytes.byteLength < HEADER_BYTES || !MAGIC.every((b, i) => bytes[i] === b)) bad();
    const version = view.getUint32(4, true);
    if (version !== SNAPSHOT_VERSION && version !== 1) throw new RangeError(`index snapshot version ${version} is not ${SNAPSHOT_VERSION} (nor 1)`);
    this.version = version;
    this.recordBytes = version === 1 ? 32 : RECORD_BYTES;
    const total = view.getUint32(8, true);
    const replicaCount = view.getUint32(12, true);
    const decoder = new TextDecoder("utf-8", { fatal: true });
    let at = HEADER_BYTES;
    for (let i = 0; i < replicaCount; i++) {
      if (at + 2 > bytes.byteLength) bad();
      const len = view.getUint16(at, true);
      if (at + 2 + len > bytes.byteLength) bad();
      this.names.push(decoder.decode(bytes.subarray(at + 2, at + 2 + len)));
      at += 2 + len;
    }
    const available = Math.floor((bytes.byteLength - at) / this.recordBytes);
    this.records = Math.min(total, available);
    this.missing = total - this.records;
    this.view = view;
    this.base = at;
  }

  lo(i: number): number {
    return this.view.getUint32(this.offset(i), true);
  }
  hi(i: number): number {
    return this.view.getUint32(this.offset(i) + 4, true);
  }
  /** The record's replica: an index into `names` (checked by `wellFormed`). */
  replica(i: number): number {
    return this.view.getUint16(this.offset(i) + 8, true);
  }
  flags(i: number): number {
    return this.view.getUint8(this.offset(i) + 10);
  }
  delta(i: number): number {
    return this.view.getUint32(this.offset(i) + 12, true);
  }
  tail(i: number): number {
    return this.view.getUint32(this.offset(i) + 16, true);
  }
  /** Last use, by the clock that wrote the snapshot (ms). */
  last(i: number): number {
    return this.view.getFloat64(this.offset(i) + 20, true);
  }
  /** The position of the parent's record (−1: none). */
  parent(i: number): number {
    return this.view.getInt32(this.offset(i) + 28, true);
  }
  /** The commit tag (0 in a version 1 snapshot, which has none). */
  commit(i: number): number {
    return this.version === 1 ? 0 : this.view.getUint32(this.offset(i) + 32, true);
  }

  /**
   * Which records to load (1) for the replicas `keep` accepts: a record that is malformed
   * (flags beyond `maxFlags`, a last use that is not a time), or whose parent is missing,
   * newer-ordered or dropped, is not (0) — with its descendants, so what is loaded stays
   * prefix-closed. `dropped` counts them.
   */
  wellFormed(keep: (replica: string) => boolean, maxFlags: number): { load: Uint8Array; dropped: number } {
    // Newest first, so a parent's fate is known before its children's.
    const load = new Uint8Array(this.records);
    const kept = this.names.map((n) => keep(n));
    let dropped = 0;
    for (let i = this.records - 1; i >= 0; i--) {
      const r = this.replica(i);
      const last = this.last(i);
      const parent = this.parent(i);
      let ok = r < this.names.length && kept[r]! && this.flags(i) <= maxFlags && Number.isFinite(last) && last >= 0;
      if (ok && parent !== NO_PARENT) {
        // A parent is newer than its child: later in the snapshot, on the same replica, kept.
        ok = parent > i && parent < this.records && load[parent] === 1 && this.replica(parent) === r;
      }
      if (ok) load[i] = 1;
      else dropped++;
    }
    return { load, dropped };
  }

  private offset(i: number): number {
    return this.base + i * this.recordBytes;
  }
}
