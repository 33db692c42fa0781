/**
 * Faults under load: a replica process SIGKILLed under 200 concurrent requests, a replica
 * restarted, a replica whose health flaps. What the clients see, and where conversations
 * go. The router runs in this process (what is tested is its routing) except under the
 * 200 requests: Bun's fetch runs at most 256 requests at once per process (docs:
 * runtime/networking/fetch), and the clients' and the router's upstream requests would
 * share them. Replicas are processes where one is killed, in-process sims elsewhere
 * (stopping one closes its port and every connection, as a dead process does).
 */
import { afterAll, describe, expect, it } from "bun:test";
import { logRecords, startRouterInProcess, startRouterProc, startSimInProcess, startSimProc, until, WATCHED_HEALTH } from "../helpers/fleet.ts";
import { conversation } from "../helpers/conversation.ts";
import { killAll } from "../helpers/proc.ts";

// Everything is stopped once, at the end: the restart and flapping tests run concurrently.
afterAll(killAll);


/** How often a conversation changed replica. */
const moves = (replicas: string[]) => replicas.filter((r, i) => i > 0 && r !== replicas[i - 1]).length;

describe("a replica SIGKILLed under 200 concurrent requests over 3 replicas", () => {
  it("no client error for any request that was not yet streaming; streams in flight on it end with an error event", async () => {
    // ~67 requests each. gpu1, the one killed, decodes 5 tokens a second (4 s a request) and
    // runs 8 at once: when the kill comes, its streams are seconds from their end and the
    // rest of its share is queued, however slowly a loaded machine got them there. The
    // others decode 50 a second, so the failed-over work is done quickly.
    const sims = await Promise.all(
      ["gpu0", "gpu1", "gpu2"].map((name) => startSimProc(name, name === "gpu1" ? ["--decode-tps", "5", "--max-seqs", "8"] : ["--decode-tps", "50"])),
    );
    const router = await startRouterProc(sims);
    const client = router.client();
    /** Streams whose first byte arrived and whose end has not, per replica. */
    const streamingOn = new Map<string, number>();
    type Result = { stream: boolean; replica?: string; ok: boolean; error?: string; tokens: number };

    const one = async (i: number): Promise<Result> => {
      const stream = i % 2 === 0;
      const body = { model: "sim-model", messages: [{ role: "user" as const, content: `request ${i} ${crypto.randomUUID()}` }], max_tokens: 20 };
      if (!stream) {
        try {
          const { data, response } = await client.chat.completions.create(body).withResponse();
          return { stream, replica: response.headers.get("x-llmroute-replica")!, ok: true, tokens: data.usage!.completion_tokens };
        } catch (e) {
          return { stream, ok: false, error: String(e), tokens: 0 };
        }
      }
      let result: Result = { stream, ok: false, tokens: 0 };
      try {
        const { data, response } = await client.chat.completions.create({ ...body, stream: true }).withResponse();
        // the router sends headers only with the first byte: from here on, this stream has started
        result = { ...result, replica: response.headers.get("x-llmroute-replica")! };
        streamingOn.set(result.replica!, (streamingOn.get(result.replica!) ?? 0) + 1);
        for await (const chunk of data) if (chunk.choices[0]?.delta?.content) result.tokens++;
        return { ...result, ok: true };
      } catch (e) {
        return { ...result, ok: false, error: String(e) };
      } finally {
        if (result.replica) streamingOn.set(result.replica, streamingOn.get(result.replica)! - 1);
      }
    };

    const all = Promise.all(Array.from({ length: 200 }, (_, i) => one(i)));
    await until(async () => (streamingOn.get("gpu1") ?? 0) >= 3 && (await sims[1]!.state()).waiting >= 6, "streams from gpu1 flowing, and a queue there");
    await sims[1]!.kill("SIGKILL");
    const results = await all;

    // The router answers only with a first byte in hand, so the only errors a client may
    // see are streams that were already flowing from gpu1: they end with the error event.
    const failed = results.filter((r) => !r.ok);
    for (const r of failed) {
      expect([r.stream, r.replica]).toEqual([true, "gpu1"]);
      expect(r.error).toContain("replica gpu1 failed mid-stream");
    }
    expect(failed.length).toBeGreaterThan(0);
    expect(results.filter((r) => r.ok).every((r) => r.tokens === 20)).toBe(true);
    expect(results.filter((r) => !r.stream).every((r) => r.ok)).toBe(true);
    // what was queued on gpu1 (and what arrived before it was known dead) moved elsewhere
    expect(logRecords(router, "failover").filter((r) => r.replica === "gpu1").length).toBeGreaterThan(0);
    expect(logRecords(router, "replica down").map((r) => r.replica)).toEqual(["gpu1"]);
  });
});

