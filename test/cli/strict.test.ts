/**
 * The command line is strict for every subcommand: an unknown flag, a stray word, a flag
 * without its value, or `--no-` on a flag that is not a switch exits 2 with the nearest
 * known flag, and the command never runs. Table-driven over every subcommand, in process
 * (stdout injected, stderr read through consola's reporter hook); the process edge (exit
 * codes, piped help) is checked with real processes at the end.
 */
import { describe, expect, it } from "bun:test";
import type { ArgsDef } from "citty";
import pkg from "../../package.json" with { type: "json" };
import { checkArgs } from "../../src/_strict-args.ts";
import { runCli, type CliIO } from "../../src/cli.ts";
import { CLI, runCli as runProcess } from "../helpers/proc.ts";
import { captureUi } from "../helpers/ui.ts";

async function cli(args: string[], options: { journal?: boolean } = {}) {
  let stdout = "";
  const io: CliIO = { stdout: (t) => void (stdout += t), colour: false, env: {} };
  const seen = captureUi(options);
  try {
    const code = await runCli(args, io);
    return { code, stdout, stderr: seen.text, logs: seen.logs };
  } finally {
    seen.restore();
  }
}

const COMMANDS = ["serve", "check", "status", "units", "sim", "bench", "demo", "probe"] as const;

describe("every subcommand rejects what it does not know, with exit 2, before running", () => {
  it.each([
    ["serve", ["--lisen", "127.0.0.1:0"], /serve: unknown flag --lisen; did you mean --listen\?/],
    ["serve", ["--no-config"], /serve: --no-config: --config takes a value, it is not a switch/],
    ["serve", ["--log-format"], /serve: --log-format needs a value/],
    ["check", ["--confg", "x.toml"], /check: unknown flag --confg; did you mean --config\?/],
    ["check", ["router.toml"], /check: unexpected argument "router.toml"; did you mean --config router.toml\?/],
    ["check", ["-c", "r.toml", "--", "extra"], /check: unexpected argument "extra"/],
    // after "--" a word is an argument even when it looks like a flag: suggesting that flag would be wrong
    ["status", ["--", "--url", "x"], /status: unexpected argument "--url"; words after "--" are arguments, not flags, and this command takes none$/m],
    ["check", ["--", "router.toml"], /check: unexpected argument "router.toml"; words after "--" are arguments, not flags, and this command takes none$/m],
    ["check", ["--config=", "x"], /check: --config needs a value/],
    ["status", ["--jsno"], /status: unknown flag --jsno; did you mean --json\?/],
    ["status", ["--json=yes"], /status: --json is a switch and takes no value \(got --json=yes\)/],
    ["status", ["--url", "--json"], /status: --url needs a value, got the flag --json \(write --url=--json if that is the value\)/],
    ["units", ["--quadlt"], /units: unknown flag --quadlt; did you mean --quadlet\?/],
    ["units", ["-q"], /units: unknown flag -q/],
    ["units", ["systemd"], /units: unexpected argument "systemd"; this command takes only flags/],
    ["sim", ["--kv-token", "5"], /sim: unknown flag --kv-token; did you mean --kv-tokens\?/],
    ["sim", ["--no-prefix-cach"], /sim: unknown flag --no-prefix-cach; did you mean --no-prefix-cache\?/],
    ["sim", ["--port", "--verbose"], /sim: --port needs a value, got the flag --verbose/],
    ["sim", ["--verbose=1"], /sim: --verbose is a switch and takes no value/],
    ["bench", ["--polices", "hybrid"], /bench: unknown flag --polices; did you mean --policies\?/],
    ["bench", ["--no-orcale"], /bench: unknown flag --no-orcale; did you mean --no-oracle\?/],
    ["bench", ["agent"], /bench: unexpected argument "agent"; this command takes only flags/],
    ["demo", ["--time-scal", "0.1"], /demo: unknown flag --time-scal; did you mean --time-scale\?/],
    ["demo", ["now"], /demo: unexpected argument "now"/],
    ["probe", ["--url", "http://127.0.0.1:1", "--tokes", "100"], /probe: unknown flag --tokes; did you mean --tokens\?/],
    ["probe", ["--url", "http://127.0.0.1:1", "--tokens"], /probe: --tokens needs a value/],
    ["probe", ["http://127.0.0.1:8000"], /probe: unexpected argument "http:\/\/127.0.0.1:8000"/],
    ["probe", ["-c=r.toml", "--all"], /probe: write -c VALUE or --config=VALUE \(got -c=r.toml\)/],
  ] as const)("%s %p", async (command, args, message) => {
    const { code, stdout, stderr } = await cli([command, ...args]);
    expect(code).toBe(2);
    expect(stderr).toMatch(message);
    expect(stderr).toContain(`Run "llmroute ${command} --help" for its flags.`);
    expect(stdout).toBe("");
  });

  it("the table above covers every subcommand with an unknown flag and a stray argument", async () => {
    for (const command of COMMANDS) {
      expect((await cli([command, "--definitely-not-a-flag"])).code).toBe(2);
      expect((await cli([command, "stray"])).stderr).toContain(`${command}: unexpected argument "stray"`);
    }
  });

  it.each(COMMANDS)("%s --help prints its flags on stdout, without colour or trailing spaces, and exits 0", async (command) => {
    const { code, stdout, stderr } = await cli([command, "--help"]);
    expect(code).toBe(0);
    expect(stderr).toBe("");
    expect(stdout).toContain(`llmroute ${command}`);
    expect(stdout).toMatch(/--\w/);
    expect(stdout).not.toMatch(/\x1b\[/);
    expect(stdout).not.toMatch(/[ \t]+$/m);
  });

  it.each(COMMANDS)("%s --version prints the version and does not run the command", async (command) => {
    const { code, stdout, stderr } = await cli([command, "--version", "--config", "/nonexistent.toml"]);
    expect({ code, stdout, stderr }).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: "" });
  });

  it("an unknown command suggests the nearest one", async () => {
    const { code, stderr } = await cli(["stauts"]);
    expect(code).toBe(2);
    expect(stderr).toContain('llmroute: unknown command "stauts"; did you mean status?');
    expect(stderr).toContain("Commands: serve, check, status, units, sim, bench, demo, probe.");
  });

  it("a flag before the command is not a command", async () => {
    const { code, stderr } = await cli(["--config", "r.toml", "serve"]);
    expect(code).toBe(2);
    expect(stderr).toContain("llmroute: a command comes first, not --config");
  });

  it("no arguments: help on stderr, exit 2", async () => {
    const { code, stdout, stderr } = await cli([]);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toContain("USAGE llmroute");
    for (const command of COMMANDS) expect(stderr).toContain(command);
  });

  it("citty's own errors (an enum out of range) are usage errors too", async () => {
    const { code, stderr } = await cli(["sim", "--profile", "h100"]);
    expect(code).toBe(2);
    expect(stderr).toContain("sim: Invalid value for argument: --profile (h100). Expected one of: 3090, h100-8b, 4xh100-70b, tiny.");
  });

  it("under the journal, error lines carry the syslog priority <3>", async () => {
    const { code, stderr, logs } = await cli(["check", "--confg", "x"], { journal: true });
    expect(code).toBe(2);
    expect(logs.map((l) => l.type)).toEqual(["error"]);
    // journald files each line on its own: the hint carries the priority too
    expect(stderr).toBe('<3>check: unknown flag --confg; did you mean --config?\n<3>Run "llmroute check --help" for its flags.\n');
  });
});

