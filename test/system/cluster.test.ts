/**
 * Several router instances sharing one view through a real redis-server (started here on a
 * free port, no persistence; LLMROUTE_TEST_REDIS_SERVER=valkey-server runs the same tests
 * against Valkey). Every router is a real `llmroute serve` process in front of `llmroute sim`
 * replicas, driven by the official openai client as a load balancer would: each request to
 * the next instance.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { rm } from "node:fs/promises";
import OpenAI from "openai";
import { startRedisServer, type RedisServer } from "../../src/cluster/redis-server.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { logRecords, startRouterProc, startSimProc, until, type RouterProc, type SimProc } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";
import { requireCommand } from "./_require.ts";
import { tempDir } from "../helpers/tmp.ts";

const REDIS_BINARY = process.env.LLMROUTE_TEST_REDIS_SERVER ?? "redis-server";
const SALT = `cluster-${crypto.randomUUID()}`;
const TIMEOUT = 60_000;

let sims: SimProc[] = [];
const redises: RedisServer[] = [];

/** A fresh pair of sims and a Redis for each test (afterEach kills every process). */
async function redis(): Promise<RedisServer> {
  sims = await Promise.all([startSimProc("gpu0"), startSimProc("gpu1")]);
  const binary = requireCommand(REDIS_BINARY, REDIS_BINARY === "redis-server" ? "apt-get install -y redis-server" : `install ${REDIS_BINARY}`);
  const server = await startRedisServer({ binary });
  redises.push(server);
  return server;
}

/** `n` router processes named r0…r(n-1), sharing `server`. */
async function routers(n: number, server: RedisServer, extra = "", first = 0): Promise<RouterProc[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => router(`r${first + i}`, server, extra)));
}

function router(name: string, server: RedisServer, extra = ""): Promise<RouterProc> {
  return startRouterProc(
    sims.map((s) => ({ name: s.name, url: s.url })),
    { toml: `[cluster]\nredis = "${server.url}"\nname = "${name}"\n${extra}` },
  );
}

async function status(r: RouterProc): Promise<StatusDocument> {
  return (await (await fetch(`${r.url}/status`)).json()) as StatusDocument;
}

const client = (r: RouterProc) => r.client();
const where = (response: Response) => ({ replica: response.headers.get("x-llmroute-replica"), route: response.headers.get("x-llmroute-route") });

