/**
 * Plain lines: the message as written and nothing added (no icon, no "[info]" tag, no
 * colour), so a log file or a pipe reads exactly as the docs show it. Under systemd
 * each line starts with its syslog priority, so `journalctl -p warning` filters by level;
 * a message of several lines gets the prefix on every line, since journald files each
 * line on its own. A transient line (a status rewritten in place on a terminal) is
 * dropped: in a log it would be noise.
 */
import type { ConsolaReporter, LogObject } from "consola/core";
import { priorityOf } from "./_line.ts";

export function plainReporter(write: (text: string) => void, options: { journal?: boolean } = {}): ConsolaReporter {
  return {
    log(logObj) {
      if (logObj.transient) return;
      const text = messageOf(logObj);
      if (!options.journal) return write(`${text}\n`);
      const prefix = priorityOf(logObj.level);
      write(`${text.split("\n").map((line) => `${prefix}${line}`).join("\n")}\n`);
    },
  };
}

/** A log object's arguments as one string: text as it is, an error with its stack (Bun.inspect: node:util would load at start, docs/dependencies.md#the-design-cards-packages). */
export function messageOf(logObj: Pick<LogObject, "args">): string {
  return logObj.args
    .map((a: unknown) => (typeof a === "string" ? a : a instanceof Error ? (a.stack ?? a.message) : Bun.inspect(a)))
    .join(" ");
}