describe.concurrent("a replica restarted", () => {
  it("its conversations move once, to a live replica, and stay there after it is back", async () => {
    const [gpu0, first] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const port = Number(new URL(first.url).port);
    // down replicas are re-checked at the health interval (at most every 2 s)
    const router = await startRouterInProcess([gpu0, first], { toml: WATCHED_HEALTH });
    const client = router.client();
    const conversations = Array.from({ length: 6 }, (_, i) => conversation(`c${i}`, 40));
    for (const c of conversations) await c.turn(client);
    expect(conversations.map((c) => c.replicas[0])).toEqual(["gpu0", "gpu1", "gpu0", "gpu1", "gpu0", "gpu1"]);

    await first.stop();
    for (const c of conversations) expect((await c.turn(client)).replica).toBe("gpu0");
    // the refused active check is the evidence its cache is gone
    await until(() => logRecords(router, "replica cache lost: forgetting its prefixes")[0], "gpu1's cache declared lost");
    const second = await startSimInProcess("gpu1", { port });
    await until(async () => ((await (await fetch(`${router.url}/health`)).json()) as { healthy: string[] }).healthy.includes("gpu1"), "gpu1 back");

    for (let round = 0; round < 2; round++) {
      for (const c of conversations) {
        const t = await c.turn(client);
        expect([t.replica, t.route]).toEqual(["gpu0", "pin"]);
        expect(t.cached).toBeGreaterThan(0);
      }
    }
    expect(conversations.map((c) => moves(c.replicas))).toEqual([0, 1, 0, 1, 0, 1]);
    // new work reaches the restarted replica again
    const spread = await Promise.all([0, 1].map((i) => client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `new ${i}` }], max_tokens: 1 }).withResponse()));
    expect(spread.map((s) => s.response.headers.get("x-llmroute-replica")).sort()).toEqual(["gpu0", "gpu1"]);
    expect((await second.state()).requests_total).toBeGreaterThan(0);
  });
});

describe.concurrent("health flapping", () => {
  it("does not bounce conversations: those untouched stay with their cache, one served during a flap moves once", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: WATCHED_HEALTH });
    const client = router.client();
    const conversations = Array.from({ length: 6 }, (_, i) => conversation(`c${i}`, 40));
    for (const c of conversations) await c.turn(client);
    const state = async () => ((await (await fetch(`${router.url}/status`)).json()) as { replicas: { name: string; state: string }[] }).replicas[0]!.state;

    for (let flap = 0; flap < 3; flap++) {
      // /health and the API answer 503 "Loading model" until told otherwise
      await gpu0.faults({ startup_delay_ms: 600_000 });
      await until(async () => (await state()) === "down", "gpu0 down");
      // one of gpu0's conversations has a turn while it is down: it moves to gpu1
      if (flap === 0) expect((await conversations[0]!.turn(client)).replica).toBe("gpu1");
      await gpu0.faults({ startup_delay_ms: 0 });
      // its check demoted it, so its next passing check brings it back up
      await until(async () => (await state()) === "up", "gpu0 up again");
    }
    for (let round = 0; round < 2; round++) {
      for (const c of conversations) {
        const t = await c.turn(client);
        expect(t.cached).toBeGreaterThan(0);
      }
    }
    expect(conversations.map((c) => moves(c.replicas))).toEqual([1, 0, 0, 0, 0, 0]);
    expect(conversations[0]!.replicas).toEqual(["gpu0", "gpu1", "gpu1", "gpu1"]);
    expect(conversations[2]!.replicas).toEqual(["gpu0", "gpu0", "gpu0"]);
    expect(logRecords(router, "replica cache lost: forgetting its prefixes")).toHaveLength(0);
    expect(logRecords(router, "replica down").length).toBeGreaterThanOrEqual(3);
  });
});
