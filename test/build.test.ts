/**
 * `bun run build` yields one executable that works on its own: version, help, the
 * embedded unit files and dashboard page, and a real request through a compiled router
 * to a compiled sim.
 */
import { afterAll, beforeAll, expect, it } from "bun:test";
import pkg from "../package.json" with { type: "json" };
import { tempDir } from "./helpers/tmp.ts";

const root = new URL("..", import.meta.url).pathname;
let exe: string;
const procs: ReturnType<typeof Bun.spawn>[] = [];

beforeAll(async () => {
  const dir = await tempDir("llmroute-build-");
  exe = `${dir}/llmroute`;
  const build = Bun.spawn([process.execPath, "build.ts", "--outfile", exe], { cwd: root, stdout: "pipe", stderr: "pipe" });
  expect(await build.exited).toBe(0);
});
afterAll(() => procs.forEach((p) => p.kill("SIGKILL")));

async function run(args: string[], cwd = "/tmp") {
  const p = Bun.spawn([exe, ...args], { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { stdout, stderr, code };
}

/** Start the compiled binary and resolve with the first match of `pattern` on stderr. */
async function start(args: string[], pattern: RegExp): Promise<string> {
  const p = Bun.spawn([exe, ...args], { cwd: "/tmp", stdout: "ignore", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  procs.push(p);
  let seen = "";
  for await (const chunk of p.stderr) {
    seen += new TextDecoder().decode(chunk);
    const m = seen.match(pattern);
    if (m) return m[1]!;
  }
  throw new Error(`exited before ${pattern}: ${seen}`);
}

it("--version and --help", async () => {
  expect((await run(["--version"])).stdout.trim()).toBe(pkg.version);
  const help = await run(["--help"]);
  expect(help.code).toBe(0);
  for (const command of ["serve", "check", "status", "units", "sim", "probe", "bench", "demo"]) expect(help.stdout).toContain(command);
  expect((await run(["serve", "--help"])).stdout).toContain("--config");
});

it("carries the unit files inside", async () => {
  expect((await run(["units"])).stdout).toBe(await Bun.file(`${root}deploy/llmroute.service`).text());
});

it("a compiled router serves a compiled sim", async () => {
  const sim = await start(["sim", "--port", "0", "--profile", "tiny"], /listening on (http:\/\/\S+)/);
  const dir = await tempDir("llmroute-build-cfg-");
  await Bun.write(`${dir}/router.toml`, `[[replica]]\nname = "gpu0"\nurl = "${sim}"\n`);
  expect((await run(["check", "--config", `${dir}/router.toml`])).code).toBe(0);
  const router = await start(["serve", "--config", `${dir}/router.toml`, "--listen", "127.0.0.1:0", "--log-format", "json"], /listening on (http:\/\/[^\s"]+)/);
  const res = await fetch(`${router}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-model", max_tokens: 2, messages: [{ role: "user", content: "hi" }] }),
  });
  expect(res.status).toBe(200);
  expect(res.headers.get("x-llmroute-replica")).toBe("gpu0");
  // The dashboard page is embedded too.
  expect(await (await fetch(`${router}/dashboard`)).text()).toContain("<title>llmroute dashboard</title>");
});
