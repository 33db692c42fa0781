/**
 * Several router instances sharing one view through a real redis-server (started here on a
 * free port, no persistence; LLMROUTE_TEST_REDIS_SERVER=valkey-server runs the same tests
 * against Valkey). Every router is a real `llmroute serve` process in front of `llmroute sim`
 * replicas, driven by the official openai client as a load balancer would: each request to
 * the next instance.
 */
import { RedisClient } from "bun";
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { rm } from "node:fs/promises";
import OpenAI from "openai";
import { BatchWriter } from "../../src/cluster/codec.ts";
import { startRedisServer, type RedisServer } from "../../src/cluster/redis-server.ts";
import { IDENTITY_VERSION } from "../../src/route/chain.ts";
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

/**
 * A fresh pair of sims and a Redis for each test (afterEach kills every process). The sims
 * publish a KV that holds what the tests' traffic sends (the tiny profile's 4,096 tokens
 * would not): these tests are about what the instances share, and a router that knows the
 * card is full forgets the oldest conversations, as the engine does.
 */
async function redis(): Promise<RedisServer> {
  sims = await Promise.all(["gpu0", "gpu1"].map((name) => startSimProc(name, ["--kv-tokens", "262144"])));
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

/**
 * A turn through `from`, returned once `to` has applied what `from` shared of it: `from` writes
 * its events to Redis as it answers, and Redis hands them on as it gets to them, so on a loaded
 * box a client's next turn can reach `to` first — routed as `to` knew it then, which is not
 * what these tests ask.
 */
async function turnShared(from: RouterProc, to: RouterProc, messages: OpenAI.ChatCompletionMessageParam[], next: string) {
  const [sent0, applied0] = await Promise.all([status(from), status(to)]).then(([f, t]) => [f.cluster!.events.sent, t.cluster!.events.applied]);
  const out = await turn(from, messages, next);
  await until(async () => {
    const [f, t] = await Promise.all([status(from), status(to)]);
    const sent = f.cluster!.events.sent - sent0!;
    return sent > 0 && t.cluster!.events.applied - applied0! >= sent ? true : undefined;
  }, "the other instance to apply the turn's events");
  return out;
}

/** Redis stream ids ("ms-seq") compared as numbers. */
function streamIdAtLeast(id: string, than: string): boolean {
  const [ms, seq] = id.split("-").map(BigInt);
  const [thanMs, thanSeq] = than.split("-").map(BigInt);
  return ms! > thanMs! || (ms === thanMs && seq! >= thanSeq!);
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
    // and the instance then asks Redis for the owner, and waits for the id's event if Redis
    // has not got it yet either (without that wait: 4 of 15 runs failed with a 404 beside two
    // CPU-bound processes, 3 Dec; with it, 0 of 15).
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

describe("what one instance shares reaches the others whole", () => {
  it("a client's 70,000-character session key: served (not a 500), and the other instance places the session by it", async () => {
    const server = await redis();
    const [a, b] = await routers(2, server);
    const key = `${SALT} session `.padEnd(70_000, "k");
    const ask = (r: RouterProc, content: string) =>
      client(r).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content }], max_tokens: 2, prompt_cache_key: key }).withResponse();
    const first = where((await ask(a!, `${SALT} ${"the whole history of the session ".repeat(100)}`)).response);
    await until(async () => ((await status(b!)).cluster!.events.applied > 0 ? true : undefined), "b to apply a's commit");
    // ... and a load report a sent after it: until then b counts a's request as still
    // prefilling there (by design), and the session's replica looks busier than it is.
    const applied = Date.now();
    await until(async () => {
      const r0 = (await status(b!)).cluster!.instances.find((i) => i.name === "r0");
      return r0 && Date.now() - r0.last_heartbeat_ms > applied ? true : undefined;
    }, "a load report from a after its commit");
    // A rewritten (compacted) history: only the session key says where it ran.
    expect(where((await ask(b!, `${SALT} ${"a short summary of it ".repeat(40)}`)).response)).toEqual({ replica: first.replica, route: "session" });
    for (const r of [a!, b!]) expect((await status(r)).cluster!.events).toMatchObject({ malformed: 0, unencodable: 0 });
  }, TIMEOUT);

  it("an instance of another llmroute version (events in format 1) is named in the log and /status; its events are counted apart", async () => {
    const server = await redis();
    const [a] = await routers(1, server);
    const old = new RedisClient(server.url);
    const prefix = `llmroute:v${IDENTITY_VERSION}:`;
    // What a router before batch format 2 sends: a heartbeat without a format, and a format-1 batch.
    await old.publish(`${prefix}load`, JSON.stringify({ v: 1, i: "old00001", n: "edge-old", at: Date.now(), applied: "0-0", lag: 0, r: {} }));
    const payload = Buffer.from(Uint8Array.of(1, 2, ...new Uint8Array(8), 4, 0, ...new TextEncoder().encode("gpu0"))).toString("base64");
    const id = (await old.send("XADD", [`${prefix}log`, "*", "i", "old00001", "p", payload])) as string;
    await old.publish(`${prefix}events`, `${id} old00001 ${payload}`);
    const doc = await until(async () => {
      const d = await status(a!);
      return d.cluster!.events.other_version > 0 ? d : undefined;
    }, "a to read the old instance's batch");
    expect(doc.warnings).toContain("cluster: instance edge-old runs another llmroute version (events in format 1, this one's in 2): neither reads the other's routing knowledge; run one version on every instance");
    expect(doc.cluster!.events.malformed).toBe(0);
    expect(logRecords(a!, "cluster: an instance runs another llmroute version; neither reads the other's routing knowledge: run one version on every instance")).toMatchObject([
      { instance: "edge-old", its_format: 1, this_format: 2 },
    ]);
    old.close();
  }, TIMEOUT);
});

