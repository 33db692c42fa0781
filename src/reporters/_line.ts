/** What the log reporters share: level names, the journal's priority prefixes, field text. */

export type Level = "debug" | "info" | "warn" | "error";
export type Fields = Record<string, string | number | boolean | undefined | null>;

/** sd-daemon(3) priority prefixes: journald reads them off the start of each line. */
export const SYSLOG_PRIORITY: Record<Level, string> = { error: "<3>", warn: "<4>", info: "<6>", debug: "<7>" };

/** The syslog priority for a consola level number (fatal/error 0, warn 1, log/info 2–3, debug and beyond). */
export function priorityOf(level: number): string {
  return level <= 0 ? SYSLOG_PRIORITY.error : level === 1 ? SYSLOG_PRIORITY.warn : level <= 3 ? SYSLOG_PRIORITY.info : SYSLOG_PRIORITY.debug;
}

/** Takes a formatted line (no newline) at its level: prefixes it for the journal and writes it. */
export type LineSink = (level: Level, line: string) => void;

/** `k=v k2="with space"`, leaving out what is empty. */
export function fieldText(fields: Fields | undefined): string {
  if (!fields) return "";
  return Object.entries(fields)
    .filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => `${k}=${typeof v === "string" && /\s/.test(v) ? JSON.stringify(v) : v}`)
    .join(" ");
}
