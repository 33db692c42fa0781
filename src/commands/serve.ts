import { defineCommand } from "citty";
import { LOG_FORMATS, loadConfigFile, type Config, type Listen } from "../config.ts";
import { listenError, LlmrouteError } from "../errors.ts";
import { createLog } from "../log.ts";
import { startRouter, type RouterServer } from "../proxy/server.ts";
import { loadTerminal } from "../reporters/live.ts";
import { ui } from "../ui.ts";

export default defineCommand({
  meta: { name: "serve", description: "Run the router in front of the replicas in router.toml" },
  args: {
    config: { type: "string", alias: "c", description: "Config file", default: "router.toml" },
    listen: { type: "string", description: "Override server.listen (host:port; port 0 picks a free one)" },
    "log-format": { type: "string", description: `Override server.log_format (${LOG_FORMATS.join(" | ")})` },
  },
  async run({ args }) {
    const overrides: Record<string, { value: unknown; flag: string }> = {};
    if (args.listen !== undefined) overrides["server.listen"] = { value: args.listen, flag: "--listen" };
    if (args["log-format"] !== undefined) overrides["server.log_format"] = { value: args["log-format"], flag: "--log-format" };
    const load = () => loadConfigFile(args.config, { overrides });
    const config = await load();
    const running = await listen(config, args.listen !== undefined);

    // SIGHUP reloads router.toml; an invalid file is rejected and the old config kept.
    process.on("SIGHUP", async () => {
      try {
        await running.reload(await load());
      } catch (error) {
        const message = error instanceof LlmrouteError ? error.message : String(error);
        running.log.error("reload rejected; keeping the running config", { error: message });
      }
    });
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once("SIGTERM", () => resolve("SIGTERM"));
      process.once("SIGINT", () => resolve("SIGINT"));
    });
    const drainMs = running.config.server.drain_timeout_ms;
    running.log.info("draining: no new connections; in-flight requests may finish", { signal, drain_ms: drainMs });
    await running.stop({ drainMs });
    running.log.info("stopped");
    return 0;
  },
});

/** Start the router; a bind failure becomes one clear error naming the listener and where its address came from. */
async function listen(config: Config, listenFlag: boolean): Promise<RouterServer> {
  try {
    // The router's log takes the command's level (--log-level, CONSOLA_LEVEL): debug shows
    // its debug lines, warn keeps only what needs a look.
    const format = config.server.log_format;
    const terminal = format !== "json" && process.stderr.isTTY ? await loadTerminal() : undefined;
    return await startRouter(config, { log: createLog({ format, level: ui.level, ...(terminal ? { terminal } : {}) }) });
  } catch (error) {
    const { listen, admin_listen: admin } = config.server;
    // Bun says only "Failed to start server. Is port N in use?": match N to a listener.
    const port = Number(/port (\d+)/.exec(String((error as Error)?.message))?.[1]);
    const isAdmin = admin !== undefined && port === admin.port && port !== listen.port;
    const address = isAdmin
      ? `${hostPort(admin)} (server.admin_listen in ${config.file})`
      : `${hostPort(listen)} (${listenFlag ? "--listen" : `server.listen in ${config.file}`})`;
    const hint = isAdmin ? "choose another server.admin_listen" : "choose another with --listen or server.listen (port 0 picks a free one)";
    throw listenError(error, address, hint) ?? error;
  }
}

function hostPort(l: Listen): string {
  return `${l.host.includes(":") ? `[${l.host}]` : l.host}:${l.port}`;
}