describe("a bad events message costs nothing but itself", () => {
  it("bogus stream ids (not Redis's, far in the future) are dropped and counted; later events still apply, and a reconnect reads the stream", async () => {
    const server = await redis();
    const [a, b] = await routers(2, server);
    await until(async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.instances.length === 2), "both instances to see each other");
    const forger = new RedisClient(server.url);
    const channel = `llmroute:v${IDENTITY_VERSION}:events`;
    const w = new BatchWriter();
    w.add({ kind: "forget", at: Date.now(), replica: "gpu-none" });
    const payload = Buffer.from(w.take(Date.now())).toString("base64");
    // Not ids; then a valid one ten years ahead; then one past what Redis accepts (XREAD: "ERR Invalid stream ID").
    const bogus = ["not-an-id", "12-x", `${Date.now() + 10 * 365 * 86_400_000}-0`, "99999999999999999999-0"];
    for (const id of bogus) await forger.publish(channel, `${id} forger01 ${payload}`);

    // A conversation alternating between the instances is still pinned: b applies a's events
    // (published after the forgeries, so b reads them after).
    const messages = conversation("after the forgeries");
    const first = await turnShared(a!, b!, messages, "next");
    expect(await turn(b!, messages, "again")).toMatchObject({ replica: first.replica, route: "pin" });
    expect((await status(b!)).cluster!.events.malformed).toBe(bogus.length);

    // Every connection cut: on reconnecting each reads the stream from where it was (no "Invalid stream ID").
    const before = (await status(b!)).cluster!.disconnects;
    await forger.send("CLIENT", ["KILL", "TYPE", "pubsub"]);
    await forger.send("CLIENT", ["KILL", "TYPE", "normal", "SKIPME", "yes"]);
    await until(async () => {
      const s = (await status(b!)).cluster!;
      return s.state === "up" && s.disconnects > before ? true : undefined;
    }, "b to reconnect", 20_000);
    expect((await status(b!)).cluster!.last_error ?? "").not.toContain("Invalid stream ID");
    expect(await turnShared(a!, b!, messages, "once more")).toMatchObject({ replica: first.replica, route: "pin" });
    expect(await turn(b!, messages, "and again")).toMatchObject({ replica: first.replica, route: "pin" });
    forger.close();
  }, TIMEOUT);

  it("entries the stream really holds ahead of Redis's clock (as after a clock set back) are applied, read from the stream", async () => {
    const server = await redis();
    const [a, b] = await routers(2, server);
    await until(async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.instances.length === 2), "both instances to see each other");
    const writer = new RedisClient(server.url);
    const prefix = `llmroute:v${IDENTITY_VERSION}:`;
    const w = new BatchWriter();
    w.add({ kind: "response", at: Date.now(), replica: "gpu0", id: "resp_from_the_future" });
    const payload = Buffer.from(w.take(Date.now())).toString("base64");
    // An hour ahead: from now on Redis gives every entry an id past it.
    const id = (await writer.send("XADD", [`${prefix}log`, `${Date.now() + 3_600_000}-0`, "i", "later001", "p", payload])) as string;
    const applied = (await status(b!)).cluster!.events.applied;
    await writer.publish(`${prefix}events`, `${id} later001 ${payload}`);
    await until(async () => ((await status(b!)).cluster!.events.applied > applied ? true : undefined), "b to apply the entry");
    writer.close();
    const messages = conversation("after the clock moved");
    const first = await turnShared(a!, b!, messages, "next");
    expect(await turn(b!, messages, "again")).toMatchObject({ replica: first.replica, route: "pin" });
    expect((await status(b!)).cluster!.events.malformed).toBe(0);
  }, TIMEOUT);
});

