/**
 * System tests need components that `npm ci` cannot bring (a browser, redis-server). When
 * one is missing the test fails and says what to install — it never skips, so a green
 * run always means the tests ran.
 */
import { existsSync } from "node:fs";

/**
 * The path of `command` (a name looked up on PATH, or an absolute path), or an error that
 * names the Debian package to install.
 */
export function requireCommand(command: string, install: string): string {
  const path = command.startsWith("/") ? (existsSync(command) ? command : null) : Bun.which(command);
  if (!path) {
    throw new Error(
      `${command} not found: this system test needs it. Install it with \`${install}\` (Debian; .ci/run installs it when missing), then run \`npm run test:system\` again.`,
    );
  }
  return path;
}
