#!/usr/bin/env bun
/**
 * The only place that reads argv and exits. Every subcommand's `run` returns its exit code
 * (or throws an LlmrouteError carrying one); this edge prints the error and exits.
 */
import { defineCommand, runCommand, showUsage, type CommandDef } from "citty";
import { consola } from "consola";
import pkg from "../package.json" with { type: "json" };
import { LlmrouteError } from "./errors.ts";

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

export const main = defineCommand({
  meta: {
    name: "llmroute",
    version: pkg.version,
    description: "Prefix-cache-aware router for OpenAI-compatible LLM replicas",
  },
  subCommands,
});

/** Run the CLI on `rawArgs` and return the process exit code. */
export async function runCli(rawArgs: string[]): Promise<number> {
  if (rawArgs.length === 1 && (rawArgs[0] === "--version" || rawArgs[0] === "-v")) {
    console.log(pkg.version);
    return 0;
  }
  if (rawArgs.length === 0 || rawArgs.includes("--help") || rawArgs.includes("-h")) {
    await showUsage(...(await resolveForUsage(rawArgs)));
    return 0;
  }
  try {
    // citty drops a subcommand's return value, so resolve the subcommand here: its result
    // is the exit code (probe's verdict, status's health).
    const [name, ...rest] = rawArgs;
    if (!name || !(name in subCommands)) {
      await showUsage(main);
      consola.error(`Unknown command ${name ?? ""}`.trim());
      return 2;
    }
    const command = await subCommands[name as keyof typeof subCommands]();
    const { result } = await runCommand(command, { rawArgs: rest });
    return typeof result === "number" ? result : 0;
  } catch (error) {
    if (error instanceof LlmrouteError) {
      consola.error(error.message);
      return error.exitCode;
    }
    if (error instanceof Error && error.name === "CLIError") {
      await showUsage(...(await resolveForUsage(rawArgs)));
      consola.error(error.message);
      return 2;
    }
    consola.error(error);
    return 1;
  }
}

async function resolveForUsage(rawArgs: string[]): Promise<[CommandDef<any>, CommandDef<any>?]> {
  const name = rawArgs.find((a) => !a.startsWith("-"));
  if (name && name in subCommands) return [await subCommands[name as keyof typeof subCommands](), main];
  return [main];
}

if (import.meta.main) {
  process.exit(await runCli(process.argv.slice(2)));
}
