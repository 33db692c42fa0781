/**
 * The shared snapshot: the index's own binary snapshot behind a small JSON header saying
 * which stream id it includes everything up to, when and by whom it was taken, and the
 * Responses API ids. A catching-up instance restores it, then reads the stream from `id`.
 */
const MAGIC = [0x4c, 0x52, 0x43, 0x53]; // "LRCS"
const FORMAT = 1;

export interface SnapshotHeader {
  /** The stream id the snapshot includes everything up to. */
  id: string;
  at: number;
  by: string;
  /** Responses API id → replica, oldest first. */
  responses: [string, string][];
}

export function encodeSnapshot(header: SnapshotHeader, index: Uint8Array): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(12 + json.length + index.length);
  const view = new DataView(out.buffer);
  out.set(MAGIC, 0);
  view.setUint32(4, FORMAT, true);
  view.setUint32(8, json.length, true);
  out.set(json, 12);
  out.set(index, 12 + json.length);
  return out;
}

/** Throws a RangeError for anything that is not a whole snapshot of this format. */
export function decodeSnapshot(bytes: Uint8Array): { header: SnapshotHeader; index: Uint8Array } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 12 || !MAGIC.every((b, i) => bytes[i] === b)) throw new RangeError("not an llmroute cluster snapshot");
  if (view.getUint32(4, true) !== FORMAT) throw new RangeError(`cluster snapshot format ${view.getUint32(4, true)} is not ${FORMAT}`);
  const length = view.getUint32(8, true);
  if (12 + length > bytes.length) throw new RangeError("cluster snapshot truncated");
  let header: SnapshotHeader;
  try {
    header = JSON.parse(new TextDecoder().decode(bytes.subarray(12, 12 + length))) as SnapshotHeader;
  } catch (error) {
    throw new RangeError(`cluster snapshot header unreadable: ${(error as Error).message}`);
  }
  if (typeof header.id !== "string" || !/^\d+-\d+$/.test(header.id) || typeof header.at !== "number" || typeof header.by !== "string") {
    throw new RangeError("cluster snapshot header lacks id, at or by");
  }
  const responses = Array.isArray(header.responses)
    ? header.responses.filter((r): r is [string, string] => Array.isArray(r) && typeof r[0] === "string" && typeof r[1] === "string")
    : [];
  return { header: { ...header, responses }, index: bytes.subarray(12 + length) };
}
