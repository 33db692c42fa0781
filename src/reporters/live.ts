/**
 * A terminal: consola's fancy reporter (an icon and colour per type, errors as a badge),
 * plus status lines drawn in place. A log object with `transient: true` (bench's "agent ·
 * hybrid · 12/48 requests", probe's ticking clock) rewrites the current line; the next
 * lasting line clears it first, so the status never mixes with what stays.
 */
import { createConsola, type ConsolaReporter } from "consola";
import { messageOf } from "./plain.ts";

const CLEAR_LINE = "\r\x1b[K";

export function liveReporter(output: { write(text: string): void; columns?: number }): ConsolaReporter & { live: true } {
  // consola exports its fancy reporter only through an instance built with `fancy: true`.
  const fancy = createConsola({ fancy: true }).options.reporters[0]!;
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
      fancy.log(logObj, { options: { ...ctx.options, stdout: stream, stderr: stream } });
    },
  };
}
