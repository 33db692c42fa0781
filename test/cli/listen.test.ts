/**
 * A port in use gives one clear message and exit 2, the same from `serve` and `sim`,
 * naming the address and where it came from.
 */
import { afterAll, expect, it } from "bun:test";
import { until } from "../helpers/fleet.ts";
import { killAll, runCli, spawnCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

const taken = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("taken") });
afterAll(async () => {
  await taken.stop(true);
  await killAll();
});
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
  expect(stderr.trim()).toBe(`cannot listen on ${busy} (--listen): address in use (another process listens there); choose another with --listen or server.listen (port 0 picks a free one)`);
});

it("serve binds before anything else: on a busy port it reads no state file and checks no replica", async () => {
  const engine = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => Response.json({ status: "ok" }) });
  try {
    const dir = await tempDir("llmroute-listen-");
    await Bun.write(`${dir}/state`, "not a state file");
    await Bun.write(`${dir}/router.toml`, `[routing]\nstate_file = "${dir}/state"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:${engine.port}"\nmodels = ["m"]\n`);
    const { code, stdout, stderr } = await runCli(["serve", "--config", `${dir}/router.toml`, "--listen", busy, "--log-format", "json"]);
    expect(code).toBe(2);
    // Before: "routing state not restored; starting cold" and "replica up", then the error.
    expect({ stdout, stderr: stderr.trim() }).toEqual({
      stdout: "",
      stderr: `cannot listen on ${busy} (--listen): address in use (another process listens there); choose another with --listen or server.listen (port 0 picks a free one)`,
    });
    expect(await Bun.file(`${dir}/state`).text()).toBe("not a state file");
  } finally {
    await engine.stop(true);
  }
});

it("while it starts (bound, its replicas not yet checked): /health answers 503 at once; a request sent then is served once it has started", async () => {
  let checked!: () => void;
  const checking = new Promise<void>((resolve) => (checked = resolve));
  let asked = 0;
  const engine = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/health") {
        asked++;
        await checking;
        return Response.json({ status: "ok" });
      }
      return Response.json({ id: "c1", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }] });
    },
  });
  // A port to ask for: the OS picks a free one, the router binds it in turn.
  const probe = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
  const port = probe.port!;
  await probe.stop(true);
  try {
    const dir = await tempDir("llmroute-listen-");
    await Bun.write(`${dir}/router.toml`, `[health]\ninterval = "60s"\ntimeout = "30s"\n[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:${engine.port}"\nmodels = ["m"]\n`);
    const router = spawnCli(["serve", "--config", `${dir}/router.toml`, "--listen", `127.0.0.1:${port}`, "--log-format", "json"]);
    const url = `http://127.0.0.1:${port}`;
    // Its first check is waiting for the engine's answer, and it is bound already.
    const health = await until(async () => asked > 0 && (await fetch(`${url}/health`).catch(() => undefined)), "the router bound while checking", 15_000);
    expect([health.status, await health.json()]).toEqual([503, { status: "starting", healthy: [], replicas: 1 }]);
    // Sent before the check ends (nothing listened there before the bind came first).
    const request = fetch(`${url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
    checked();
    await router.waitFor(/listening on/);
    const res = await request;
    expect([res.status, res.headers.get("x-llmroute-replica")]).toEqual([200, "gpu0"]);
    expect((await fetch(`${url}/health`)).status).toBe(200);
  } finally {
    checked();
    await engine.stop(true);
  }
}, 30_000);

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
