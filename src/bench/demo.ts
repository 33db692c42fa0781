/**
 * `llmroute demo` (`npm run demo`): the first thing a new user runs. Two simulated
 * 3090-class replicas, time-scaled so the whole demo takes about a minute on two cores;
 * the seed's agent loop, cold burst and the two mixed, each with roundrobin, affinity and
 * hybrid; then the comparison and the path of the HTML report. Needs nothing but `npm ci`.
 * While it runs, the live dashboard of whichever router is running is at one address.
 */
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defineCommand } from "citty";
import { parseBenchArgs } from "./args.ts";
import { bench } from "./command.ts";
import { stderrProgress } from "./progress.ts";
import { simTarget } from "./targets.ts";

/**
 * Model time is about 600 s (agent ≈ 215, burst ≈ 185, mixed ≈ 180); at 0.08 that is ~48 s
 * real plus start-up. Smaller scales finish sooner but let fixed real costs (timers, HTTP,
 * ~7 ms a request) weigh more once divided by the scale.
 */
export const DEMO_TIME_SCALE = 0.08;

export default defineCommand({
  meta: { name: "demo", description: "Two simulated replicas, three policies, the seed's workloads: about a minute" },
  args: {
    "time-scale": { type: "string", description: `Sim speed (default ${DEMO_TIME_SCALE}; smaller is faster and noisier)` },
    report: { type: "string", description: "Where to write the HTML report (default: a file in the temp directory)" },
    json: { type: "string", description: "Also write every sample as JSON" },
  },
  async run({ args }) {
    const report = args.report || join(tmpdir(), `llmroute-demo-${Date.now()}.html`);
    const options = parseBenchArgs({
      sim: "2",
      "time-scale": args["time-scale"] || String(DEMO_TIME_SCALE),
      policies: "roundrobin,affinity,hybrid",
      oracle: false,
      workload: "agent,burst,mixed",
      report,
      ...(args.json ? { json: args.json } : {}),
    });
    const progress = stderrProgress();
    progress.line(
      "llmroute demo: 2 simulated RTX 3090-class replicas (122,636 KV tokens, ~4,000 prefill tokens/s each),\n" +
        "the same workloads through roundrobin, affinity and hybrid; times below are the modelled card's.",
    );
    // Each policy gets a fresh router; they take turns on one admin address, so the page
    // stays open across the arms and shows whichever policy is running.
    const admin = `127.0.0.1:${await freePort()}`;
    const target = await simTarget({ replicas: options.sim, timeScale: options.timeScale, adminListen: admin });
    progress.line(`Watch it live: http://${admin}/dashboard (each policy's router in turn)`);
    const { errors } = await bench(options, { out: (t) => console.log(t), progress, quietFiles: true }, target).finally(() => target.stop());
    console.log(
      [
        "",
        "Read it like this: roundrobin alternates replicas, so each warm turn re-prefills what the other card",
        "computed; affinity keeps conversations warm but puts a whole burst on one card; hybrid pins",
        "continuations and spreads one-shots, so it keeps the agent loop warm and the burst spread.",
        `HTML report (charts): ${report}${options.json ? `\nJSON (every sample): ${options.json}` : ""}`,
        "Next: `llmroute bench --sim 2` adds the shared-document (shared, pressured, llmd) and capacity workloads and the oracle;",
        "`llmroute bench --config router.toml` measures your own replicas.",
      ].join("\n"),
    );
    return errors > 0 ? 1 : 0;
  },
});

/** A port nothing listens on right now (the OS picks it; the routers reuse it in turn). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
