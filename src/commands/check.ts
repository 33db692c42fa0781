import { defineCommand } from "citty";
import { shownUrl } from "../_shown-url.ts";
import { DEFAULT_METRICS_PATH, describeConfig, loadConfigFile } from "../config.ts";
import { renderEngineReport, reportEngine } from "../engines/report.ts";
import { formatIssue } from "../errors.ts";
import { authHeaders } from "../fleet/watch.ts";
import { ui } from "../ui.ts";

export default defineCommand({
  meta: { name: "check", description: "Validate router.toml and print the resolved config (exit 2 on any error); --probe also asks each replica what it is" },
  args: {
    config: { type: "string", alias: "c", description: "Config file", default: "router.toml" },
    probe: {
      type: "boolean",
      description: "Ask each replica what engine it is and what the router cannot see there, with the flag that would show it (sends two 1-token requests each)",
    },
  },
  async run({ args }) {
    const config = await loadConfigFile(args.config);
    console.log(describeConfig(config));
    if (config.notes.length > 0) console.log(`\n${config.notes.map((n) => `# note: ${formatIssue(n)}`).join("\n")}`);
    console.log(`\n# ok: ${config.replicas.length} replica(s), policy ${config.routing.policy}`);
    if (!args.probe) return 0;
    console.log("\n# engines");
    // Up to 10 s per replica: say what is happening (stderr), the report follows on stdout.
    ui.start(`asking ${config.replicas.length} replica(s) what engine they run (two 1-token requests each)...`);
    const reports = await Promise.all(
      config.replicas.map((r) =>
        reportEngine(
          {
            name: r.name,
            url: r.url,
            headers: authHeaders(r),
            metricsPath: r.metrics ?? DEFAULT_METRICS_PATH,
            kvTokens: r.kv_tokens,
            ...(r.models[0] ? { model: r.models[0] } : {}),
            health: { path: r.health_path ?? config.health.path, own: r.health_path !== undefined },
          },
          fetch,
          Math.max(config.health.timeout_ms, 10_000),
          true,
        ),
      ),
    );
    for (const r of reports) console.log(shownUrl(renderEngineReport(r).join("\n")));
    // Degraded (1) when a replica cannot be reached: the config is valid, the fleet is not all there.
    return reports.every((r) => r.reachable) ? 0 : 1;
  },
});
