import { describe, expect, it } from "bun:test";
import { renderUnit, unitWarnings } from "../../src/commands/units.ts";
import { parseConfig } from "../../src/config.ts";
import { runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

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
    expect(renderUnit("quadlet", { binary: "/opt/llmroute" })).toContain("Volume=/opt/llmroute:/usr/local/bin/llmroute:ro,z");
  });

  it("relative paths become absolute (systemd needs it; podman would read a named volume)", () => {
    expect(renderUnit("systemd", { binary: "dist/llmroute", config: "r.toml" }, "/home/u/llmroute")).toMatch(
      /^ExecStart=\/home\/u\/llmroute\/dist\/llmroute serve --config \/home\/u\/llmroute\/r.toml /m,
    );
    expect(renderUnit("quadlet", { config: "r.toml" }, "/srv")).toMatch(/^Volume=\/srv\/r.toml:\/etc\/llmroute\/router.toml:ro,Z$/m);
  });

  it("--quadlet --config mounts that file where the container reads it", async () => {
    const { code, stdout } = await runCli(["units", "--quadlet", "--config", "/srv/r.toml"]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^Volume=\/srv\/r.toml:\/etc\/llmroute\/router.toml:ro,Z$/m);
    expect(stdout).not.toContain("%h/.config/llmroute:");
    expect(stdout).toMatch(/^Exec=\/usr\/local\/bin\/llmroute serve --config \/etc\/llmroute\/router.toml /m);
  });

  it("warns when ProtectHome=yes would hide the paths given", async () => {
    const { code, stderr } = await runCli(["units", "--config", "/home/u/router.toml", "--binary", "/root/llmroute"]);
    expect(code).toBe(0);
    expect(stderr).toContain("/root/llmroute is under /root, which ProtectHome=yes hides from the service");
    expect(stderr).toContain("/home/u/router.toml is under /home, which ProtectHome=yes hides from the service");
    expect(unitWarnings("systemd", { config: "/etc/llmroute/router.toml" })).toEqual([]);
    expect(unitWarnings("quadlet", { config: "/home/u/router.toml" })).toEqual([]);
  });

  it("warns when PrivateTmp=yes would hide the paths given: the service sees its own empty /tmp and /var/tmp", async () => {
    const { code, stderr } = await runCli(["units", "--config", "/tmp/llmroute/router.toml", "--binary", "/var/tmp/llmroute"]);
    expect(code).toBe(0);
    expect(stderr).toContain("/tmp/llmroute/router.toml is under /tmp, which PrivateTmp=yes replaces with an empty directory for the service; install the config elsewhere (e.g. /etc/llmroute/router.toml)");
    expect(stderr).toContain("/var/tmp/llmroute is under /var/tmp, which PrivateTmp=yes replaces with an empty directory for the service; install the binary elsewhere (e.g. /usr/local/bin/llmroute)");
    // a relative path is resolved first: from /tmp, "router.toml" is /tmp/router.toml
    expect(unitWarnings("systemd", { config: "router.toml" }, "/tmp")).toEqual([expect.stringContaining("/tmp/router.toml is under /tmp")]);
    expect(unitWarnings("systemd", { config: "/tmpl/router.toml" })).toEqual([]);
  });

  it("the drain has time: podman waits longer than server.drain_timeout, systemd longer than podman", async () => {
    const q = renderUnit("quadlet");
    const stopTimeout = Number(/^PodmanArgs=--stop-timeout=(\d+)$/m.exec(q)![1]);
    const quadletStopSec = Number(/^TimeoutStopSec=(\d+)s$/m.exec(q)![1]);
    const drain = parseConfig(`[[replica]]\nname = "a"\nurl = "http://x"\n`, "r.toml", { env: {} }).server.drain_timeout_ms / 1000;
    expect(stopTimeout).toBeGreaterThan(drain);
    expect(quadletStopSec).toBeGreaterThan(stopTimeout);
    expect(Number(/^TimeoutStopSec=(\d+)s$/m.exec(renderUnit("systemd"))![1])).toBeGreaterThan(drain);
  });

  it("the quadlet uses only keys Podman 4.4's quadlet knows (it refuses any other: no service at all)", () => {
    // podman v4.4.0 pkg/systemd/quadlet/quadlet.go supportedContainerKeys; an unknown key is
    // an error there ("unsupported key '%s' in group '%s'", checkForUnknownKeys).
    const podman44 = ["ContainerName", "Image", "Environment", "EnvironmentFile", "EnvironmentHost", "Exec", "NoNewPrivileges", "DropCapability", "AddCapability", "ReadOnly", "RemapUsers", "RemapUID", "RemapGID", "RemapUIDSize", "Notify", "ExposeHostPort", "PublishPort", "User", "Group", "Volume", "PodmanArgs", "Label", "Annotation", "RunInit", "VolatileTmp", "Timezone", "SeccompProfile", "AddDevice", "Network"];
    const section = renderUnit("quadlet").split(/^\[Container\]$/m)[1]!.split(/^\[/m)[0]!;
    const keys = section.split("\n").filter((l) => /^[A-Za-z]+=/.test(l)).map((l) => l.slice(0, l.indexOf("=")));
    expect(keys.length).toBeGreaterThan(5);
    expect(keys.filter((k) => !podman44.includes(k))).toEqual([]);
    expect(renderUnit("quadlet")).toContain("Quadlets need Podman 4.4 or later");
  });

  it.each([
    ["/opt/my dir/llmroute", '"/opt/my dir/llmroute"'],
    ['/opt/a"b\\c/llmroute', '"/opt/a\\"b\\\\c/llmroute"'],
    ["/opt/100%/llmroute", "/opt/100%%/llmroute"],
    ["/opt/$HOME/llmroute", "/opt/$$HOME/llmroute"],
    ["/opt/it's/llmroute", `"/opt/it's/llmroute"`],
  ])("ExecStart quotes a path as systemd reads it back: %s → %s", (path, word) => {
    const unit = renderUnit("systemd", { binary: path, config: path.replace(/llmroute$/, "router.toml") });
    const config = word.replace(/llmroute("?)$/, "router.toml$1");
    expect(unit.split("\n").find((l) => l.startsWith("ExecStart="))).toBe(`ExecStart=${word} serve --config ${config} --log-format json`);
  });

  it("a path with a control character is refused, not written into the unit", async () => {
    const { code, stderr, stdout } = await runCli(["units", "--binary", "/opt/a\nb/llmroute"]);
    expect(code).toBe(2);
    expect(stdout).toBe("");
    expect(stderr).toContain("a path with a control character cannot be written in a unit file");
  });

  it("the systemd unit filters system calls and hides other processes", () => {
    const unit = renderUnit("systemd");
    for (const line of ["SystemCallFilter=@system-service", "SystemCallErrorNumber=EPERM", "ProcSubset=pid", "ProtectProc=invisible", "SystemCallArchitectures=native"]) {
      expect(unit).toMatch(new RegExp(`^${line}$`, "m"));
    }
  });

  const analyze = Bun.which("systemd-analyze");
  it.if(analyze !== null)("the systemd unit passes systemd-analyze verify without warnings", async () => {
    const dir = await tempDir("llmroute-unit-");
    const path = `${dir}/llmroute.service`;
    // verify checks that ExecStart exists: point it at a real executable
    await Bun.write(path, renderUnit("systemd", { binary: process.execPath, config: `${root}router.toml` }));
    const proc = Bun.spawn([analyze!, "verify", path], { stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    const own = `${out}${err}`.split("\n").filter((l) => l.includes("llmroute.service"));
    expect(own).toEqual([]);
    expect(code).toBe(0);
  });

  it.if(analyze !== null)("systemd-analyze verify reads a binary and config in a directory with a space as one path each", async () => {
    const dir = `${await tempDir("llmroute-unit-")}/my dir`;
    await Bun.write(`${dir}/router.toml`, "");
    await Bun.write(`${dir}/llmroute`, await Bun.file(process.execPath).arrayBuffer());
    await Bun.spawn(["chmod", "755", `${dir}/llmroute`]).exited;
    const path = `${dir}/llmroute.service`;
    await Bun.write(path, renderUnit("systemd", { binary: `${dir}/llmroute`, config: `${dir}/router.toml` }));
    const proc = Bun.spawn([analyze!, "verify", "--man=no", path], { stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    expect(`${out}${err}`.split("\n").filter((l) => l.includes("llmroute.service"))).toEqual([]);
    expect(code).toBe(0);
  });
});
