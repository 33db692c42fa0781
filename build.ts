/**
 * `npm run build`: compile the CLI into one self-contained executable, dist/llmroute.
 * Pass `--target bun-linux-arm64` (etc.) to cross-compile. `npm run build` first runs
 * scripts/check-bun.mjs under Node: if Bun's postinstall was skipped (npm ci
 * --ignore-scripts) this file never gets to run, so the check happens before it.
 */
import { parseArgs } from "node:util";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { target: { type: "string" }, outfile: { type: "string", default: "dist/llmroute" } },
});

const result = await Bun.build({
  // The bench's sims on threads (--sim-threads) load this one as a Worker: an entrypoint of its own.
  entrypoints: ["src/cli.ts", "src/sim/thread-worker.ts"],
  minify: true,
  compile: {
    outfile: values.outfile!,
    ...(values.target ? { target: values.target as Bun.Build.CompileTarget } : {}),
  },
});
if (!result.success) {
  for (const log of result.logs) console.error(log);
  process.exit(1);
}
for (const output of result.outputs) console.log(`built ${output.path}`);
