import { describe, expect, it } from "bun:test";
import { mkdtemp } from "node:fs/promises";
import { renderUnit } from "../../src/commands/units.ts";
import { runCli } from "../helpers/proc.ts";

const root = new URL("../../", import.meta.url).pathname;

describe("llmroute units", () => {
  it("prints the systemd unit kept in deploy/", async () => {
    const { code, stdout } = await runCli(["units"]);
    expect(code).toBe(0);
    expect(stdout).toBe(await Bun.file(`${root}deploy/llmroute.service`).text());
    expect(stdout).toMatch(/^Type=exec$/m);
    expect(stdout).toMatch(/^Restart=on-failure$/m);
    expect(stdout).toMatch(/^ExecReload=\/bin\/kill -HUP \$MAINPID$/m);
  });

  it("--quadlet prints the Podman quadlet kept in deploy/", async () => {
    const { code, stdout } = await runCli(["units", "--quadlet"]);
    expect(code).toBe(0);
    expect(stdout).toBe(await Bun.file(`${root}deploy/llmroute.container`).text());
    expect(stdout).toMatch(/^\[Container\]$/m);
  });

  it("substitutes the binary and config paths", () => {
    const unit = renderUnit("systemd", { binary: "/opt/llmroute", config: "/srv/router.toml" });
    expect(unit).toMatch(/^ExecStart=\/opt\/llmroute serve --config \/srv\/router.toml --log-format json$/m);
    expect(renderUnit("quadlet", { binary: "/opt/llmroute" })).toContain("Volume=/opt/llmroute:/usr/local/bin/llmroute:ro");
  });

  const analyze = Bun.which("systemd-analyze");
  it.if(analyze !== null)("the systemd unit passes systemd-analyze verify without warnings", async () => {
    const dir = await mkdtemp("/tmp/llmroute-unit-");
    const path = `${dir}/llmroute.service`;
    // verify checks that ExecStart exists: point it at a real executable
    await Bun.write(path, renderUnit("systemd", { binary: process.execPath, config: `${root}router.toml` }));
    const proc = Bun.spawn([analyze!, "verify", path], { stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    const own = `${out}${err}`.split("\n").filter((l) => l.includes("llmroute.service"));
    expect(own).toEqual([]);
    expect(code).toBe(0);
  });
});
