/**
 * routing.state_file: the prefix index and the Responses API ids, saved every
 * routing.state_interval and on shutdown, loaded on start, so a router restart (or crash)
 * does not lose its pins while the engines keep their caches.
 *
 * Layout: "LRST", format version (u32), header length (u32), a JSON header (saved_at, the
 * identity version, the Responses ids, each replica's URL), then the index's binary
 * snapshot (src/route/prefix-snapshot.ts: 36 bytes an entry, binary because JSON would be
 * far slower to write; docs/operations.md#state-file).
 *
 * A replica is its name and its URL: a name now pointing at another URL is another engine
 * (as a SIGHUP reload treats it), so what the file holds for it is dropped on load. A file
 * without the URLs (written before they were saved) is kept by name.
 *
 * Saving writes a temp file, fsyncs it, renames it over the old one and fsyncs the
 * directory: a crash at any moment leaves either the old file or the new one. Loading
 * trusts nothing: the envelope and every Responses record are checked here, the index
 * records by the index itself; bad records are skipped and counted. Since the state is
 * only a hint, a file that cannot be used means a cold start, never a refusal to start.
 */
import { open, readFile, rename, rm, stat } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { IDENTITY_VERSION } from "../route/chain.ts";
import type { Router } from "../route/router.ts";

const MAGIC = [0x4c, 0x52, 0x53, 0x54]; // "LRST"
const FORMAT = 2;

interface Header {
  saved_at: string;
  identity: number;
  responses: [string, string][];
  /** Each configured replica's URL when saved, by name. */
  replicas?: Record<string, string>;
  /** routing.chunk_chars when saved: links cut at another size never match. */
  chunk_chars?: number;
}

export interface LoadCounts {
  entries: number;
  responses: number;
  /** Records that were malformed (or named nothing the index accepts). */
  skipped_entries: number;
  skipped_responses: number;
  /** What the file holds for replicas whose URL changed since it was saved: another engine's, dropped. */
  dropped_entries: number;
  dropped_responses: number;
  /** Those replicas, comma-separated (absent when none). */
  url_changed?: string;
}

export type LoadResult =
  | { status: "absent" }
  | { status: "restored"; counts: LoadCounts }
  /** The file exists but cannot be used: the caller starts cold and says why. */
  | { status: "unusable"; reason: string };

/** The file's parts in order: the fixed head, the JSON header, the index snapshot. */
export function encodeState(responses: [string, string][], index: Uint8Array, header: Partial<Header> = {}): Uint8Array[] {
  const json = new TextEncoder().encode(JSON.stringify({ saved_at: new Date().toISOString(), identity: IDENTITY_VERSION, responses, ...header }));
  const head = new Uint8Array(12);
  const view = new DataView(head.buffer);
  head.set(MAGIC, 0);
  view.setUint32(4, FORMAT, true);
  view.setUint32(8, json.length, true);
  return [head, json, index];
}

