/**
 * The router's text lines where no terminal shows them (`log_format = "human"` into a file
 * or the journal): `12:00:01.123 warn  replica down replica=gpu0`, the time to the
 * millisecond, the level padded, then key=value with spaces quoted.
 */
import type { ConsolaReporter } from "consola/core";
import { fieldText, type Fields, type Level, type LineSink } from "./_line.ts";

export function textReporter(sink: LineSink): ConsolaReporter {
  return {
    log(logObj) {
      const level = logObj.type as Level;
      const parts = fieldText(logObj.fields as Fields | undefined);
      sink(level, `${logObj.date.toISOString().slice(11, 23)} ${level.padEnd(5)} ${logObj.args[0]}${parts ? ` ${parts}` : ""}`);
    },
  };
}
