/**
 * A terminal: consola's fancy reporter (an icon and colour per type, errors as a badge),
 * plus status lines drawn in place. A log object with `transient: true` (bench's "agent ·
 * hybrid · 12/48 requests", probe's ticking clock) rewrites the current line; the next
 * lasting line clears it first, so the status never mixes with what stays.
 *
 * The fancy reporter and consola's colours live in the package's full entry, which loads
 * node:tty, node:util and Intl data at every start (docs/dependencies.md#the-design-cards-packages).
 * Only a terminal needs them, so they are imported then:
 * `loadTerminal()`, awaited by the process edge and by `serve` before they build a reporter.
 */
import type { ConsolaReporter } from "consola/core";
import { messageOf } from "./plain.ts";

const CLEAR_LINE = "\r\x1b[K";

/** consola's fancy reporter and its grey, loaded for a terminal. */
export interface Terminal {
  fancy: ConsolaReporter;
  gray(text: string): string;
}

export async function loadTerminal(): Promise<Terminal> {
  const [{ createConsola }, { colors }] = await Promise.all([import("consola"), import("consola/utils")]);
  // consola exports its fancy reporter only through an instance built with `fancy: true`.
  return { fancy: createConsola({ fancy: true }).options.reporters[0]!, gray: colors.gray };
}

export function liveReporter(output: { write(text: string): void; columns?: number }, terminal: Terminal): ConsolaReporter & { live: true } {
  // The fancy reporter writes to the instance's streams; hand it ours, so every line goes
  // where this reporter was told (stderr, or a test's array).
  const stream = { write: (text: string) => void output.write(text), columns: output.columns } as unknown as NodeJS.WriteStream;
  let shown = false;
  return {
    live: true,
    log(logObj, ctx) {
      if (logObj.transient) {
        // A pseudo-terminal may report 0 columns: then assume 100.
        const width = (output.columns || 100) - 1;
        const text = messageOf(logObj).replace(/\n/g, " ");
        output.write(`${CLEAR_LINE}${text.length > width ? `${text.slice(0, width - 1)}…` : text}`);
        shown = true;
        return;
      }
      if (shown) output.write(CLEAR_LINE);
      shown = false;
      terminal.fancy.log(logObj, { options: { ...ctx.options, stdout: stream, stderr: stream } });
    },
  };
}
