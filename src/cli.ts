#!/usr/bin/env bun
/**
 * The only place that reads argv and exits. Every subcommand's `run` returns its exit code
 * (or throws an LlmrouteError carrying one); this edge checks the command line strictly,
 * prints help and errors, and exits: 0 ok, 1 the command's own "no" (degraded, no cache
 * effect), 2 bad usage or config.
 *
 * Help and the version asked for are results (stdout, byte for byte); the CLI's errors and
 * the help printed for a bare `llmroute` are for a person (stderr, through `ui`, the
 * consola instance whose reporter and level this edge sets: src/ui.ts).
 */
import { parseArgs, renderUsage, runCommand, type ArgsDef, type CommandDef } from "citty";
import pkg from "../package.json" with { type: "json" };
import { checkArgs } from "./_strict-args.ts";
import { didYouMean } from "./_did-you-mean.ts";
import { LlmrouteError } from "./errors.ts";
import { stderrIsJournal } from "./log.ts";
import { configureUi, DEFAULT_LOG_LEVEL, logLevelArg, parseLogLevel, ui } from "./ui.ts";

const subCommands = {
  serve: () => import("./commands/serve.ts").then((m) => m.default),
  check: () => import("./commands/check.ts").then((m) => m.default),
  status: () => import("./commands/status.ts").then((m) => m.default),
  units: () => import("./commands/units.ts").then((m) => m.default),
  sim: () => import("./sim/command.ts").then((m) => m.default),
  bench: () => import("./bench/command.ts").then((m) => m.default),
  demo: () => import("./bench/demo.ts").then((m) => m.default),
  probe: () => import("./probe/command.ts").then((m) => m.default),
} satisfies Record<string, () => Promise<CommandDef<any>>>;

type Name = keyof typeof subCommands;
const NAMES = Object.keys(subCommands) as Name[];

export const main: CommandDef = {
  meta: {
    name: "llmroute",
    version: pkg.version,
    description: "Prefix-cache-aware router for OpenAI-compatible LLM replicas",
  },
  subCommands,
};

/** What the CLI reads and writes besides `ui`: its results, and whether help may be coloured. */
export interface CliIO {
  stdout(text: string): void;
  /** Colour in help text: only on a terminal, never with NO_COLOR. */
  colour: boolean;
  /** CONSOLA_LEVEL comes from here. */
  env: Record<string, string | undefined>;
}

function processIO(): CliIO {
  return {
    stdout: (text) => void process.stdout.write(text),
    colour: Boolean(process.stdout.isTTY) && !process.env.NO_COLOR,
    env: process.env,
  };
}

/** A command with the flags every command takes (--log-level), for checking, help and parsing alike. */
async function withCommonArgs(command: CommandDef<any>): Promise<CommandDef<any>> {
  const args = ((typeof command.args === "function" ? await command.args() : await command.args) ?? {}) as ArgsDef;
  return { ...command, args: { ...args, ...logLevelArg } };
}

/** Run the CLI on `rawArgs` and return the process exit code. */
export async function runCli(rawArgs: string[], io: CliIO = processIO()): Promise<number> {
  const fail = (message: string, hint?: string): number => {
    ui.error(hint ? `${message}\n${hint}` : message);
    return 2;
  };
  const [name, ...rest] = rawArgs;
  if (name === undefined) {
    ui.log(await help(main, undefined, io));
    return 2;
  }
  if (name === "--help" || name === "-h") {
    io.stdout(`${await help(main, undefined, io)}\n`);
    return 0;
  }
  if ((name === "--version" || name === "-v") && rest.length === 0) {
    io.stdout(`${pkg.version}\n`);
    return 0;
  }
  if (!(NAMES as string[]).includes(name)) {
    const near = didYouMean(name.replace(/^-+/, ""), NAMES);
    const what = name.startsWith("-") ? `a command comes first, not ${name}` : `unknown command ${JSON.stringify(name)}`;
    return fail(`llmroute: ${what}${near ? `; did you mean ${near}?` : ""}`, `Commands: ${NAMES.join(", ")}. Run "llmroute --help" for what each does.`);
  }

  const command = await withCommonArgs(await subCommands[name as Name]());
  // Help and version are answered wherever they appear before "--", and the command never
  // runs: `llmroute check --version` prints the version, it does not check a config.
  const flags = rest.includes("--") ? rest.slice(0, rest.indexOf("--")) : rest;
  if (flags.includes("--help") || flags.includes("-h")) {
    io.stdout(`${await help(command, main, io)}\n`);
    return 0;
  }
  if (flags.includes("--version")) {
    io.stdout(`${pkg.version}\n`);
    return 0;
  }
  const flagHint = `Run "llmroute ${name} --help" for its flags.`;
  try {
    const args = command.args as ArgsDef;
    checkArgs(name, rest, args);
    // The level before anything runs: --log-level, else CONSOLA_LEVEL, else info.
    const flag = parseArgs(rest, args)["log-level"] as string | undefined;
    const fromEnv = io.env.CONSOLA_LEVEL;
    ui.level =
      flag !== undefined ? parseLogLevel(flag, `${name}: --log-level`)
      : fromEnv !== undefined && fromEnv !== "" ? parseLogLevel(fromEnv, "CONSOLA_LEVEL", "config")
      : DEFAULT_LOG_LEVEL;
    // citty drops a subcommand's return value, so run it here: the result is the exit code
    // (probe's verdict, status's health).
    const { result } = await runCommand(command, { rawArgs: rest });
    return typeof result === "number" ? result : 0;
  } catch (error) {
    if (error instanceof LlmrouteError) {
      fail(error.message, error.code === "usage" ? flagHint : undefined);
      return error.exitCode;
    }
    // citty's own argument errors (an enum value out of range) are usage errors too.
    if (error instanceof Error && error.name === "CLIError") return fail(`${name}: ${stripAnsi(error.message)}`, flagHint);
    ui.error(error);
    return 1;
  }
}

/**
 * citty's colours, taken out. consola/utils has a stripAnsi, but importing it loads node:tty
 * at every start (docs/dependencies.md#the-design-cards-packages); this pattern covers the
 * SGR codes citty writes.
 */
function stripAnsi(text: string): string {
  return text.replace(/\x1b\[[0-9;]*m/g, "");
}

/** citty's usage text, without colour when it is not for a terminal and without trailing spaces. */
export async function help(command: CommandDef<any>, parent: CommandDef<any> | undefined, io: Pick<CliIO, "colour">): Promise<string> {
  const text = await renderUsage(command, parent);
  return (io.colour ? text : stripAnsi(text))
    .split("\n")
    .map((line) => line.replace(/\s+$/, ""))
    .join("\n");
}

if (import.meta.main) {
  await configureUi({ output: { journal: stderrIsJournal() } });
  process.exit(await runCli(process.argv.slice(2)));
}
