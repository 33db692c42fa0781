/**
 * What a person reads goes through consola (src/ui.ts): every command takes --log-level
 * (and CONSOLA_LEVEL), a level filters stderr and never stdout, and a bad level is refused
 * like any bad flag. Which reporter writes it: test/reporters/stderr.test.ts.
 */
import { describe, expect, it } from "bun:test";
import { LogLevels } from "consola/core";
import { runCli, type CliIO } from "../../src/cli.ts";
import { parseLogLevel } from "../../src/ui.ts";
import { runCli as runProcess, spawnCli } from "../helpers/proc.ts";
import { until } from "../helpers/fleet.ts";
import { tempDir } from "../helpers/tmp.ts";
import { captureUi } from "../helpers/ui.ts";

const root = new URL("../../", import.meta.url).pathname;
const UNIT = await Bun.file(`${root}deploy/llmroute.service`).text();
const COMMANDS = ["serve", "check", "status", "units", "sim", "bench", "demo", "probe"] as const;
/** `units` with a config under /home: a warning on stderr, the unit on stdout. */
const WARNS = ["units", "--config", "/home/u/router.toml"];

async function cli(args: string[], env: Record<string, string> = {}) {
  let stdout = "";
  const io: CliIO = { stdout: (t) => void (stdout += t), colour: false, env };
  const seen = captureUi();
  try {
    const code = await runCli(args, io);
    return { code, stdout, stderr: seen.text, types: seen.logs.map((l) => l.type) };
  } finally {
    seen.restore();
  }
}

describe("--log-level and CONSOLA_LEVEL", () => {
  it.each(COMMANDS)("%s --help lists --log-level", async (command) => {
    const { code, stdout } = await cli([command, "--help"]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/--log-level=<log_level>\s+What to print on stderr: silent \| error \| warn \| info \| debug \| trace \(default info; env CONSOLA_LEVEL\)/);
  });

  const unit = UNIT.replaceAll("--config /etc/llmroute/router.toml", "--config /home/u/router.toml");
  const warning = "llmroute units: /home/u/router.toml is under /home, which ProtectHome=yes hides from the service; install the config elsewhere (e.g. /etc/llmroute/router.toml)\n";
  it.each([
    ["default (info)", [], {}, true],
    ["--log-level warn", ["--log-level", "warn"], {}, true],
    ["--log-level=error", ["--log-level=error"], {}, false],
    ["--log-level silent", ["--log-level", "silent"], {}, false],
    ["--log-level debug", ["--log-level", "debug"], {}, true],
    ["CONSOLA_LEVEL=0", [], { CONSOLA_LEVEL: "0" }, false],
    ["CONSOLA_LEVEL=warn", [], { CONSOLA_LEVEL: "warn" }, true],
    ["the flag wins over CONSOLA_LEVEL", ["--log-level", "info"], { CONSOLA_LEVEL: "0" }, true],
    ["an empty CONSOLA_LEVEL is unset", [], { CONSOLA_LEVEL: "" }, true],
  ] as const)("%s: the warning on stderr is shown: %p; the unit on stdout is the same, byte for byte (a real process)", async (_name, flags, env, shown) => {
    const { code, stdout, stderr } = await runProcess([...WARNS, ...flags], { env: { CONSOLA_LEVEL: "", ...env } });
    expect(code).toBe(0);
    expect(stdout).toBe(unit);
    expect(stderr).toBe(shown ? warning : "");
  });

  it("serve's router log takes the level: --log-level warn keeps the warning and drops the info lines", async () => {
    const dir = await tempDir("llmroute-level-");
    await Bun.write(`${dir}/router.toml`, `[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:9"\n`);
    // At warn the "listening on" line is not printed, so the address is chosen here.
    const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = probe.port;
    probe.stop(true);
    const serve = spawnCli(["serve", "--config", `${dir}/router.toml`, "--listen", `127.0.0.1:${port}`, "--log-format", "json", "--log-level", "warn"]);
    await serve.waitFor(/"msg":"replica down"/, 20_000);
    // A request other than /health waits until the router has started (and serve has set
    // up its signal handlers before the answer can arrive).
    await until(async () => (await fetch(`http://127.0.0.1:${port}/v1/models`).catch(() => undefined))?.status, "the router to answer");
    expect(await serve.kill("SIGTERM")).toBe(0);
    const levels = serve.lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l).level);
    expect(levels).toEqual(["warn"]);
    expect(serve.lines.join("\n")).not.toContain("listening on");
  }, 30_000);

  it("a bad --log-level is a usage error: exit 2, the values named, nothing runs", async () => {
    const { code, stdout, stderr, types } = await cli([...WARNS, "--log-level", "loud"]);
    expect(code).toBe(2);
    expect(types).toEqual(["error"]);
    expect(stdout).toBe("");
    expect(stderr).toBe(
      'units: --log-level "loud": not a log level; use silent, error, warn, info, debug, trace or a number (consola\'s: 0 error … 3 info, 4 debug)\nRun "llmroute units --help" for its flags.\n',
    );
  });

  it("a bad CONSOLA_LEVEL is refused too (consola alone would read it as NaN and print everything)", async () => {
    const { code, stdout, stderr } = await cli(WARNS, { CONSOLA_LEVEL: "verbose-ish" });
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toBe('CONSOLA_LEVEL "verbose-ish": not a log level; use silent, error, warn, info, debug, trace or a number (consola\'s: 0 error … 3 info, 4 debug)\n');
  });

  it("the strict checker knows the flag: a typo gets it suggested", async () => {
    const { code, stderr } = await cli(["units", "--log-levl", "warn"]);
    expect(code).toBe(2);
    expect(stderr).toStartWith("units: unknown flag --log-levl; did you mean --log-level?\n");
  });

  it.each([
    ["silent", LogLevels.silent],
    ["error", 0],
    ["WARN", 1],
    ["info", 3],
    ["debug", 4],
    ["trace", 5],
    ["2", 2],
    ["-999", -999],
  ])("parseLogLevel(%p) = %p", (value, level) => {
    expect(parseLogLevel(value, "x")).toBe(level);
  });
});
