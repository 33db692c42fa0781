/**
 * What a person reads goes through consola (src/ui.ts): every command takes --log-level
 * (and CONSOLA_LEVEL), a level filters stderr and never stdout, a bad level is refused like
 * any bad flag, and the reporter follows stderr: plain lines in a pipe, consola's fancy
 * reporter on a terminal (a real pseudo-terminal, with and without NO_COLOR).
 */
import { describe, expect, it } from "bun:test";
import { LogLevels } from "consola/core";
import { runCli, type CliIO } from "../../src/cli.ts";
import { createLog } from "../../src/log.ts";
import { liveReporter, loadTerminal } from "../../src/reporters/live.ts";
import { plainReporter } from "../../src/reporters/plain.ts";
import { parseLogLevel, reporterFor } from "../../src/ui.ts";
import { CLI, runCli as runProcess, spawnCli } from "../helpers/proc.ts";
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

describe("the reporter follows stderr", () => {
  const logObj = (type: "info" | "warn" | "error" | "success", text: string, extra: Record<string, unknown> = {}) => ({
    type,
    level: type === "error" ? 0 : type === "warn" ? 1 : 3,
    tag: "",
    args: [text],
    date: new Date(0),
    ...extra,
  });

  it("a pipe gets plain lines; the journal gets them with priorities; a terminal gets the live reporter", async () => {
    const out = { write: () => {}, columns: 80 };
    expect(((await reporterFor({ ...out, isTTY: true, journal: false })) as { live?: boolean }).live).toBe(true);
    expect(((await reporterFor({ ...out, isTTY: false, journal: false })) as { live?: boolean }).live).toBeUndefined();
    expect(((await reporterFor({ ...out, isTTY: true, journal: true })) as { live?: boolean }).live).toBeUndefined();
    const lines: string[] = [];
    const plain = plainReporter((t) => lines.push(t), { journal: true });
    const ctx = { options: {} as never };
    plain.log(logObj("warn", "replica down\nsecond line"), ctx);
    plain.log(logObj("info", "12/48 requests", { transient: true }), ctx);
    plain.log(logObj("success", "done"), ctx);
    expect(lines).toEqual(["<4>replica down\n<4>second line\n", "<6>done\n"]);
  });

  it("on a terminal a transient status line is rewritten in place and cleared before a lasting line", async () => {
    let written = "";
    const live = liveReporter({ write: (t) => void (written += t), columns: 30 }, await loadTerminal());
    const ctx = { options: { formatOptions: { date: false, columns: 0 } } as never };
    live.log(logObj("info", "agent · hybrid · 1/48", { transient: true }), ctx);
    live.log(logObj("info", "agent · hybrid · 2/48 requests done", { transient: true }), ctx);
    live.log(logObj("success", "agent hybrid finished"), ctx);
    // cut to the terminal's width, less one column, with an ellipsis
    expect(written).toStartWith("\r\x1b[Kagent · hybrid · 1/48\r\x1b[Kagent · hybrid · 2/48 reques…\r\x1b[K");
    expect(written).toEndWith(" agent hybrid finished\n");
  });

  it("serve's log on a terminal: consola's fancy reporter, one line per event (the time to the millisecond, no badge)", async () => {
    const lines: string[] = [];
    const log = createLog({ format: "auto", isTTY: true, journal: false, write: (l) => lines.push(l), now: () => new Date(0), terminal: await loadTerminal() });
    log.info("request", { endpoint: "chat", model: "a b" });
    log.warn("replica down", { replica: "gpu0" });
    log.error("could not save routing state", { file: "/x" });
    expect(lines.map((l) => l.replace(/\x1b\[\d+m/g, ""))).toEqual([
      expect.stringMatching(/^\S+ 00:00:00\.000 request endpoint=chat model="a b"$/),
      expect.stringMatching(/^\S+ 00:00:00\.000 replica down replica=gpu0$/),
      expect.stringMatching(/^\S+ 00:00:00\.000 could not save routing state file=\/x$/),
    ]);
    // each level its own icon
    expect(new Set(lines.map((l) => l.replace(/\x1b\[\d+m/g, "").split(" ")[0])).size).toBe(3);
  });

  // A real pseudo-terminal (util-linux `script`): what a person at a terminal sees.
  const onTerminal = async (env: Record<string, string>) => {
    const command = [...CLI, ...WARNS].map((a) => `'${a}'`).join(" ");
    const base: Record<string, string> = { ...(process.env as Record<string, string>), TERM: "xterm-256color", ...env };
    for (const name of ["NO_COLOR", "FORCE_COLOR", "CI"]) if (!(name in env)) delete base[name];
    const p = Bun.spawn(["script", "-qec", command, "/dev/null"], { env: base, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    const [out, code] = await Promise.all([new Response(p.stdout).text(), p.exited]);
    return { out, code };
  };

  it("a terminal gets consola's fancy reporter, in colour", async () => {
    const { out, code } = await onTerminal({});
    expect(code).toBe(0);
    expect(out).toContain(" WARN ");
    expect(out).toMatch(/\x1b\[\d+m/);
    expect(out).toContain("llmroute units: /home/u/router.toml is under /home");
  });

  it("with NO_COLOR, the same reporter without colour", async () => {
    const { out, code } = await onTerminal({ NO_COLOR: "1" });
    expect(code).toBe(0);
    expect(out).toContain(" WARN  llmroute units: /home/u/router.toml is under /home");
    expect(out).not.toMatch(/\x1b\[\d+m/);
  });
});
