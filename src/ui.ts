/**
 * What a person reads while a command runs: progress, readiness, notes, warnings and the
 * CLI's own errors, on stderr through one consola instance. Results stay on stdout and
 * never pass through here: `status --json`, probe's report, bench's tables, sim's
 * router.toml fragment, check's resolved config and a unit file are an interface, written
 * byte for byte whatever the level, so a level never removes a command's answer.
 *
 * The reporter follows stderr: consola's fancy reporter on a terminal (icons, colour, a
 * status line rewritten in place); plain lines elsewhere, exactly the message and nothing
 * added, so logs and pipes read the same as ever; plain lines with the syslog priority in
 * front when stderr is the journal. Colour follows consola's own rule (`NO_COLOR`,
 * `FORCE_COLOR`).
 *
 * Commands import `ui`; only the process edge (src/cli.ts) chooses its reporter and level.
 * Tests swap in a collecting reporter (`ui.setReporters`), consola's own hook.
 */
import { createConsola, LogLevels, type ConsolaInstance, type ConsolaReporter } from "consola/core";
import { LlmrouteError, type ErrorCode } from "./errors.ts";
import { liveReporter, loadTerminal } from "./reporters/live.ts";
import { plainReporter } from "./reporters/plain.ts";

/** The level names `--log-level` takes, quietest first (CONSOLA_LEVEL also takes consola's numbers). */
export const LOG_LEVEL_NAMES = ["silent", "error", "warn", "info", "debug", "trace"] as const;
export const DEFAULT_LOG_LEVEL = LogLevels.info;

/** The flag every command takes; src/cli.ts adds it to each command's arguments. */
export const logLevelArg = {
  "log-level": {
    type: "string",
    description: `What to print on stderr: ${LOG_LEVEL_NAMES.join(" | ")} (default info; env CONSOLA_LEVEL). Results on stdout are never filtered`,
  },
} as const;

/**
 * A level from `--log-level` or CONSOLA_LEVEL: a name, or one of consola's numbers
 * (0 error … 3 info, 4 debug, 5 trace; -999 silent). consola itself would read
 * "CONSOLA_LEVEL=debug" as NaN and then print everything, so a bad value is refused here.
 */
export function parseLogLevel(value: string, source: string, code: ErrorCode = "usage"): number {
  const name = value.trim().toLowerCase();
  if ((LOG_LEVEL_NAMES as readonly string[]).includes(name)) return LogLevels[name as (typeof LOG_LEVEL_NAMES)[number]];
  if (/^[-+]?\d+$/.test(name)) return Number(name);
  throw new LlmrouteError(code, `${source} ${JSON.stringify(value)}: not a log level; use ${LOG_LEVEL_NAMES.join(", ")} or a number (consola's: 0 error … 3 info, 4 debug)`);
}

export interface UiOutput {
  /** Where lines go (stderr). */
  write(text: string): void;
  /** stderr is a terminal: the fancy reporter and live status lines. */
  isTTY: boolean;
  /** Terminal width, for status lines. */
  columns?: number;
  /** stderr is the systemd journal: prefix each line with its syslog priority. */
  journal: boolean;
}

/** Does this output get the fancy reporter (a terminal, not the journal, not TERM=dumb)? */
export function isTerminal(output: Pick<UiOutput, "isTTY" | "journal">): boolean {
  return output.isTTY && !output.journal && process.env.TERM !== "dumb";
}

/** The reporter for an output: fancy on a terminal, plain (journal-prefixed under systemd) elsewhere. */
export async function reporterFor(output: UiOutput): Promise<ConsolaReporter> {
  if (isTerminal(output)) return liveReporter(output, await loadTerminal());
  return plainReporter(output.write, { journal: output.journal });
}

function processOutput(): UiOutput {
  return {
    write: (text) => void process.stderr.write(text),
    isTTY: Boolean(process.stderr.isTTY),
    columns: process.stderr.columns,
    journal: false,
  };
}

/**
 * The shared instance. Until the process edge configures it (and in tests and library
 * use), plain lines on stderr at info. `throttle: 0`: consola would otherwise fold a line
 * repeated within a second into "(repeated N times)", and every line here is wanted.
 * No `stdout`/`stderr` streams: every reporter here writes where it was told, and touching
 * process.stderr at import costs Bun its stream set-up before anything is printed
 * (docs/dependencies.md#the-design-cards-packages).
 */
export const ui: ConsolaInstance = createConsola({
  level: DEFAULT_LOG_LEVEL,
  throttle: 0,
  reporters: [plainReporter((text) => void process.stderr.write(text))],
  formatOptions: { date: false, columns: 0, compact: true },
});

/** Does `ui` draw status lines in place (a terminal)? Progress that only ticks a clock skips the work otherwise. */
export function showsStatus(): boolean {
  return ui.options.reporters.some((r) => (r as { live?: boolean }).live === true);
}

/** The process edge: the reporter for stderr as it is, and the level. */
export async function configureUi(options: { output?: Partial<UiOutput>; level?: number } = {}): Promise<void> {
  ui.setReporters([await reporterFor({ ...processOutput(), ...options.output })]);
  if (options.level !== undefined) ui.level = options.level;
}
