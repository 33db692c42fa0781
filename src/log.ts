/**
 * The router's log: one line per event, human on a TTY, JSON lines for journald/Loki.
 * Fields are explicit key/values chosen by the caller; prompts and secrets never reach it.
 * The sink is injectable so tests read lines from an array.
 *
 * Under systemd, when stderr is the journal, each line starts with its syslog priority
 * (`<4>` for a warning): journald strips the prefix and files the line at that priority,
 * so `journalctl -p warning -u llmroute` shows a replica going down and nothing else.
 */
import { fstatSync } from "node:fs";
import type { LogFormat } from "./config.ts";

export type Level = "debug" | "info" | "warn" | "error";
export type Fields = Record<string, string | number | boolean | undefined | null>;

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

export interface LogOptions {
  format: LogFormat;
  /** Where lines go; default stderr. */
  write?: (line: string) => void;
  isTTY?: boolean;
  debug?: boolean;
  now?: () => Date;
  /** Prefix lines with syslog priorities; default: detected with `stderrIsJournal()`. */
  journal?: boolean;
}

/** sd-daemon(3) priority prefixes: journald reads them off the start of each line. */
export const SYSLOG_PRIORITY: Record<Level, string> = { error: "<3>", warn: "<4>", info: "<6>", debug: "<7>" };

/**
 * Is stderr connected to the journal? systemd sets JOURNAL_STREAM to "device:inode" of the
 * stream it gives the service (systemd.exec(5)); it is only ours if stderr is still that
 * stream — a child whose stderr was redirected inherits the variable but not the stream.
 */
export function stderrIsJournal(
  env: Record<string, string | undefined> = process.env,
  stat: () => { dev: number | bigint; ino: number | bigint } = () => fstatSync(2),
): boolean {
  const stream = env.JOURNAL_STREAM;
  if (!stream || !/^\d+:\d+$/.test(stream)) return false;
  try {
    const { dev, ino } = stat();
    return stream === `${dev}:${ino}`;
  } catch {
    return false;
  }
}

const COLOURS: Record<Level, string> = { debug: "\x1b[90m", info: "\x1b[36m", warn: "\x1b[33m", error: "\x1b[31m" };

export function createLog(options: LogOptions): Log {
  const sink: (line: string, urgent: boolean) => void = options.write ?? batchedStderr();
  const tty = options.isTTY ?? Boolean(process.stderr.isTTY);
  const json = options.format === "json" || (options.format === "auto" && !tty);
  const colour = tty && !process.env.NO_COLOR;
  const now = options.now ?? (() => new Date());
  const journal = options.journal ?? (options.write === undefined && stderrIsJournal());
  const urgent = (level: Level) => level === "warn" || level === "error";
  const write = journal
    ? (level: Level, line: string) => sink(`${SYSLOG_PRIORITY[level]}${line}`, urgent(level))
    : (level: Level, line: string) => sink(line, urgent(level));

  const emit = (level: Level, msg: string, fields: Fields = {}) => {
    if (level === "debug" && !options.debug) return;
    if (json) {
      const record: Record<string, unknown> = { time: now().toISOString(), level, msg };
      for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null) record[k] = v;
      write(level, JSON.stringify(record));
      return;
    }
    const parts = Object.entries(fields)
      .filter(([, v]) => v !== undefined && v !== null && v !== "")
      .map(([k, v]) => `${k}=${typeof v === "string" && /\s/.test(v) ? JSON.stringify(v) : v}`);
    const time = now().toISOString().slice(11, 23);
    const tag = colour ? `${COLOURS[level]}${level.padEnd(5)}\x1b[0m` : level.padEnd(5);
    write(level, `${time} ${tag} ${msg}${parts.length ? ` ${parts.join(" ")}` : ""}`);
  };

  return {
    debug: (msg, fields) => emit("debug", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    error: (msg, fields) => emit("error", msg, fields),
  };
}

/**
 * stderr, written once per turn of the event loop: under load the lines of many requests
 * go out in one write instead of a system call each (the request line was ~4 % of the
 * proxy's CPU). Lines still pending when the process exits are written then.
 */
function batchedStderr(): (line: string, urgent: boolean) => void {
  let pending: string[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const out = pending.join("");
    pending = [];
    process.stderr.write(out);
  };
  process.once("exit", flush);
  return (line, urgent) => {
    pending.push(`${line}\n`);
    // Warnings and errors go out at once (after what was pending, so the order holds).
    if (urgent) flush();
    else if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
}

/** A log that keeps records in memory (tests, and the bench which prints its own tables). */
export function memoryLog(): Log & { records: { level: Level; msg: string; fields: Fields }[] } {
  const records: { level: Level; msg: string; fields: Fields }[] = [];
  const push = (level: Level) => (msg: string, fields: Fields = {}) => records.push({ level, msg, fields });
  return { records, debug: push("debug"), info: push("info"), warn: push("warn"), error: push("error") };
}

/**
 * A client-chosen name (a model, an id) for a log line: at most 80 characters, and how long
 * it was. A client can send megabytes in one; a log line should not carry them.
 */
export function clip(name: string | undefined): string | undefined {
  if (name === undefined || name.length <= 80) return name;
  return `${name.slice(0, 80)}… (${name.length} characters)`;
}
