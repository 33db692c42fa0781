import { defineCommand } from "citty";
import { LOG_FORMATS, loadConfigFile } from "../config.ts";
import { LlmrouteError } from "../errors.ts";
import { startRouter } from "../proxy/server.ts";

export default defineCommand({
  meta: { name: "serve", description: "Run the router in front of the replicas in router.toml" },
  args: {
    config: { type: "string", alias: "c", description: "Config file", default: "router.toml" },
    listen: { type: "string", description: "Override server.listen (host:port; port 0 picks a free one)" },
    "log-format": { type: "string", description: `Override server.log_format (${LOG_FORMATS.join(" | ")})` },
  },
  async run({ args }) {
    const overrides: Record<string, unknown> = {};
    if (args.listen !== undefined) overrides["server.listen"] = args.listen;
    if (args["log-format"] !== undefined) overrides["server.log_format"] = args["log-format"];
    const load = () => loadConfigFile(args.config, { overrides });
    const running = await startRouter(await load());

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
