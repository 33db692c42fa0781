/**
 * The router's JSON lines, for journald, Loki and anything that parses: one object per
 * event with `time`, `level`, `msg` and the caller's fields (undefined and null left out),
 * in that order, byte for byte as before consola carried them.
 */
import type { ConsolaReporter } from "consola/core";
import type { Fields, Level, LineSink } from "./_line.ts";

export function jsonReporter(sink: LineSink): ConsolaReporter {
  return {
    log(logObj) {
      const level = logObj.type as Level;
      const record: Record<string, unknown> = { time: logObj.date.toISOString(), level, msg: logObj.args[0] };
      const fields = logObj.fields as Fields | undefined;
      if (fields) for (const k in fields) if (fields[k] !== undefined && fields[k] !== null) record[k] = fields[k];
      sink(level, JSON.stringify(record));
    },
  };
}
