/**
 * Temporary directories for tests, removed after the whole run (bunfig.toml preloads
 * ./preload.ts, whose afterAll is global), so a run leaves nothing behind in /tmp.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const made: string[] = [];

/** Remove every directory tempDir made (the preload's afterAll calls it). */
export function removeTempDirs(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** A new empty directory named `<tmp>/<prefix>XXXXXX`. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}
