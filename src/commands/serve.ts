import { defineCommand } from "citty";
import { loadConfigFile } from "../config.ts";
import { startRouter } from "../proxy/server.ts";

export default defineCommand({
  meta: { name: "serve", description: "Run the router in front of the replicas in router.toml" },
  args: {
    config: { type: "string", alias: "c", description: "Config file", default: "router.toml" },
    listen: { type: "string", description: "Override server.listen (host:port; port 0 picks a free one)" },
  },
  async run({ args }) {
    const config = await loadConfigFile(args.config, {
      overrides: args.listen === undefined ? {} : { "server.listen": args.listen },
    });
    const running = await startRouter(config);
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once("SIGTERM", () => resolve("SIGTERM"));
      process.once("SIGINT", () => resolve("SIGINT"));
    });
    running.log.info("shutting down", { signal });
    await running.stop({ drainMs: config.server.drain_timeout_ms });
    return 0;
  },
});
