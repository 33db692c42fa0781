/**
 * The health state machine the proxy drives, as plain calls: which events demote, which
 * bring a replica back, what a half-open replica and a panicking pool look like to the
 * policy. (The same rules with real processes: test/router/health.test.ts.)
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import type { Failure } from "../../src/fleet/failure.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import { memoryLog } from "../../src/log.ts";

const config = (name: string): ReplicaConfig => ({ name, url: `http://127.0.0.1:1/${name}`, kv_tokens: 0, models: ["m"] });

/** A fleet whose replicas are all up, as after a first passing check. */
function fleetOf(...names: string[]) {
  const log = memoryLog();
  const fleet = new Fleet(names.map(config), { log, healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
  for (const r of fleet.replicas) {
    r.state = "up";
    r.health.checked = true;
  }
  return { fleet, log, a: fleet.replicas[0]!, b: fleet.replicas[1] };
}

const refused: Failure = { kind: "refused", reason: "connection refused" };
const busy: Failure = { kind: "status", reason: "HTTP 503" };
const slow: Failure = { kind: "timeout", reason: "no first byte within 10m", timer: "first_byte" };
const reset: Failure = { kind: "network", reason: "connection reset" };

describe("passive failures", () => {
  it.each([
    ["a refused connection demotes at once", [refused], "down"],
    ["one 503 is a blip", [busy], "up"],
    ["two timeouts are not enough", [slow, slow], "up"],
    ["three failures of any kind in a row demote", [busy, reset, slow], "down"],
  ] as const)("%s", (_name, failures, state) => {
    const { fleet, a } = fleetOf("a");
    for (const f of failures) fleet.health.failed(a, f);
    expect(a.state).toBe(state);
  });

  it("an answer in between resets the count", () => {
    const { fleet, a } = fleetOf("a");
    fleet.health.failed(a, busy);
    fleet.health.failed(a, busy);
    fleet.health.succeeded(a);
    fleet.health.failed(a, busy);
    fleet.health.failed(a, busy);
    expect([a.state, a.health.consecutiveFailures]).toEqual(["up", 2]);
  });
});

describe("half-open: one trial request", () => {
  function halfOpen() {
    const f = fleetOf("a", "b");
    f.a.state = "half-open";
    return f;
  }
  const healthyNames = (fleet: Fleet) => fleet.views(fleet.replicas, new Set()).views.filter((v) => v.healthy).map((v) => v.name);

  it("is routable until its trial is dispatched, then not until the trial ends", () => {
    const { fleet, a } = halfOpen();
    expect(healthyNames(fleet)).toEqual(["a", "b"]);
    fleet.dispatched(a, false);
    expect(healthyNames(fleet)).toEqual(["b"]);
  });

  it.each([
    ["its success brings it back up", (f: Fleet, r: Fleet["replicas"][number]) => f.health.succeeded(r), "up", ["a", "b"]],
    ["its failure, even a blip, sends it down at once", (f: Fleet, r: Fleet["replicas"][number]) => f.health.failed(r, busy), "down", ["b"]],
    ["no verdict (the client left, or a 500): another trial may go", (f: Fleet, r: Fleet["replicas"][number]) => f.health.released(r), "half-open", ["a", "b"]],
  ] as const)("%s", (_name, outcome, state, healthy) => {
    const { fleet, a } = halfOpen();
    fleet.dispatched(a, false);
    outcome(fleet, a);
    expect(a.state).toBe(state);
    expect(healthyNames(fleet)).toEqual([...healthy]);
  });
});

describe("panic mode", () => {
  it("with every replica of the pool down, all of them are offered (except those this request tried), logged once and counted", () => {
    const { fleet, log, a, b } = fleetOf("a", "b");
    fleet.health.failed(a, refused);
    fleet.health.failed(b!, refused);
    const first = fleet.views(fleet.replicas, new Set(), "m");
    expect(first.panic).toBe(true);
    expect(first.views.map((v) => v.healthy)).toEqual([true, true]);
    expect(fleet.views(fleet.replicas, new Set(["a"]), "m").views.map((v) => v.healthy)).toEqual([false, true]);
    fleet.dispatched(a, true);
    expect(fleet.panic.routes).toBe(1);
    expect(log.records.filter((r) => r.msg.startsWith("panic mode:"))).toHaveLength(1);

    b!.state = "up";
    expect(fleet.views(fleet.replicas, new Set(), "m").panic).toBe(false);
    expect(log.records.filter((r) => r.msg.startsWith("panic mode over"))).toHaveLength(1);
  });

  it("one model's panic is not another's", () => {
    const { fleet, log, a } = fleetOf("a", "b");
    fleet.health.failed(a, refused);
    const [pa, pb] = [[fleet.replicas[0]!], [fleet.replicas[1]!]];
    for (let i = 0; i < 3; i++) {
      expect(fleet.views(pa, new Set(), "model-a").panic).toBe(true);
      expect(fleet.views(pb, new Set(), "model-b").panic).toBe(false);
    }
    expect(log.records.filter((r) => r.msg.startsWith("panic mode")).map((r) => r.msg)).toEqual(["panic mode: every replica is down; routing to all of them"]);
  });
});

describe("panic mode: what a client-chosen model name can cost", () => {
  it("200 long model names while every replica is down (their model lists unknown): one pool in panic, one warning, the name clipped", () => {
    const log = memoryLog();
    const fleet = new Fleet([{ ...config("a"), models: [] }, { ...config("b"), models: [] }], { log, healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
    for (let i = 0; i < 200; i++) {
      const model = `${i}-`.padEnd(100_000, "m");
      expect(fleet.views(fleet.pool(model), new Set(), model).panic).toBe(true);
    }
    const warnings = log.records.filter((r) => r.msg.startsWith("panic mode"));
    expect(warnings).toHaveLength(1);
    expect(JSON.stringify(warnings[0]!.fields).length).toBeLessThan(500);
    expect(fleet.panic.pools.size).toBe(1);
  });
});

describe("a reload", () => {
  it("marks replicas it removed or replaced, so requests that still hold them remember nothing for them", () => {
    const { fleet, a, b } = fleetOf("a", "b");
    fleet.reconcile([config("b"), { ...config("a"), url: "http://127.0.0.1:2/a" }]);
    expect([a.removed, b!.removed]).toEqual([true, false]);
    expect(fleet.byName("a")).not.toBe(a);
  });
});

describe("an active check that passes again", () => {
  const refusedError = () => Object.assign(new Error("Unable to connect. Is the computer able to access the url?"), { code: "ConnectionRefused" });
  /** A fleet whose health checks get `answers` in turn (a Response, or an error thrown by fetch). */
  function checked(answers: (Response | Error)[]) {
    const log = memoryLog();
    let i = 0;
    const fetch = async (input: string | URL | Request) => {
      if (String(input).endsWith("/v1/models")) return Response.json({ object: "list", data: [{ id: "m", object: "model" }] });
      // The engine's other endpoints (discovery asks /metrics, /api/version …) are not checks.
      if (!String(input).endsWith("/health")) return new Response("not found", { status: 404 });
      const a = answers[Math.min(i++, answers.length - 1)]!;
      if (a instanceof Error) throw a;
      return a;
    };
    const fleet = new Fleet([config("a")], { log, fetch, healthPath: "/health", healthTimeoutMs: 100, failures: 3 });
    return { fleet, log, a: fleet.replicas[0]! };
  }
  const ok = () => new Response('{"status":"ok"}');
  const loading = () => new Response('{"error":{"code":503,"message":"Loading model"}}', { status: 503 });

  it.each([
    ["refused its check (a restart)", [refusedError()]],
    ["answered its check 503 (loading)", [loading()]],
  ])("a replica that %s is up at its next passing check: the check is the evidence that demoted it", async (_name, failing) => {
    const { fleet, log, a } = checked([ok(), ...failing, ok()]);
    await fleet.watch.check(a);
    await fleet.watch.check(a);
    expect(a.state).toBe("down");
    await fleet.watch.check(a);
    expect(a.state).toBe("up");
    expect(fleet.views(fleet.replicas, new Set()).views[0]!.healthy).toBe(true);
    expect(log.records.at(-1)).toMatchObject({ level: "info", msg: "replica up again: health check passed", fields: { replica: "a" } });
  });

  it("a replica down at the router's start is up at its first passing check", async () => {
    const { fleet, a } = checked([refusedError(), ok()]);
    await fleet.watch.check(a);
    expect(a.state).toBe("down");
    await fleet.watch.check(a);
    expect(a.state).toBe("up");
  });

  it("a request refused (nothing listened) is settled by a passing check too", async () => {
    const { fleet, a } = checked([ok()]);
    await fleet.watch.check(a);
    fleet.health.failed(a, refused);
    expect(a.state).toBe("down");
    await fleet.watch.check(a);
    expect(a.state).toBe("up");
  });

  it.each([
    ["health.failures requests in a row failed (5xx, timeouts)", (f: Fleet, a: Fleet["replicas"][number]) => [busy, slow, reset].forEach((x) => f.health.failed(a, x))],
    ["its trial request failed", (f: Fleet, a: Fleet["replicas"][number]) => {
      a.state = "half-open";
      f.dispatched(a, false);
      f.health.failed(a, busy);
    }],
  ])("demoted because %s, it is half-open: its /health passed all along, only a request can tell", async (_name, demote) => {
    const { fleet, a } = checked([ok()]);
    await fleet.watch.check(a);
    demote(fleet, a);
    expect(a.state).toBe("down");
    await fleet.watch.check(a);
    expect(a.state).toBe("half-open");
  });
});

describe("a card whose KV turned requests away as full (llama.cpp's unified KV)", () => {
  const full: Failure = { kind: "full", reason: "its KV is full" };
  const signal = () => new AbortController().signal;
  const clock = { t: 1_000 };
  /** Every promise continuation already queued has run (one turn of the event loop; no time passes). */
  const settled = () => new Promise<void>((resolve) => setImmediate(resolve));
  const now = () => clock.t;

  it("is not a health failure: ten in a row leave it up, counted apart", () => {
    const { fleet, a } = fleetOf("a");
    for (let i = 0; i < 10; i++) fleet.health.failed(a, full);
    expect([a.state, a.health.consecutiveFailures, a.stats.errors, a.stats.kvFull]).toEqual(["up", 0, 0, 10]);
  });

  it("takes no more beside its in-flight requests than one overflow failed at: the next waits for one to end; one that fits beside goes", async () => {
    const { a } = fleetOf("a");
    // One overflow fails two 2,500-token prompts: the first refusal sees both in flight, the
    // second (after the first left) sees itself and counts the first.
    // Nothing in the way: counted at once (no other decision can run between).
    expect(a.wall.admit(2_500, signal(), now)).toBe(true);
    expect(a.wall.admit(2_500, signal(), now)).toBe(true);
    expect(a.wall.turnedAwayFull(2_500, now(), 60_000)).toBe(5_000);
    a.wall.release(2_500);
    expect(a.wall.turnedAwayFull(2_500, now(), 60_000)).toBe(5_000);
    a.wall.release(2_500);

    const order: string[] = [];
    const admit = async (tokens: number, name: string) => {
      if (await a.wall.admit(tokens, signal(), now)) order.push(name);
    };
    await admit(2_500, "first"); // alone: always goes
    const second = admit(2_500, "second");
    await admit(1_000, "small"); // 3,500 < 90 % of 5,000: goes now
    expect(order).toEqual(["first", "small"]);
    a.wall.release(1_000);
    await settled();
    expect(order).toEqual(["first", "small"]); // woken, it looked again: 2,500 + 2,500 still reaches the wall
    expect(a.wall.inflightTokens).toBe(2_500);
    a.wall.release(2_500);
    await second;
    expect(order).toEqual(["first", "small", "second"]);
    expect(a.wall.inflightTokens).toBe(2_500);
  });

  it("a waiting request whose client leaves is not counted; the wall lapses after its window", async () => {
    const { a } = fleetOf("a");
    a.wall.admit(3_000, signal(), now);
    a.wall.turnedAwayFull(3_000, now(), 60_000);
    const gone = new AbortController();
    const waiting = a.wall.admit(3_000, gone.signal, now);
    expect(waiting).toBeInstanceOf(Promise);
    gone.abort();
    expect(await waiting).toBe(false);
    expect(a.wall.inflightTokens).toBe(3_000);
    clock.t += 60_000;
    expect(a.wall.admit(3_000, signal(), now)).toBe(true);
    expect(a.wall.inflightTokens).toBe(6_000);
  });

  it("counts what requests waited at its wall (what staying costs, for hybrid's wall rule): within its window, since a conversation last left it", async () => {
    const { a } = fleetOf("a");
    // The view tells whether a wall stands by the clock it is given: this one.
    const local = { t: 1_000_000 };
    const at = () => local.t;
    /** One request waits `ms` behind another one in flight, then is admitted (or gives up). */
    const waitBehind = async (ms: number, gone?: AbortController) => {
      expect(a.wall.admit(3_000, signal(), at)).toBe(true);
      const waiting = a.wall.admit(3_000, gone?.signal ?? signal(), at);
      expect(waiting).toBeInstanceOf(Promise);
      local.t += ms;
      if (gone) gone.abort();
      else a.wall.release(3_000);
      expect(await waiting).toBe(!gone);
      a.wall.release(3_000); // the one admitted last (or, when the other gave up, the first)
    };
    /** The engine turns a request away as full, alone: a wall at 3,000 tokens (admits below 2,700). */
    const overflow = () => {
      expect(a.wall.admit(3_000, signal(), at)).toBe(true);
      a.wall.turnedAwayFull(3_000, at(), 60_000);
      a.wall.release(3_000);
    };
    overflow();
    expect(a.view(at())).toMatchObject({ inflightTokens: 0, wall: { admitsBelow: 2_700, waitedSeconds: 0 } });
    await waitBehind(4_000);
    expect(a.view(at()).wall).toEqual({ admitsBelow: 2_700, waitedSeconds: 4 });
    // A client that gave up after 1 s was kept waiting too; another overflow keeps the account.
    await waitBehind(1_000, new AbortController());
    overflow();
    expect(a.wall.waitedMs(at())).toBe(5_000);
    // A conversation left it: paid; taken back when the move failed before the first byte.
    const undo = a.wall.payWaits(at());
    expect(a.wall.waitedMs(at())).toBe(0);
    undo();
    expect(a.wall.waitedMs(at())).toBe(5_000);
    a.wall.payWaits(at());
    // A wait under way when it was paid counts from then only.
    expect(a.wall.admit(3_000, signal(), at)).toBe(true);
    const under = a.wall.admit(3_000, signal(), at);
    local.t += 2_000;
    a.wall.payWaits(at());
    local.t += 500;
    a.wall.release(3_000);
    expect(await under).toBe(true);
    a.wall.release(3_000);
    expect(a.wall.waitedMs(at())).toBe(500);
    // Waits older than the capacity window no longer count, while the wall, refreshed, stands.
    for (const step of [30_000, 31_000]) {
      overflow();
      local.t += step;
    }
    expect(a.view(at()).wall).toEqual({ admitsBelow: 2_700, waitedSeconds: 0 });
    await waitBehind(3_000);
    expect(a.wall.waitedMs(at())).toBe(3_000);
    // A wall set after the last lapsed starts from nothing.
    local.t += 60_000;
    expect(a.view(at()).wall).toBeUndefined();
    overflow();
    expect(a.view(at()).wall).toEqual({ admitsBelow: 2_700, waitedSeconds: 0 });
  });
});

describe("waiting for a running request to end (a held request's slot, llama.cpp)", () => {
  const settled = () => new Promise<void>((resolve) => setImmediate(resolve));

  it("resolves when the last request of that commit ends, not before; at once when none runs", async () => {
    const { a } = fleetOf("a");
    const signal = new AbortController().signal;
    let done = false;
    await a.running.untilEnded(5, 60_000, signal); // nothing committed at 5 runs: at once
    a.running.sent(5);
    a.running.sent(5); // two requests committed in the same millisecond
    a.running.sent(6);
    const waiting = a.running.untilEnded(5, 60_000, signal).then(() => (done = true));
    a.running.ended(6);
    a.running.ended(5);
    await settled();
    expect(done).toBe(false);
    a.running.ended(5);
    await waiting;
    expect(done).toBe(true);
  });

  it("gives up when its client leaves, or its time is up", async () => {
    const { a } = fleetOf("a");
    a.running.sent(5);
    const gone = new AbortController();
    let left = false;
    const waiting = a.running.untilEnded(5, 60_000, gone.signal).then(() => (left = true));
    await settled();
    expect(left).toBe(false);
    gone.abort();
    await settled();
    expect(left).toBe(true); // the request still runs
    await waiting;
    let timedOut = false;
    await a.running.untilEnded(5, 1, new AbortController().signal).then(() => (timedOut = true)); // its 1 ms timer, while the request still runs
    expect(timedOut).toBe(true);
  });
});
