/**
 * routing.state_file: the prefix index and the Responses API ids, saved every
 * routing.state_interval and on shutdown, loaded on start, so a router restart (or crash)
 * does not lose its pins while the engines keep their caches.
 *
 * Saving writes a temp file, fsyncs it, renames it over the old one and fsyncs the
 * directory: a crash at any moment leaves either the old file or the new one. Loading
 * trusts nothing: the envelope and every Responses record are checked here, the index
 * records by the index itself; bad records are skipped and counted. Since the state is
 * only a hint, a file that cannot be used means a cold start, never a refusal to start.
 */
import { open, readFile, rename, rm, stat } from "node:fs/promises";
import { basename, dirname } from "node:path";
import type { Router } from "../route/router.ts";

interface StateFile {
  version: 1;
  saved_at: string;
  index: unknown[];
  responses: [string, string][];
}

export interface LoadCounts {
  entries: number;
  responses: number;
  /** Records that were malformed (or named nothing the index accepts). */
  skipped_entries: number;
  skipped_responses: number;
}

export type LoadResult =
  | { status: "absent" }
  | { status: "restored"; counts: LoadCounts }
  /** The file exists but cannot be used: the caller starts cold and says why. */
  | { status: "unusable"; reason: string };

export async function saveState(path: string, router: Router): Promise<{ entries: number; responses: number }> {
  const state: StateFile = {
    version: 1,
    saved_at: new Date().toISOString(),
    index: router.index.save(),
    responses: router.savedResponses(),
  };
  const tmp = `${dirname(path)}/.${basename(path)}.tmp-${process.pid}`;
  try {
    const file = await open(tmp, "w", 0o600);
    try {
      await file.writeFile(JSON.stringify(state));
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
  return { entries: state.index.length, responses: state.responses.length };
}

/** Load what the file holds for the replicas `keep` accepts. */
export async function loadState(path: string, router: Router, keep: (replica: string) => boolean): Promise<LoadResult> {
  let text: string;
  try {
    if (!(await stat(path)).isFile()) return { status: "unusable", reason: "cannot read it: not a regular file" };
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return { status: "absent" };
    return { status: "unusable", reason: `cannot read it: ${(error as Error).message}` };
  }
  let state: unknown;
  try {
    state = JSON.parse(text);
  } catch (error) {
    return { status: "unusable", reason: `not valid JSON (${(error as Error).message})` };
  }
  const s = state as Partial<StateFile> | null;
  if (!s || typeof s !== "object" || s.version !== 1 || !Array.isArray(s.index) || !Array.isArray(s.responses)) {
    return { status: "unusable", reason: "not a version 1 llmroute state file (needs version, index and responses)" };
  }

  // Index records are the index's own format: it checks them; we only hand it arrays.
  const records = s.index.filter(Array.isArray);
  let restored: { restored: number; skipped: number };
  try {
    restored = restoreCounts(router.index.restore(records as Parameters<Router["index"]["restore"]>[0], keep), records.length);
  } catch (error) {
    return { status: "unusable", reason: `its index records could not be restored: ${(error as Error).message}` };
  }

  let responses = 0;
  let skippedResponses = 0;
  for (const record of s.responses) {
    if (!isResponseRecord(record)) {
      skippedResponses++;
      continue;
    }
    // A replica no longer configured: its responses are unreachable, not malformed.
    if (!keep(record[1])) continue;
    router.rememberResponse(record[0], record[1]);
    responses++;
  }
  return {
    status: "restored",
    counts: {
      entries: restored.restored,
      responses,
      skipped_entries: restored.skipped + (s.index.length - records.length),
      skipped_responses: skippedResponses,
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

/** `restore` reports a count, or `{ restored, skipped }` where it validates its records. */
function restoreCounts(result: number | { restored: number; skipped: number }, given: number): { restored: number; skipped: number } {
  if (typeof result === "number") return { restored: result, skipped: 0 };
  return { restored: result.restored, skipped: Math.min(result.skipped, given) };
}
