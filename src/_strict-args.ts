/**
 * Strict command lines on top of citty. citty parses leniently — an unknown flag is kept
 * as a property nobody reads, a stray word is ignored, `--no-x` is accepted for any x —
 * so a mistyped flag ran with its default (docs/dependencies.md#the-design-cards-packages).
 * Every subcommand's raw argv is checked here against its `args` definition before citty
 * sees it.
 *
 * The rules follow what citty (node:util parseArgs underneath) will do with the same
 * argv, so nothing that passes here is read differently there: `--flag value`,
 * `--flag=value`, `-c value`, `-cvalue`, `--switch`, `--switch=true|false`, `--no-switch`,
 * and `--` ending the flags (the words after it are arguments: none gets a flag
 * suggested). Pure: throws a usage error (exit 2) naming the flag.
 */
import type { ArgsDef } from "citty";
import { LlmrouteError } from "./errors.ts";
import { didYouMean } from "./_did-you-mean.ts";

interface Spec {
  /** The flag as documented: --name. */
  name: string;
  takesValue: boolean;
}

const usage = (command: string, message: string) => new LlmrouteError("usage", `${command}: ${message}`, { exitCode: 2 });

/** Throws a usage error for the first unknown flag, missing value or stray argument in `rawArgs`. */
export function checkArgs(command: string, rawArgs: readonly string[], def: ArgsDef): void {
  const long = new Map<string, Spec>();
  const short = new Map<string, Spec>();
  let positionals = 0;
  for (const [name, arg] of Object.entries(def)) {
    if (arg.type === "positional") {
      positionals++;
      continue;
    }
    const spec: Spec = { name: `--${name}`, takesValue: arg.type !== "boolean" };
    long.set(name, spec);
    const alias = "alias" in arg ? arg.alias : undefined;
    const aliases = alias === undefined ? [] : Array.isArray(alias) ? alias : [alias];
    for (const alias of aliases) (alias.length === 1 ? short : long).set(alias, spec);
  }
  const switches = [...long].filter(([, s]) => !s.takesValue).map(([n]) => `no-${n}`);
  const unknown = (flag: string, bare: string) => {
    const near = didYouMean(bare, [...long.keys(), ...switches]);
    return usage(command, `unknown flag ${flag}${near ? `; did you mean --${near}?` : ""}`);
  };
  /** A string flag's value is the next word, whatever it is (parseArgs takes it): refuse a flag there. */
  const valueAt = (flag: string, i: number): void => {
    const next = rawArgs[i];
    if (next === undefined) throw usage(command, `${flag} needs a value`);
    if (next.startsWith("--") || (next.length === 2 && next[0] === "-" && short.has(next[1]!))) {
      throw usage(command, `${flag} needs a value, got the flag ${next} (write ${flag}=${next} if that is the value)`);
    }
  };

  const stray: string[] = [];
  /** Index in `stray` of the first word after `--`: those are arguments, never flags. */
  let literal = Infinity;
  for (let i = 0; i < rawArgs.length; i++) {
    const arg = rawArgs[i]!;
    if (arg === "--") {
      literal = stray.length;
      stray.push(...rawArgs.slice(i + 1));
      break;
    }
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      const bare = arg.slice(2, eq < 0 ? undefined : eq);
      const inline = eq < 0 ? undefined : arg.slice(eq + 1);
      const spec = long.get(bare);
      if (!spec) {
        const negated = bare.startsWith("no-") ? long.get(bare.slice(3)) : undefined;
        if (negated && !negated.takesValue && inline === undefined) continue;
        if (negated) {
          throw usage(command, negated.takesValue ? `--${bare}: ${negated.name} takes a value, it is not a switch` : `--${bare} takes no value`);
        }
        throw unknown(eq < 0 ? arg : arg.slice(0, eq), bare);
      }
      if (!spec.takesValue) {
        if (inline !== undefined && inline !== "true" && inline !== "false") throw usage(command, `${spec.name} is a switch and takes no value (got ${arg})`);
        continue;
      }
      if (inline === "") throw usage(command, `${spec.name} needs a value`);
      if (inline === undefined) valueAt(spec.name, ++i);
      continue;
    }
    if (arg.startsWith("-") && arg.length > 1) {
      const letter = arg[1]!;
      const rest = arg.slice(2);
      const spec = short.get(letter);
      if (!spec) throw unknown(`-${letter}`, arg.slice(1));
      if (!spec.takesValue) {
        if (rest !== "") throw usage(command, `-${letter} is a switch; give each flag separately (got ${arg})`);
        continue;
      }
      if (rest.startsWith("=")) throw usage(command, `write -${letter} VALUE or ${spec.name}=VALUE (got ${arg})`);
      if (rest === "") valueAt(`-${letter}`, ++i);
      continue;
    }
    stray.push(arg);
  }
  if (stray.length > positionals) {
    const word = stray[positionals]!;
    const near = didYouMean(word.replace(/^-+/, ""), [...long.keys()]);
    const hint =
      positionals >= literal
        ? `; words after "--" are arguments, not flags, and this command takes ${positionals === 0 ? "none" : `only ${positionals}`}`
        : word.endsWith(".toml") && long.has("config")
        ? `; did you mean --config ${word}?`
        : near
          ? `; did you mean --${near}?`
          : positionals === 0
            ? "; this command takes only flags"
            : "";
    throw usage(command, `unexpected argument ${JSON.stringify(word)}${hint}`);
  }
}
