/**
 * The router's log: one line per event, JSON lines for journald/Loki, consola's fancy
 * reporter on a terminal, plain text lines otherwise. Fields are explicit key/values chosen
 * by the caller; prompts and secrets never reach it. The sink is injectable so tests read
 * lines from an array.
 *
 * Every line goes through a consola instance (its level, its reporters: src/reporters/):
 * perf/log.ts measures what that costs per request line next to formatting and writing it
 * directly (docs/dependencies.md has the figure).
 *
 * Under systemd, when stderr is the journal, each line starts with its syslog priority
 * (`<4>` for a warning): journald strips the prefix and files the line at that priority,
 * so `journalctl -p warning -u llmroute` shows a replica going down and nothing else.
 */
import { fstatSync } from "node:fs";
import { createConsola, LogLevels, type ConsolaReporter } from "consola/core";
import type { LogFormat } from "./config.ts";
import { jsonReporter } from "./reporters/json.ts";
import { liveReporter, type Terminal } from "./reporters/live.ts";
import { fieldText, SYSLOG_PRIORITY, type Fields, type Level, type LineSink } from "./reporters/_line.ts";
import { textReporter } from "./reporters/text.ts";

export type { Fields, Level } from "./reporters/_line.ts";

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

export interface LogOptions {
  format: LogFormat;
  /** Where lines go (without their newline); default stderr, batched. */
  write?: (line: string) => void;
  isTTY?: boolean;
  /** consola's level number (LogLevels): default info; debug lines need 4. */
  level?: number;
  now?: () => Date;
  /** Prefix lines with syslog priorities; default: detected with `stderrIsJournal()`. */
  journal?: boolean;
  /**
   * consola's fancy reporter (`loadTerminal()`), for human lines on a terminal; without it
   * a terminal gets the plain text lines. `serve` loads it when stderr is a terminal.
   */
  terminal?: Terminal;
}

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

export function createLog(options: LogOptions): Log {
  const raw: (line: string, urgent: boolean) => void = options.write ?? batchedStderr();
  const tty = options.isTTY ?? Boolean(process.stderr.isTTY);
  const json = options.format === "json" || (options.format === "auto" && !tty);
  const now = options.now ?? (() => new Date());
  const journal = options.journal ?? (options.write === undefined && stderrIsJournal());
  const urgent = (level: Level) => level === "warn" || level === "error";
  const sink: LineSink = journal
    ? (level, line) => raw(`${SYSLOG_PRIORITY[level]}${line}`, urgent(level))
    : (level, line) => raw(line, urgent(level));
  const reporter = json ? jsonReporter(sink) : tty && !journal && options.terminal ? terminalReporter(raw, options.terminal) : textReporter(sink);
  const consola = createConsola({
    level: options.level ?? LogLevels.info,
    // consola folds a line repeated within a second into "(repeated N times)": a request
    // log must keep every line.
    throttle: 0,
    reporters: [reporter],
    formatOptions: { date: false, columns: 0, compact: true },
  });
  // `args` rather than `message`: consola takes an object as a log object only when one of
  // the two is truthy, and an empty message must not become "{ … }".
  const emit = (type: Level) => (msg: string, fields?: Fields) => consola[type]({ args: [msg], fields, date: now() });
  return { debug: emit("debug"), info: emit("info"), warn: emit("warn"), error: emit("error") };
}

/** A terminal: the time, the message and its fields, through consola's fancy reporter (no badge: one line per event). */
function terminalReporter(raw: (line: string, urgent: boolean) => void, terminal: Terminal): ConsolaReporter {
  let urgent = false;
  const live = liveReporter({ write: (text) => raw(text.replace(/\n$/, ""), urgent), columns: process.stderr.columns }, terminal);
  return {
    log(logObj, ctx) {
      const parts = fieldText(logObj.fields as Fields | undefined);
      const time = terminal.gray(logObj.date.toISOString().slice(11, 23));
      urgent = logObj.level <= 1;
      live.log({ ...logObj, badge: false, args: [`${time} ${logObj.args[0]}${parts ? ` ${parts}` : ""}`] }, ctx);
    },
  };
}

/**
 * stderr, written once per turn of the event loop: under load the lines of many requests
 * go out in one write instead of a system call each (perf/README.md#where-the-routers-time-goes).
 * Lines still pending when the process exits are written then.
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