describe("checkArgs accepts every form citty reads the same way", () => {
  const def: ArgsDef = {
    config: { type: "string", alias: "c", default: "router.toml" },
    port: { type: "string" },
    profile: { type: "enum", options: ["a", "b"] },
    verbose: { type: "boolean" },
    "prefix-cache": { type: "boolean", default: true },
  };
  it.each([
    [[]],
    [["--config", "r.toml"]],
    [["--config=r.toml"]],
    [["-c", "r.toml"]],
    [["-cr.toml"]],
    [["--port", "-1"]], // a negative number is a value (sim's --stall-next -1)
    [["--port", "-"]],
    [["--verbose", "--verbose=false", "--verbose=true"]],
    [["--no-prefix-cache", "--no-verbose"]],
    [["--profile", "a"]],
    [["--config=--odd-but-explicit"]],
    [["--"]],
    [["--port", "8001", "--"]],
  ])("%p", (args) => {
    expect(() => checkArgs("x", args, def)).not.toThrow();
  });

  it("a positional argument is allowed when the command declares one", () => {
    expect(() => checkArgs("x", ["file.txt"], { file: { type: "positional" } })).not.toThrow();
    expect(() => checkArgs("x", ["a", "b"], { file: { type: "positional" } })).toThrow('x: unexpected argument "b"');
  });
});

describe("at the process edge", () => {
  it("`llmroute` alone prints help and exits 2", async () => {
    const { code, stdout, stderr } = await runProcess([]);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toContain("USAGE llmroute");
  });

  it("`probe --tokes 100` exits 2 naming --tokens and sends nothing", async () => {
    const { code, stdout, stderr } = await runProcess(["probe", "--url", "http://127.0.0.1:9", "--tokes", "100"]);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toStartWith("probe: unknown flag --tokes; did you mean --tokens?\n");
  });

  it("help piped to a file has no colour and no trailing spaces, where citty itself would colour", async () => {
    // The environment citty colours in: no NO_COLOR, TEST or CI, a colour terminal.
    const env: Record<string, string> = { ...(process.env as Record<string, string>), TERM: "xterm-256color" };
    for (const name of ["NO_COLOR", "TEST", "CI", "FORCE_COLOR"]) delete env[name];
    const run = async (argv: string[]) => {
      const p = Bun.spawn(argv, { env, stdout: "pipe", stderr: "pipe" });
      const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
      return { out, code };
    };
    const raw = await run([process.execPath, "-e", 'import("citty").then(async (c) => console.log(await c.renderUsage({ meta: { name: "x" }, args: { a: { type: "string", description: "d" } } })))']);
    expect(raw.out).toMatch(/\x1b\[/); // the control: citty alone writes ANSI colour into a pipe
    const help = await run([...CLI, "sim", "--help"]);
    expect(help.code).toBe(0);
    expect(help.out).toContain("--no-prefix-cache");
    expect(help.out).not.toMatch(/\x1b\[/);
    expect(help.out).not.toMatch(/[ \t]+$/m);
  });

  it("units -c is --config", async () => {
    const { code, stdout } = await runProcess(["units", "-c", "/srv/llmroute/r.toml"]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^ExecStart=\S+ serve --config \/srv\/llmroute\/r\.toml /m);
  });
});
