/**
 * routing.state_file: the prefix index and the Responses API ids, saved on shutdown and
 * loaded on start, so a router restart does not lose its pins while the engines keep
 * their caches. Written to a temp file and renamed, so a crash never leaves half a file.
 */
import { rename } from "node:fs/promises";
import type { IndexRecord } from "../route/prefix.ts";
import type { Router } from "../route/router.ts";
import { LlmrouteError } from "../errors.ts";

interface StateFile {
  version: 1;
  saved_at: string;
  index: IndexRecord[];
  responses: [string, string][];
}

export async function saveState(path: string, router: Router): Promise<{ entries: number; responses: number }> {
  const state: StateFile = {
    version: 1,
    saved_at: new Date().toISOString(),
    index: router.index.save(),
    responses: router.savedResponses(),
  };
  const tmp = `${path}.tmp-${process.pid}`;
  await Bun.write(tmp, JSON.stringify(state));
  await rename(tmp, path);
  return { entries: state.index.length, responses: state.responses.length };
}

/** Load what the file holds for replicas `keep` accepts; undefined when there is no file. */
export async function loadState(
  path: string,
  router: Router,
  keep: (replica: string) => boolean,
): Promise<{ entries: number; responses: number } | undefined> {
  const file = Bun.file(path);
  if (!(await file.exists())) return undefined;
  let state: StateFile;
  try {
    state = (await file.json()) as StateFile;
  } catch (error) {
    throw new LlmrouteError("config", `routing.state_file ${path} is not valid JSON (${(error as Error).message}); move it away to start fresh`);
  }
  if (state.version !== 1 || !Array.isArray(state.index) || !Array.isArray(state.responses)) {
    throw new LlmrouteError("config", `routing.state_file ${path} has an unknown format; move it away to start fresh`);
  }
  const entries = router.index.restore(state.index, keep);
  let responses = 0;
  for (const [id, replica] of state.responses) {
    if (!keep(replica)) continue;
    router.rememberResponse(id, replica);
    responses++;
  }
  return { entries, responses };
}