/** Save the router's state; `urls` is each configured replica's URL by name. */
export async function saveState(path: string, router: Router, urls: Record<string, string>, chunkChars?: number): Promise<{ entries: number; responses: number }> {
  const responses = router.savedResponses();
  const parts = encodeState(responses, router.index.snapshot(), { replicas: urls, ...(chunkChars === undefined ? {} : { chunk_chars: chunkChars }) });
  const tmp = `${dirname(path)}/.${basename(path)}.tmp-${process.pid}`;
  try {
    const file = await open(tmp, "w", 0o600);
    try {
      for (const part of parts) await file.write(part);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(tmp, path);
  } catch (error) {
    await rm(tmp, { force: true }).catch(() => {});
    throw error;
  }
  // The rename itself is durable only once the directory is.
  const dir = await open(dirname(path), "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return { entries: router.index.size, responses: responses.length };
}

/**
 * Load what the file holds for the configured replicas: `urlOf` gives a replica's URL now,
 * undefined for a name no longer configured (whose records are unreachable, not malformed).
 */
export async function loadState(path: string, router: Router, urlOf: (replica: string) => string | undefined, chunkChars?: number): Promise<LoadResult> {
  let bytes: Uint8Array;
  try {
    if (!(await stat(path)).isFile()) return { status: "unusable", reason: "cannot read it: not a regular file" };
    bytes = await readFile(path); // a Buffer is a Uint8Array: no copy of a file that may hold 60 MB
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { status: "absent" };
    return { status: "unusable", reason: `cannot read it: ${(error as Error).message}` };
  }
  if (bytes.length < 12 || !MAGIC.every((b, i) => bytes[i] === b)) return { status: "unusable", reason: "not an llmroute state file" };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const format = view.getUint32(4, true);
  if (format !== FORMAT) return { status: "unusable", reason: `state file format ${format}, this router reads ${FORMAT}` };
  const jsonLength = view.getUint32(8, true);
  if (12 + jsonLength > bytes.length) return { status: "unusable", reason: "truncated header" };

  let header: Partial<Header> | null;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(12, 12 + jsonLength))) as Partial<Header> | null;
  } catch (error) {
    return { status: "unusable", reason: `unreadable header (${(error as Error).message})` };
  }
  if (!header || typeof header !== "object" || !Array.isArray(header.responses)) {
    return { status: "unusable", reason: "its header lacks the Responses records" };
  }
  if (header.identity !== IDENTITY_VERSION) {
    return { status: "unusable", reason: `written with prefix identity v${String(header.identity)}, this router computes v${IDENTITY_VERSION}` };
  }
  if (chunkChars !== undefined && header.chunk_chars !== undefined && header.chunk_chars !== chunkChars) {
    return { status: "unusable", reason: `written with routing.chunk_chars = ${String(header.chunk_chars)}, this router cuts ${chunkChars}: its prefixes would match only up to the first cut` };
  }
  const saved = header.replicas;
  if (saved !== undefined && (saved === null || typeof saved !== "object" || Array.isArray(saved))) {
    return { status: "unusable", reason: "its header's replica URLs are not a name → URL map" };
  }
  // Configured now but saved under another URL (or none, in a file that has the map).
  const moved = (name: string) => saved !== undefined && urlOf(name) !== undefined && (Object.hasOwn(saved, name) ? saved[name] : undefined) !== urlOf(name);
  const configured = (name: string) => urlOf(name) !== undefined;
  const urlChanged = new Set<string>();
  const note = (name: string) => {
    if (moved(name)) urlChanged.add(name);
    return configured(name);
  };

  let restored: { restored: number; skipped: number };
  try {
    // Never in the future (a clock set back since, a file from another machine): evict would not reach them.
    restored = router.index.restore(bytes.subarray(12 + jsonLength), note, { now: Date.now() });
  } catch (error) {
    return { status: "unusable", reason: `its index could not be restored: ${(error as Error).message}` };
  }
  // Restored, then dropped, so that what is dropped is counted apart from what was malformed.
  let droppedEntries = 0;
  for (const name of urlChanged) {
    const before = router.index.size;
    router.index.forget(name);
    droppedEntries += before - router.index.size;
  }

  let responses = 0;
  let skippedResponses = 0;
  let droppedResponses = 0;
  for (const record of header.responses) {
    if (!isResponseRecord(record)) {
      skippedResponses++;
      continue;
    }
    if (!note(record[1])) continue;
    if (moved(record[1])) {
      droppedResponses++;
      continue;
    }
    router.rememberResponse(record[0], record[1]);
    responses++;
  }
  return {
    status: "restored",
    counts: {
      entries: restored.restored - droppedEntries,
      responses,
      skipped_entries: restored.skipped,
      skipped_responses: skippedResponses,
      dropped_entries: droppedEntries,
      dropped_responses: droppedResponses,
      ...(urlChanged.size ? { url_changed: [...urlChanged].join(", ") } : {}),
    },
  };
}

function isResponseRecord(record: unknown): record is [string, string] {
  return (
    Array.isArray(record) &&
    record.length === 2 &&
    typeof record[0] === "string" &&
    record[0].length > 0 &&
    record[0].length <= 256 &&
    typeof record[1] === "string" &&
    record[1].length > 0
  );
}
