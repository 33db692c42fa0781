import { defineCommand } from "citty";
import quadlet from "../../deploy/llmroute.container" with { type: "text" };
import service from "../../deploy/llmroute.service" with { type: "text" };

const DEFAULT_BINARY = "/usr/local/bin/llmroute";
const DEFAULT_CONFIG = "/etc/llmroute/router.toml";
const DEFAULT_QUADLET_BINARY = "%h/.local/bin/llmroute";

/** The unit files in deploy/, with the binary and config paths a user asked for. */
export function renderUnit(kind: "systemd" | "quadlet", paths: { binary?: string; config?: string } = {}): string {
  if (kind === "quadlet") {
    return paths.binary ? quadlet.replaceAll(`${DEFAULT_QUADLET_BINARY}:`, `${paths.binary}:`) : quadlet;
  }
  return service
    .replaceAll(`ExecStart=${DEFAULT_BINARY} `, `ExecStart=${paths.binary ?? DEFAULT_BINARY} `)
    .replaceAll(`--config ${DEFAULT_CONFIG}`, `--config ${paths.config ?? DEFAULT_CONFIG}`);
}

export default defineCommand({
  meta: { name: "units", description: "Print a systemd unit (or, with --quadlet, a Podman quadlet) for running llmroute as a service" },
  args: {
    quadlet: { type: "boolean", description: "Print a Podman quadlet .container instead of a systemd .service" },
    binary: { type: "string", description: `Path of the llmroute executable (default ${DEFAULT_BINARY}; quadlet: ${DEFAULT_QUADLET_BINARY} on the host)` },
    config: { type: "string", description: `Path of router.toml for the systemd unit (default ${DEFAULT_CONFIG})` },
  },
  run({ args }) {
    process.stdout.write(renderUnit(args.quadlet ? "quadlet" : "systemd", { binary: args.binary, config: args.config }));
    return 0;
  },
});
