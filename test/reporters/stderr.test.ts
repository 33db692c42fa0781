/**
 * The reporter follows stderr (src/ui.ts reporterFor, src/reporters/): plain lines in a pipe,
 * with syslog priorities for the journal, consola's fancy reporter on a terminal (a real
 * pseudo-terminal, with and without NO_COLOR), and status lines rewritten in place there.
 */
import { describe, expect, it } from "bun:test";
import { createLog } from "../../src/log.ts";
import { liveReporter, loadTerminal } from "../../src/reporters/live.ts";
import { plainReporter } from "../../src/reporters/plain.ts";
import { reporterFor } from "../../src/ui.ts";
import { CLI } from "../helpers/proc.ts";

/** `units` with a config under /home: a warning on stderr, the unit on stdout. */
const WARNS = ["units", "--config", "/home/u/router.toml"];

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
