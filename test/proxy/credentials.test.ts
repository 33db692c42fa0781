/**
 * A replica URL with credentials (`http://user:pass@host`, an engine behind a gateway with
 * Basic auth): sent upstream as configured — Bun's fetch makes them an `Authorization: Basic`
 * header, checked here by a gate in front of a sim that refuses anything else — and shown
 * nowhere: /status, /dashboard/data, `llmroute check`, `llmroute status`, the log, errors.
 */
import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { shownUrl } from "../../src/_shown-url.ts";
import { logRecords, startRouterInProcess, startSimInProcess, type LocalRouter, type LocalSim } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";

const USER = "router";
const PASSWORD = "s3cr@t:pw";
/** As written in a URL: `@` and `:` in a password are percent-encoded. */
const USERINFO = `${USER}:${encodeURIComponent(PASSWORD)}`;
const EXPECTED = `Basic ${btoa(`${USER}:${PASSWORD}`)}`;

let sim: LocalSim;
let gate: ReturnType<typeof Bun.serve>;
let router: LocalRouter;
const seen: (string | null)[] = [];

beforeAll(async () => {
  sim = await startSimInProcess("gpu0");
  // The engine's gateway: 401 without the right Basic credentials, else the sim's answer.
  gate = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const auth = req.headers.get("authorization");
      seen.push(auth);
      if (auth !== EXPECTED) return Response.json({ error: { message: "unauthorized" } }, { status: 401 });
      const url = new URL(req.url);
      const headers = new Headers(req.headers);
      headers.delete("authorization");
      return fetch(`${sim.url}${url.pathname}${url.search}`, { method: req.method, headers, body: req.body });
    },
  });
  router = await startRouterInProcess([{ name: "gpu0", url: `http://${USERINFO}@127.0.0.1:${gate.port}/v1` }]);
});
afterAll(async () => {
  await killAll();
  gate?.stop(true);
});

describe("credentials in a replica URL", () => {
  it("are sent upstream as Basic auth: a request through the router is answered", async () => {
    const done = await router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    expect(done.choices).toHaveLength(1);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.filter((a) => a !== EXPECTED)).toEqual([]);
  });

  it("are not in /status or /dashboard/data: the URL shows *** for them", async () => {
    for (const path of ["/status", "/dashboard/data"]) {
      const text = await (await fetch(`${router.url}${path}`)).text();
      expect(text).not.toContain(USER);
      expect(text).not.toContain(encodeURIComponent(PASSWORD));
      expect((JSON.parse(text) as { replicas: { url: string }[] }).replicas[0]!.url).toBe(`http://***@127.0.0.1:${gate.port}`);
    }
  });

  it("are not in the router's log (the note that /v1 was taken off names the URL)", () => {
    expect(router.lines.join("\n")).not.toContain(encodeURIComponent(PASSWORD));
    expect(logRecords(router).find((r) => String(r.msg).includes("/v1"))?.value).toBe(`http://***@127.0.0.1:${gate.port}/v1`);
  });

  it("are not in llmroute check's output, with or without --probe (which reaches the engine with them)", async () => {
    const { code, stdout, stderr } = await runCli(["check", "--probe", "--config", router.configPath]);
    expect(`${stdout}${stderr}`).not.toContain(encodeURIComponent(PASSWORD));
    expect(stdout).toContain(`url = "http://***@127.0.0.1:${gate.port}"`);
    expect(stdout).toContain(`gpu0  http://***@127.0.0.1:${gate.port}`);
    expect(stdout).not.toContain("unreachable");
    expect(code).toBe(0);
  });

  it("are not in llmroute status's error when the router cannot be read", async () => {
    const { code, stderr } = await runCli(["status", "--url", `http://${USERINFO}@127.0.0.1:1`]);
    expect(code).toBe(2);
    expect(stderr).toContain("status: cannot read http://***@127.0.0.1:1/status: connection refused");
    expect(stderr).not.toContain(encodeURIComponent(PASSWORD));
  });
});

describe("shownUrl", () => {
  it.each([
    ["http://u:p@h:1/x", "http://***@h:1/x"],
    ["https://token@gw/team-a", "https://***@gw/team-a"],
    ["http://h:1/path@not-userinfo", "http://h:1/path@not-userinfo"],
    ["error reaching http://a:b@h:1 and rediss://:pw@r:6379", "error reaching http://***@h:1 and rediss://***@r:6379"],
    ["no url here", "no url here"],
  ])("%s → %s", (text, shown) => expect(shownUrl(text)).toBe(shown));
});