/** One chat turn; the conversation grows by the reply and the next user message. */
async function turn(r: RouterProc, messages: OpenAI.ChatCompletionMessageParam[], next: string) {
  const { data, response } = await client(r).chat.completions.create({ model: "sim-model", messages, max_tokens: 4 }).withResponse();
  messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" }, { role: "user", content: next });
  return { ...where(response), cached: data.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
}

function conversation(label: string): OpenAI.ChatCompletionMessageParam[] {
  return [
    { role: "system", content: `${SALT} ${label}\n${"You are a careful agent working through a task. ".repeat(20)}` },
    { role: "user", content: `${label}: start` },
  ];
}

afterEach(async () => {
  await killAll();
  await Promise.all(redises.splice(0).map((r) => r.stop("SIGKILL")));
});

afterAll(async () => {
  await killAll();
});

describe("instances agree", () => {
  it.each([2, 4])("%i instances: every turn of a conversation lands on its owner, whichever instance gets it", async (n) => {
    const server = await redis();
    const fleet = await routers(n, server);
    await until(async () => (await Promise.all(fleet.map(status))).every((s) => s.cluster?.instances.length === n), `${n} instances to see each other`);

    // Four conversations, interleaved; each request goes to the next instance. (One at a time:
    // concurrent turns may leave their owner by design, when its queue costs more.)
    const labels = ["alpha", "beta", "gamma", "delta"];
    const conversations = labels.map((label) => conversation(`${label}-${n}`));
    const results: Awaited<ReturnType<typeof turn>>[][] = labels.map(() => []);
    let next = 0;
    for (let t = 0; t < 6; t++) {
      for (const [c, label] of labels.entries()) results[c]!.push(await turn(fleet[next++ % n]!, conversations[c]!, `${label} step ${t}`));
    }
    for (const turns of results) {
      const owner = turns[0]!.replica;
      expect(turns.slice(1).map((t) => [t.replica, t.route])).toEqual(turns.slice(1).map(() => [owner, "pin"]));
      // The engine confirms: every later turn found the earlier ones in its cache.
      for (const t of turns.slice(1)) expect(t.cached).toBeGreaterThan(0);
    }

    // /status and `llmroute status` show the cluster.
    const doc = await status(fleet[0]!);
    expect(doc.cluster).toMatchObject({ state: "up", name: "r0", namespace: "llmroute", backlog_events: 0 });
    expect(doc.cluster!.instances.map((i) => i.name).sort()).toEqual(fleet.map((_, i) => `r${i}`).sort());
    expect(doc.cluster!.events.applied).toBeGreaterThan(0);
    const printed = await runCli(["status", "--url", fleet[0]!.url]);
    expect(printed.code).toBe(0);
    expect(printed.stdout).toContain(`cluster llmroute on ${server.url} · connected · ${n} instances`);
    expect(printed.stdout).toMatch(/INSTANCE\s+LAST HEARTBEAT\s+SYNC LAG\s+INFLIGHT/);
    expect(printed.stdout).toMatch(/r0 \(this\)/);
    const metrics = await (await fetch(`${fleet[0]!.url}/metrics`)).text();
    expect(metrics).toContain("llmroute_cluster_connected 1");
    expect(metrics).toContain(`llmroute_cluster_instances ${n}`);
  }, TIMEOUT);

  it("a Responses API chain hops instances and stays sticky to the replica holding its state", async () => {
    const server = await redis();
    const fleet = await routers(4, server);
    // The follow-up goes out the moment the previous response ends: it can outrun the stream,
    // and the instance then asks Redis for the owner.
    let previous = await client(fleet[0]!).responses.create({ model: "sim-model", input: `${SALT} remember the number 7`, max_output_tokens: 2 }).withResponse();
    const owner = where(previous.response).replica;
    for (let i = 1; i <= 8; i++) {
      const next = await client(fleet[i % 4]!)
        .responses.create({ model: "sim-model", input: `and then ${i}`, previous_response_id: previous.data.id, max_output_tokens: 2 })
        .withResponse();
      expect(where(next.response)).toEqual({ replica: owner, route: "sticky" });
      expect(next.data.usage?.input_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
      previous = next;
    }
  }, TIMEOUT);
});

describe("failure semantics", () => {
  /** Conversations alternating between instances until stopped; counts requests and errors. */
  function traffic(fleet: RouterProc[], workers: number) {
    const errors: string[] = [];
    let requests = 0;
    let stop = false;
    const done = Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        for (let c = 0; !stop; c++) {
          const messages = conversation(`worker ${w} conversation ${c}`);
          for (let t = 0; t < 4 && !stop; t++) {
            try {
              await turn(fleet[(w + t) % fleet.length]!, messages, `step ${t}`);
              requests++;
            } catch (error) {
              errors.push(String(error));
            }
          }
        }
      }),
    );
    return {
      errors,
      get requests() {
        return requests;
      },
      async stop() {
        stop = true;
        await done;
      },
    };
  }

  it("Redis killed mid-traffic: zero failed requests, a warning and a metric; restarted: the instances converge", async () => {
    const server = await redis();
    const [a, b] = await routers(2, server);
    const load = traffic([a!, b!], 3);
    await until(() => load.requests >= 20 || undefined, "traffic to flow");

    await server.stop("SIGKILL");
    await until(async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.state !== "up"), "both instances to notice Redis is gone");
    const during = load.requests;
    await until(() => load.requests >= during + 20 || undefined, "traffic to keep flowing without Redis");
    const doc = await status(a!);
    expect(doc.warnings.some((w) => w.startsWith(`cluster: Redis ${server.url} unreachable since`))).toBe(true);
    expect(await (await fetch(`${a!.url}/metrics`)).text()).toContain("llmroute_cluster_connected 0");
    expect((await runCli(["status", "--url", a!.url])).code).toBe(1);
    expect(logRecords(a!, "cluster: Redis unreachable; routing on this instance's own view")).toHaveLength(1);

    // Learned while Redis is away: a conversation only `a` has seen.
    const away = conversation("started while Redis was away");
    const first = await turn(a!, away, "second step");
    await turn(a!, away, "third step");

    await server.restart();
    const restarted = performance.now();
    await until(
      async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.state === "up" && s.cluster.backlog_events === 0),
      "both instances to reconnect and share their backlog",
    );
    const converged = performance.now() - restarted;
    // What `a` learned during the outage reached `b`.
    await until(async () => {
      const s = await status(b!);
      return s.cluster!.events.applied > 0 && s.cluster!.instances.length === 2;
    }, "b to apply a's backlog");
    expect(await turn(b!, away, "fourth step")).toMatchObject({ replica: first.replica, route: "pin" });
    await load.stop();
    expect(load.errors).toEqual([]);
    expect(converged).toBeLessThan(5_000);
    expect(logRecords(a!, "cluster: Redis lost the shared state (restarted empty?); re-sharing this instance's view")).toHaveLength(1);
  }, TIMEOUT);

  it("Redis frozen (a hung or partitioned server): requests keep flowing; thawed: back in sync", async () => {
    const server = await redis();
    const [a, b] = await routers(2, server);
    const load = traffic([a!, b!], 2);
    await until(() => load.requests >= 10 || undefined, "traffic to flow");
    server.pause();
    const frozen = load.requests;
    await until(async () => (await status(a!)).cluster?.state !== "up", "a to give up on the frozen Redis");
    await until(() => load.requests >= frozen + 20 || undefined, "traffic to keep flowing while Redis is frozen");
    server.resume();
    await until(
      async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.state === "up" && s.cluster.backlog_events === 0),
      "both instances back in sync",
    );
    await load.stop();
    expect(load.errors).toEqual([]);
  }, TIMEOUT);

  it("an instance killed mid-request leaves no stuck in-flight count; its replacement catches up before it serves", async () => {
    const server = await redis();
    const extra = `snapshot_interval = "1s"\n`;
    const [a, b] = await routers(2, server, extra);
    // Conversations the replacement must know.
    const known = await Promise.all(
      ["one", "two"].map(async (label) => {
        const messages = conversation(`known ${label}`);
        const first = await turn(a!, messages, "second");
        await turn(b!, messages, "third");
        return { messages, owner: first.replica };
      }),
    );

    // A long answer in flight through b when it dies.
    const long = client(b!).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${SALT} a long story` }], max_tokens: 3000, stream: true });
    const streaming = long.then(async (stream) => {
      for await (const _ of stream);
    }).catch(() => "cut off");
    await until(async () => (await status(a!)).cluster?.instances.find((i) => i.name === "r1")?.inflight === 1, "a to see b's request in flight");
    await b!.kill("SIGKILL");
    const killed = performance.now();
    await until(async () => (await status(a!)).cluster?.instances.length === 1, "a to drop the dead instance");
    const expiredAfter = performance.now() - killed;
    expect(expiredAfter).toBeLessThan(5_000);
    expect(await streaming).toBe("cut off");
    expect(await (await fetch(`${a!.url}/metrics`)).text()).toContain("llmroute_cluster_instances 1");
    await a!.waitFor(/cluster: instance stopped reporting; its in-flight counts are dropped.*"instance":"r1"/);

    // The replacement starts from the snapshot and the stream since it.
    await until(async () => (await status(a!)).cluster?.snapshot ?? undefined, "a snapshot in Redis");
    const replacement = await router("r1", server, extra);
    const joined = logRecords(replacement, "cluster: joined");
    expect(joined).toHaveLength(1);
    const caught = (await status(replacement)).cluster!.catch_up!;
    expect(caught).toMatchObject({ complete: true });
    expect(caught.restored_entries).toBeGreaterThan(0);
    for (const k of known) expect(await turn(replacement, k.messages, "fourth")).toMatchObject({ replica: k.owner, route: "pin" });
  }, TIMEOUT);
});

describe("llmroute bench --routers", () => {
  it("4 instances per arm share a redis-server the bench starts; every agent turn after the first is pinned", async () => {
    requireCommand("redis-server", "apt-get install -y redis-server");
    const json = `/tmp/llmroute-bench-routers-${crypto.randomUUID()}.json`;
    const out = await runCli([
      "bench", "--routers", "4", "--workload", "agent", "--policies", "hybrid", "--no-oracle",
      "--time-scale", "0.05", "--context-tokens", "6000", "--turns", "6", "--turn-tokens", "400", "--reply-tokens", "8", "--system-tokens", "500",
      "--json", json,
    ]);
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("router instances: 4 per arm, sharing a redis-server started by the bench; requests spread round-robin");
    type Workloads = { arms: { samples: { replica: string; route: string; status: number }[] }[] }[];
    const result = (await Bun.file(json).json()) as { options: { routers: number }; runs: { workloads: Workloads }[] };
    expect(result.options.routers).toBe(4);
    const turns = result.runs[0]!.workloads[0]!.arms[0]!.samples;
    expect(turns).toHaveLength(6);
    expect(turns.every((t) => t.status === 200)).toBe(true);
    expect(turns.slice(1).map((t) => [t.replica, t.route])).toEqual(turns.slice(1).map(() => [turns[0]!.replica, "pin"]));
    await rm(json, { force: true });
  }, TIMEOUT);
});

describe("rediss://", () => {
  it("instances reach a TLS-only Redis whose private CA is given by NODE_EXTRA_CA_CERTS, and share state over it", async () => {
    const binary = requireCommand(REDIS_BINARY, "apt-get install -y redis-server");
    const openssl = requireCommand("openssl", "apt-get install -y openssl");
    const dir = await tempDir("llmroute-tls-");
    const made = Bun.spawnSync([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", `${dir}/key.pem`, "-out", `${dir}/cert.pem`, "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"], { stderr: "pipe" });
    expect(made.exitCode).toBe(0);
    sims = await Promise.all([startSimProc("gpu0"), startSimProc("gpu1")]);
    const server = await startRedisServer({ binary, tls: { cert: `${dir}/cert.pem`, key: `${dir}/key.pem` } });
    redises.push(server);
    expect(server.url).toStartWith("rediss://localhost:");
    const env = { NODE_EXTRA_CA_CERTS: `${dir}/cert.pem` };
    const start = (name: string) =>
      startRouterProc(sims.map((s) => ({ name: s.name, url: s.url })), { toml: `[cluster]\nredis = "${server.url}"\nname = "${name}"\n`, env });
    const [a, b] = await Promise.all([start("tls-a"), start("tls-b")]);
    await until(async () => (await Promise.all([status(a), status(b)])).every((s) => s.cluster?.state === "up" && s.cluster.instances.length === 2), "both instances connected over TLS");
    const messages = conversation("over TLS");
    const first = await turn(a, messages, "next");
    expect(await turn(b, messages, "again")).toMatchObject({ replica: first.replica, route: "pin" });

    // Without the CA the certificate is refused: the instance says so and routes alone.
    const alone = await startRouterProc(sims.map((s) => ({ name: s.name, url: s.url })), { toml: `[cluster]\nredis = "${server.url}"\nname = "no-ca"\ncatch_up_timeout = "500ms"\n` });
    expect((await status(alone)).cluster?.state).not.toBe("up");
    expect(logRecords(alone, "cluster: cannot reach Redis; routing on this instance's own view until it can")).toHaveLength(1);
  }, TIMEOUT);
});
