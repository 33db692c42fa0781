/**
 * A replica restarted in quiet hours: its active check demoted it
 * (connection refused) and its next passing check brings it back up, with no request
 * needed; `llmroute status` then exits 0. A replica demoted by failed requests is half-open
 * until a trial, and status says how long ago it was demoted. Real sim and router processes.
 */
import { afterAll, describe, expect, it } from "bun:test";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterProc, startSimProc, until, type RouterProc } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";

afterAll(killAll);

// Checks every second, with most of it to answer in: a loaded machine does not fail them.
const FAST_CHECKS = `[health]\ninterval = "1s"\ntimeout = "900ms"\n`;
const replicaStatus = async (router: RouterProc, name: string) =>
  ((await (await fetch(`${router.url}/status`)).json()) as StatusDocument).replicas.find((r) => r.name === name)!;

describe.concurrent("recovery without traffic", () => {
  it("a replica restarted (refused at its checks) is up at its next passing check, and `llmroute status` exits 0", async () => {
    const gpu0 = await startSimProc("gpu0");
    const port = new URL(gpu0.url).port;
    const router = await startRouterProc([gpu0], { toml: FAST_CHECKS });
    await gpu0.kill();
    await until(async () => (await replicaStatus(router, "gpu0")).state === "down", "gpu0 down", 30_000);
    expect(logRecords(router, "replica down").at(-1)).toMatchObject({ replica: "gpu0", reason: "health check: connection refused" });

    const again = await startSimProc("gpu0", ["--port", port]);
    expect(again.url).toBe(gpu0.url);
    const back = await until(async () => {
      const r = await replicaStatus(router, "gpu0");
      return r.state !== "down" && r;
    }, "gpu0 checked again", 30_000);
    expect(back).toMatchObject({ state: "up", healthy: true, warnings: [] });
    expect(logRecords(router, "replica up again: health check passed")).toHaveLength(1);
    const status = await runCli(["status", "--url", router.url]);
    expect({ code: status.code, stderr: status.stderr }).toEqual({ code: 0, stderr: "" });
    expect(status.stdout).toMatch(/^gpu0\s+up\s/m);
    expect(status.stdout).not.toContain("warnings:");
  }, 60_000);

  it("a replica demoted by failed requests is half-open until a trial; its warning says how long ago it was demoted", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimProc("gpu0"), startSimProc("gpu1")]);
    const router = await startRouterProc([gpu0, gpu1], { toml: `${FAST_CHECKS}failures = 1\n` });
    await gpu0.faults({ fail_next: 1, fail_status: 502 });
    const client = router.client();
    for (let i = 0; (await gpu0.state()).faulted_total === 0; i++) {
      await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `one-shot ${i}` }], max_tokens: 1 });
    }
    const half = await until(async () => {
      const r = await replicaStatus(router, "gpu0");
      return r.state === "half-open" && r;
    }, "gpu0 half-open", 30_000);
    expect(half.warnings).toEqual([expect.stringMatching(/^half-open: demoted \d+s ago \(HTTP 502\); its health check passes again, so its next request is a trial$/)]);
    const status = await runCli(["status", "--url", router.url]);
    expect(status.code).toBe(1);
    expect(status.stdout).toMatch(/^ {2}gpu0: half-open: demoted \d+s ago \(HTTP 502\)/m);
  }, 60_000);
});
