import { defineCommand } from "citty";
import { describeConfig, loadConfigFile } from "../config.ts";
import { formatIssue } from "../errors.ts";

export default defineCommand({
  meta: { name: "check", description: "Validate router.toml and print the resolved config (exit 2 on any error)" },
  args: {
    config: { type: "string", alias: "c", description: "Config file", default: "router.toml" },
  },
  async run({ args }) {
    const config = await loadConfigFile(args.config);
    console.log(describeConfig(config));
    if (config.notes.length > 0) console.log(`\n${config.notes.map((n) => `# note: ${formatIssue(n)}`).join("\n")}`);
    console.log(`\n# ok: ${config.replicas.length} replica(s), policy ${config.routing.policy}`);
    return 0;
  },
});