describe("a commit taken back is taken back on every instance", () => {
  /** A router in front of gpu0 alone, so every request goes there. */
  const solo = (name: string, server: RedisServer, extra = "") =>
    startRouterProc([{ name: sims[0]!.name, url: sims[0]!.url }], { toml: `${extra}\n[cluster]\nredis = "${server.url}"\nname = "${name}"\n` });
  const entries = async (r: RouterProc) => (await status(r)).replicas[0]!.index_entries;
  const ask = (r: RouterProc, label: string) =>
    client(r).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${SALT} ${label} ${"x".repeat(3000)}` }], max_tokens: 2 });

  it("the other instance had committed something newer to that replica before it applied the commit: it still takes it back (5 of 5)", async () => {
    const server = await redis();
    const [a, b] = await Promise.all([solo("r0", server), solo("r1", server)]);
    await until(async () => (await Promise.all([status(a), status(b)])).every((s) => s.cluster?.instances.length === 2), "both instances to see each other");
    for (let trial = 0; trial < 5; trial++) {
      const applied = (await status(b)).cluster!.events.applied;
      // Redis frozen: what each instance learns waits, so b commits after a's commit and before it applies it.
      server.pause();
      await sims[0]!.faults({ fail_next: 1, fail_status: 400 });
      expect(await ask(a, `trial ${trial}: refused`).catch((e: unknown) => (e as { status?: number }).status)).toBe(400);
      await ask(b, `trial ${trial}: served`);
      server.resume();
      await until(
        async () => (await Promise.all([status(a), status(b)])).every((s) => s.cluster?.state === "up" && s.cluster.backlog_events === 0 && s.cluster.instances.length === 2),
        "both instances back in sync",
        30_000,
      );
      // b heard of a's commit and of its retraction; a never held the refused prompt: the same index.
      await until(async () => ((await status(b)).cluster!.events.applied >= applied + 2 ? true : undefined), `trial ${trial}: b to apply a's commit and retract`);
      await until(async () => ((await entries(a)) === (await entries(b)) ? true : undefined), `trial ${trial}: b to take the commit back as a did`);
    }
  }, TIMEOUT * 2);

  it("an instance whose clock is an hour ahead does not pin the others' entries in the future: the TTL still evicts", async () => {
    const server = await redis();
    const a = await solo("r0", server, `[routing]\nindex_ttl = "6s"`);
    await until(async () => (await status(a)).cluster?.state === "up" ? true : undefined, "a to connect");
    // What an instance with a clock an hour ahead shares: one commit to gpu0.
    const ahead = Date.now() + 3_600_000;
    const w = new BatchWriter();
    w.add({ kind: "commit", at: ahead, replica: "gpu0", continued: false, commit: 1, chains: [{ lo: Uint32Array.of(1, 2, 3), hi: Uint32Array.of(4, 5, 6), ends: Uint32Array.of(10, 20, 30), length: 3 }] });
    const payload = Buffer.from(w.take(ahead)).toString("base64");
    const peer = new RedisClient(server.url);
    const prefix = `llmroute:v${IDENTITY_VERSION}:`;
    const id = (await peer.send("XADD", [`${prefix}log`, "*", "i", "ahead001", "p", payload])) as string;
    await peer.publish(`${prefix}events`, `${id} ahead001 ${payload}`);
    peer.close();
    await until(async () => ((await status(a)).cluster!.events.applied > 0 ? true : undefined), "a to apply the commit");
    await ask(a, "a local request after it");
    expect(await entries(a)).toBeGreaterThan(3);
    // Nothing is used again: within the TTL (6 s: room for a slow ask and status call before the
    // count above) and an eviction pass, everything is gone.
    await until(async () => ((await entries(a)) === 0 ? true : undefined), "the index to be evicted", 20_000);
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
    // b is alive: with Redis away, a hears from no one, and says so rather than call b dead
    //.
    await a!.waitFor(/"msg":"cluster: (instance stopped reporting|no word from an instance while Redis is away)/, 15_000);
    expect(logRecords(a!, "cluster: instance stopped reporting; its in-flight counts are dropped")).toEqual([]);
    expect(logRecords(a!, "cluster: no word from an instance while Redis is away; its in-flight counts are dropped until it reports again")).toEqual([
      expect.objectContaining({ level: "info", instance: "r1" }),
    ]);
    const printed = (await runCli(["status", "--url", a!.url])).stdout;
    expect(printed).toMatch(new RegExp(`^cluster llmroute on ${server.url} · Redis away for \\d+s · other instances unknown until it is back · `, "m"));
    expect(printed).not.toMatch(/\b1 instance\b/);

    // Learned while Redis is away: a conversation only `a` has seen.
    const away = conversation("started while Redis was away");
    const first = await turn(a!, away, "second step");
    await turn(a!, away, "third step");

    await server.restart();
    await until(
      async () => (await Promise.all([status(a!), status(b!)])).every((s) => s.cluster?.state === "up" && s.cluster.backlog_events === 0),
      "both instances to reconnect and share their backlog",
    );
    // What `a` learned during the outage reached `b`: a's backlog is empty once Redis echoed
    // each batch back to it, so the stream id `a` has applied up to is at or past its
    // backlog's; `b` has it once it has applied up to that id.
    const backlogShared = (await status(a!)).cluster!.applied_id;
    await until(async () => {
      const s = await status(b!);
      return s.cluster!.instances.length === 2 && streamIdAtLeast(s.cluster!.applied_id, backlogShared);
    }, "b to apply a's backlog");
    expect(await turn(b!, away, "fourth step")).toMatchObject({ replica: first.replica, route: "pin" });
    await load.stop();
    expect(load.errors).toEqual([]);
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
        const first = await turnShared(a!, b!, messages, "second");
        await turn(b!, messages, "third");
        return { messages, owner: first.replica };
      }),
    );

    // An answer in flight through b when it dies: held before its first byte by whichever sim
    // gets it (a stall, not a long answer: a slow box could finish that before the kill).
    await Promise.all(sims.map((s) => s.faults({ stall_ms: 600_000, stall_next: 1 })));
    const long = client(b!).chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `${SALT} a long story` }], max_tokens: 3000, stream: true });
    const streaming = long.then(async (stream) => {
      for await (const _ of stream);
    }).catch(() => "cut off");
    await until(async () => (await status(a!)).cluster?.instances.find((i) => i.name === "r1")?.inflight === 1, "a to see b's request in flight");
    await b!.kill("SIGKILL");
    await until(async () => (await status(a!)).cluster?.instances.length === 1, "a to drop the dead instance");
    expect(await streaming).toBe("cut off");
    await Promise.all(sims.map((s) => s.faults({ stall_ms: 0 })));
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
    const result = (await Bun.file(json).json()) as { options: { routers: number }; engines: { runs: { workloads: Workloads }[] }[] };
    expect(result.options.routers).toBe(4);
    const turns = result.engines[0]!.runs[0]!.workloads[0]!.arms[0]!.samples;
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
    const first = await turnShared(a, b, messages, "next");
    expect(await turn(b, messages, "again")).toMatchObject({ replica: first.replica, route: "pin" });

    // Without the CA the certificate is refused: the instance says so and routes alone.
    const alone = await startRouterProc(sims.map((s) => ({ name: s.name, url: s.url })), { toml: `[cluster]\nredis = "${server.url}"\nname = "no-ca"\ncatch_up_timeout = "500ms"\n` });
    expect((await status(alone)).cluster?.state).not.toBe("up");
    // The refusal may come after "listening" (catch_up_timeout 500 ms on a slow handshake).
    await alone.waitFor(/cluster: cannot reach Redis/);
    expect(logRecords(alone, "cluster: cannot reach Redis; routing on this instance's own view until it can")).toHaveLength(1);
  }, TIMEOUT);
});
