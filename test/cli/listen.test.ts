/**
 * A port in use gives one clear message and exit 2, the same from `serve` and `sim`,
 * naming the address and where it came from.
 */
import { afterAll, expect, it } from "bun:test";
import { runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

const taken = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("taken") });
afterAll(() => taken.stop(true));
const port = taken.port!;
const busy = `127.0.0.1:${port}`;

async function config(extra = ""): Promise<string> {
  const dir = await tempDir("llmroute-listen-");
  await Bun.write(`${dir}/router.toml`, `${extra}[health]\ninterval = "60s"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:9"\n`);
  return `${dir}/router.toml`;
}

it("serve --listen on a busy port", async () => {
  const { code, stderr } = await runCli(["serve", "--config", await config(), "--listen", busy]);
  expect(code).toBe(2);
  // Its replica is down too (nothing on port 9): that warning comes first, then the error.
  expect(stderr.trim().split("\n").at(-1)).toBe(`cannot listen on ${busy} (--listen): address in use (another process listens there); choose another with --listen or server.listen (port 0 picks a free one)`);
});

it("serve with server.listen on a busy port names the file", async () => {
  const path = await config(`[server]\nlisten = "${busy}"\n`);
  const { code, stderr } = await runCli(["serve", "--config", path]);
  expect(code).toBe(2);
  expect(stderr).toContain(`cannot listen on ${busy} (server.listen in ${path}): address in use`);
});

it("serve with server.admin_listen on a busy port names the admin listener", async () => {
  const path = await config(`[server]\nadmin_listen = "${busy}"\n`);
  const { code, stderr } = await runCli(["serve", "--config", path, "--listen", "127.0.0.1:0"]);
  expect(code).toBe(2);
  expect(stderr).toContain(`cannot listen on ${busy} (server.admin_listen in ${path}): address in use (another process listens there); choose another server.admin_listen`);
});

it("sim --port on a busy port: the same message and code", async () => {
  const { code, stdout, stderr } = await runCli(["sim", "--port", String(port)]);
  expect(code).toBe(2);
  expect(stdout).toBe("");
  expect(stderr.trim()).toBe(`cannot listen on ${busy} (sim gpu0): address in use (another process listens there); choose another with --port (0 picks a free one)`);
});

it("a sim fleet names the replica that could not listen", async () => {
  const { code, stderr } = await runCli(["sim", "--replicas", "2", "--base-port", String(port - 1)]);
  expect(code).toBe(2);
  // gpu1 lands on the busy port (gpu0's, one below, is almost always free)
  expect(stderr).toMatch(/cannot listen on 127\.0\.0\.1:\d+ \(sim gpu[01]\): address in use/);
  expect(stderr).toContain("choose another with --base-port");
});
