import { resolve } from "node:path";
import { defineCommand } from "citty";
import quadlet from "../../deploy/llmroute.container" with { type: "text" };
import service from "../../deploy/llmroute.service" with { type: "text" };
import { LlmrouteError } from "../errors.ts";
import { ui } from "../ui.ts";

const DEFAULT_BINARY = "/usr/local/bin/llmroute";
const DEFAULT_CONFIG = "/etc/llmroute/router.toml";
const DEFAULT_QUADLET_BINARY = "%h/.local/bin/llmroute";
const QUADLET_CONFIG_MOUNT = "Volume=%h/.config/llmroute:/etc/llmroute:ro,Z";

/**
 * One word of a systemd command line (ExecStart=) as systemd reads it back (systemd.syntax(7)
 * "Quoting", systemd.service(5) "Command lines"): a word with a space, a quote, a backslash or
 * a character systemd treats specially is put in double quotes with C-style escapes; `%`
 * (a specifier) is written `%%` and `$` (a variable) `$$`, quoted or not.
 */
export function systemdWord(word: string): string {
  if (/[\x00-\x1f\x7f]/.test(word)) throw new LlmrouteError("usage", `units: ${JSON.stringify(word)}: a path with a control character cannot be written in a unit file`, { exitCode: 2 });
  const literal = word.replaceAll("%", "%%").replaceAll("$", "$$$$");
  return /^[A-Za-z0-9_@%$+=:,./-]+$/.test(literal) ? literal : `"${literal.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}

/**
 * The unit files in deploy/, with the binary and config paths a user asked for. Paths are
 * made absolute (systemd needs an absolute ExecStart; podman reads a relative Volume= source
 * as a named volume) against `cwd`.
 */
export function renderUnit(kind: "systemd" | "quadlet", paths: { binary?: string; config?: string } = {}, cwd = process.cwd()): string {
  const binary = paths.binary === undefined ? undefined : resolve(cwd, paths.binary);
  const config = paths.config === undefined ? undefined : resolve(cwd, paths.config);
  if (kind === "quadlet") {
    // Volume= is one value, spaces and all (podman's quadlet reads it whole: LookupAll, not
    // LookupAllArgs, in pkg/systemd/quadlet/quadlet.go); a `%` would be a specifier.
    let unit = binary ? quadlet.replaceAll(`${DEFAULT_QUADLET_BINARY}:`, () => `${binary.replaceAll("%", "%%")}:`) : quadlet;
    if (config) {
      // Mount that one file where Exec= reads it. A bind-mounted file keeps its inode: a
      // reload sees edits made in place, not a file replaced by rename (most editors).
      unit = unit.replace(
        QUADLET_CONFIG_MOUNT,
        () => `# router.toml is mounted as a file: after replacing it (most editors do), restart rather than reload.\nVolume=${config.replaceAll("%", "%%")}:${DEFAULT_CONFIG}:ro,Z`,
      );
    }
    return unit;
  }
  return service
    .replaceAll(`ExecStart=${DEFAULT_BINARY} `, () => `ExecStart=${systemdWord(binary ?? DEFAULT_BINARY)} `)
    .replaceAll(`--config ${DEFAULT_CONFIG}`, () => `--config ${systemdWord(config ?? DEFAULT_CONFIG)}`);
}

/**
 * Directories the systemd unit's sandbox hides, and the setting that hides them:
 * ProtectHome=yes makes /home, /root and /run/user empty and inaccessible; PrivateTmp=yes
 * gives the service its own empty /tmp and /var/tmp (systemd.exec(5)).
 */
const HIDDEN = [
  { dir: "/run/user", why: "ProtectHome=yes hides from the service" },
  { dir: "/home", why: "ProtectHome=yes hides from the service" },
  { dir: "/root", why: "ProtectHome=yes hides from the service" },
  { dir: "/var/tmp", why: "PrivateTmp=yes replaces with an empty directory for the service" },
  { dir: "/tmp", why: "PrivateTmp=yes replaces with an empty directory for the service" },
];

/** What the systemd unit's sandbox will hide from the paths given (printed on stderr). */
export function unitWarnings(kind: "systemd" | "quadlet", paths: { binary?: string; config?: string }, cwd = process.cwd()): string[] {
  if (kind !== "systemd") return [];
  return (["binary", "config"] as const).flatMap((which) => {
    const path = paths[which] === undefined ? undefined : resolve(cwd, paths[which]);
    const hidden = path === undefined ? undefined : HIDDEN.find((h) => path.startsWith(`${h.dir}/`));
    return hidden
      ? [`llmroute units: ${path} is under ${hidden.dir}, which ${hidden.why}; install the ${which} elsewhere (e.g. ${which === "binary" ? DEFAULT_BINARY : DEFAULT_CONFIG})`]
      : [];
  });
}

export default defineCommand({
  meta: { name: "units", description: "Print a systemd unit (or, with --quadlet, a Podman quadlet) for running llmroute as a service" },
  args: {
    quadlet: { type: "boolean", description: "Print a Podman quadlet .container instead of a systemd .service" },
    binary: { type: "string", description: `Path of the llmroute executable (default ${DEFAULT_BINARY}; quadlet: ${DEFAULT_QUADLET_BINARY} on the host)` },
    config: { type: "string", alias: "c", description: `Path of router.toml (default ${DEFAULT_CONFIG}; quadlet: the directory ~/.config/llmroute on the host)` },
  },
  run({ args }) {
    const kind = args.quadlet ? "quadlet" : "systemd";
    const paths = { binary: args.binary, config: args.config };
    for (const warning of unitWarnings(kind, paths)) ui.warn(warning);
    process.stdout.write(renderUnit(kind, paths));
    return 0;
  },
});
