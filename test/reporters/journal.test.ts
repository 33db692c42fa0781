/**
 * Logs under systemd: when stderr is the journal (JOURNAL_STREAM names stderr's
 * device:inode), every line starts with its syslog priority, so `journalctl -p warning`
 * filters by level. Detection with an injected environment, then a real `serve` whose
 * stderr is a file that JOURNAL_STREAM names.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { stat } from "node:fs/promises";
import { LogLevels } from "consola/core";
import { createLog, stderrIsJournal } from "../../src/log.ts";
import { until } from "../helpers/fleet.ts";
import { CLI } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

const procs: ReturnType<typeof Bun.spawn>[] = [];
afterAll(() => procs.forEach((p) => p.kill("SIGKILL")));

describe("stderrIsJournal", () => {
  const stderr = () => ({ dev: 64769, ino: 1234567 });
  it.each([
    ["JOURNAL_STREAM names stderr", { JOURNAL_STREAM: "64769:1234567" }, true],
    ["another stream (stderr redirected by a parent)", { JOURNAL_STREAM: "64769:7654321" }, false],
    ["not under systemd", {}, false],
    ["empty", { JOURNAL_STREAM: "" }, false],
    ["malformed", { JOURNAL_STREAM: "journal" }, false],
  ])("%s", (_name, env, expected) => {
    expect(stderrIsJournal(env, stderr)).toBe(expected);
  });

  it("a stderr that cannot be examined is not the journal", () => {
    expect(stderrIsJournal({ JOURNAL_STREAM: "1:2" }, () => { throw new Error("EBADF"); })).toBe(false);
  });
});

describe("createLog under the journal", () => {
  const lines = (format: "human" | "json", journal: boolean) => {
    const out: string[] = [];
    const log = createLog({ format, journal, level: LogLevels.debug, write: (l) => out.push(l), isTTY: false, now: () => new Date(0) });
    log.error("e");
    log.warn("replica down", { replica: "gpu0" });
    log.info("i");
    log.debug("d");
    return out;
  };
  it("prefixes each level with its syslog priority, in both formats", () => {
    expect(lines("json", true).map((l) => l.slice(0, 4))).toEqual(["<3>{", "<4>{", "<6>{", "<7>{"]);
    expect(lines("human", true)).toEqual([
      "<3>00:00:00.000 error e",
      "<4>00:00:00.000 warn  replica down replica=gpu0",
      "<6>00:00:00.000 info  i",
      "<7>00:00:00.000 debug d",
    ]);
    expect(JSON.parse(lines("json", true)[1]!.slice(3))).toMatchObject({ level: "warn", msg: "replica down", replica: "gpu0" });
  });
  it("adds nothing elsewhere", () => {
    expect(lines("json", false).every((l) => l.startsWith("{"))).toBe(true);
  });
});

it("a real serve whose stderr is the journal's stream writes <6> info and <3> error lines", async () => {
  const dir = await tempDir("llmroute-journal-");
  const config = `${dir}/router.toml`;
  const logFile = `${dir}/stderr.log`;
  await Bun.write(config, `[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:9"\n`);
  await Bun.write(logFile, "");
  const { dev, ino } = await stat(logFile);
  const proc = Bun.spawn([...CLI, "serve", "--config", config, "--listen", "127.0.0.1:0"], {
    env: { ...process.env, NO_COLOR: "1", JOURNAL_STREAM: `${dev}:${ino}` },
    stdout: "ignore",
    stderr: Bun.file(logFile),
  });
  procs.push(proc);
  const log = () => Bun.file(logFile).text();
  await until(async () => (await log()).includes("listening on"), "the router to listen");
  // An invalid config on SIGHUP is logged at error level and the old one kept.
  await Bun.write(config, `[routing]\npolicy = "fastest"\n`);
  proc.kill("SIGHUP");
  await until(async () => (await log()).includes("reload rejected"), "the rejected reload");
  proc.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
  const lines = (await log()).trimEnd().split("\n");
  expect(lines.find((l) => l.includes("listening on"))).toStartWith('<6>{"time"');
  expect(lines.find((l) => l.includes("reload rejected"))).toStartWith('<3>{"time"');
  for (const line of lines) expect(line).toMatch(/^<[3467]>\{/);
});
