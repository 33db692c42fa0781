/**
 * llama.cpp keeps one prompt per slot and never gives a request a busy slot (server-context.cpp
 * get_available_slot): a request for a document another request is still using there prefills
 * it again in another slot. hybrid holds it at the router until that slot frees, when that is
 * sooner than the prefill. A real router and llama.cpp sims on loopback ports, in this process.
 */
import { afterAll, afterEach, describe, expect, it, spyOn } from "bun:test";
import { logRecords, startRouterInProcess, startSimInProcess, until, type LocalRouter, type LocalSim } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterEach(killAll);
afterAll(killAll);

// A ~4,000-token document at 1,000 tokens a second: a cold prefill of ~4 s. Answers at 50
// tokens a second: the first, of 4 tokens, times this card's generations at ~0.1 s; the
// second, of 60, runs ~1.2 s. So waiting for the slot that holds the document is sooner than
// prefilling it again, however slow the machine.
const llama = { engine: "llamacpp", kvTokens: 32_768, prefillTps: 1_000, decodeTps: 50 } as const;

/** A router in front of `cards` llama.cpp sims (`extra` added to their options), once it has recognised them all. */
async function fleetOf(toml = "", cards = 2, extra: { parallel?: number } = {}, onSims?: (sims: LocalSim[]) => void): Promise<LocalRouter> {
  const sims = await Promise.all(Array.from({ length: cards }, (_, i) => startSimInProcess(`gpu${i}`, { ...llama, ...extra })));
  onSims?.(sims);
  const router = await startRouterInProcess(sims, { toml });
  const status = async () => (await (await fetch(`${router.url}/status`)).json()) as { replicas: { engine?: { family?: string } }[] };
  await until(async () => ((await status()).replicas.every((r) => r.engine?.family === "llamacpp") ? true : undefined), "the router's discovery of the llama.cpp engines");
  return router;
}

type Answer = { replica: string; route: string; prefix: string };

/** Questions on one document, streamed; `events` records each one's first token and end, in order. */
function documentAsker(router: LocalRouter) {
  const doc = `${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(600)}`;
  const events: string[] = [];
  const ask = async (q: string, maxTokens: number, onFirst?: () => void): Promise<Answer> => {
    const { data, response } = await router
      .client()
      .chat.completions.create({ model: "sim-model", messages: [{ role: "system", content: doc }, { role: "user", content: q }], max_tokens: maxTokens, stream: true })
      .withResponse();
    let first = true;
    for await (const chunk of data) {
      if (first && (chunk.choices[0]?.delta?.content ?? "") !== "") {
        first = false;
        events.push(`${q} first`);
        onFirst?.();
      }
    }
    events.push(`${q} end`);
    const h = (name: string) => response.headers.get(name) ?? "";
    return { replica: h("x-llmroute-replica"), route: h("x-llmroute-route"), prefix: h("x-sim-prefix") };
  };
  return { doc, events, ask };
}

/**
 * q1 (4 tokens) warms a card and times its generations; q2 (`secondTokens`) runs there; at
 * q2's first token, `others` more questions are sent, while q2's slot is busy.
 */
async function whileBusy(router: LocalRouter, others: string[], secondTokens = 60) {
  const { events, ask } = documentAsker(router);
  const q1 = await ask("q1", 4);
  let rest: Promise<Answer[]> | undefined;
  const q2 = await ask("q2", secondTokens, () => (rest = Promise.all(others.map((q) => ask(q, 4)))));
  return { q1, q2, rest: await rest!, events };
}

const cachedOf = (prefix: string) => Number(/cached=(\d+)/.exec(prefix)?.[1]);

describe("a document whose llama.cpp slot is busy", () => {
  it("hybrid holds the next request for that slot: it waits for the running one to end, then finds the document cached", async () => {
    const router = await fleetOf();
    const { q1, q2, rest, events } = await whileBusy(router, ["q3"]);
    const [q3] = rest as [Answer];

    expect(q1.route).toBe("spread");
    expect(q2).toMatchObject({ replica: q1.replica, route: "cache" });
    expect(q3).toMatchObject({ replica: q1.replica, route: "cache,held" });
    // It was sent after q2 ended, to the slot q2 left: the document (~4,000 tokens) was cached.
    expect(events.indexOf("q2 end")).toBeLessThan(events.indexOf("q3 first"));
    expect(q3.prefix).toContain("stop=new"); // its hit ends where its own question starts
    expect(cachedOf(q3.prefix)).toBeGreaterThan(3_500);
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`llmroute_slot_holds_total\\{replica="${q1.replica}"\\} 1\\b`));
    const heldSeconds = Number(new RegExp(`llmroute_slot_held_seconds_total\\{replica="${q1.replica}"\\} ([\\d.e-]+)`).exec(metrics)?.[1]);
    expect(heldSeconds).toBeGreaterThan(0);
  });

  it("two held for one slot: the first takes it when it frees, the second waits for that one in turn; both find the document cached", async () => {
    const router = await fleetOf();
    const { q1, rest, events } = await whileBusy(router, ["q3", "q4"]);

    for (const q of rest) {
      expect(q).toMatchObject({ replica: q1.replica, route: "cache,held" });
      expect(cachedOf(q.prefix)).toBeGreaterThan(3_500);
    }
    // One after the other in the same slot: whichever went first ended before the other began.
    const [firstEnd, secondFirst] = events.indexOf("q3 first") < events.indexOf("q4 first") ? ["q3 end", "q4 first"] : ["q4 end", "q3 first"];
    expect(events.indexOf(firstEnd)).toBeLessThan(events.indexOf(secondFirst));
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`llmroute_slot_holds_total\\{replica="${q1.replica}"\\} 2\\b`));
  });

  it("not held when the running answer is expected to take longer than the prefill it would save", async () => {
    const router = await fleetOf();
    const { events, ask } = documentAsker(router);
    // Generations here take ~6 s (300 tokens at 50 a second), the document's prefill ~4 s.
    const q1 = await ask("q1", 300);
    let third: Promise<Answer> | undefined;
    await ask("q2", 300, () => (third = ask("q3", 4)));
    const q3 = await third!;
    expect(q3.replica).toBe(q1.replica);
    expect(q3.route).toBe("cache");
    expect(events.indexOf("q3 first")).toBeLessThan(events.indexOf("q2 end"));
    expect(q3.prefix).toContain("stop=elsewhere");
  });

  it("every slot taken: not held — llama.cpp queues it itself and gives it the slot that frees, which holds the document", async () => {
    // One card of two slots: a long answer on another document keeps one, q2 the other.
    const router = await fleetOf("", 1, { parallel: 2 });
    const { events, ask } = documentAsker(router);
    const other = documentAsker(router);
    await ask("q1", 4); // the document in one slot; this card's generations timed
    let second: Promise<Answer> | undefined;
    let third: Promise<Answer> | undefined;
    // ~4 s on another document in the other slot; at its first token q2 takes the document's
    // slot (~1.2 s), and at q2's first token q3 comes: both slots are taken.
    const long = other.ask("long", 200, () => (second = ask("q2", 60, () => (third = ask("q3", 4)))));
    const q3 = await until(() => third, "q3's answer");
    expect(q3.route).toBe("cache");
    expect(events.indexOf("q2 end")).toBeLessThan(events.indexOf("q3 first"));
    expect(cachedOf(q3.prefix)).toBeGreaterThan(3_500);
    await Promise.all([second, long]);
  });

  it("a client that leaves while held: the router answers 499 and logs it with the card and route it was held for", async () => {
    const router = await fleetOf();
    const { doc, ask } = documentAsker(router);
    const q1 = await ask("q1", 4);
    const gone = new AbortController();
    let sent: Promise<unknown> | undefined;
    const q2 = ask("q2", 100, () => {
      sent = fetch(`${router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "sim-model", messages: [{ role: "system", content: doc }, { role: "user", content: "q3" }], max_tokens: 4, stream: true }),
        signal: gone.signal,
      }).catch((error: unknown) => error);
    });
    // The card the document is on: the other card's counter (0) may come first in /metrics.
    const holds = async () => Number(new RegExp(`llmroute_slot_holds_total\\{replica="${q1.replica}"\\} (\\d+)`).exec(await (await fetch(`${router.url}/metrics`)).text())?.[1] ?? 0);
    await until(async () => ((await holds()) >= 1 ? true : undefined), "q3 held");
    gone.abort();
    await sent;
    const record = await until(() => logRecords(router, "request").find((r) => r.status === 499), "the router's record of the request that left");
    expect(record).toMatchObject({ replica: q1.replica, route: "cache,held", outcome: "client_cancelled" });
    await q2; // the answer it was held for runs on, untouched
  });

  it("two requests committed in one millisecond: the next question on the document is not held for the other one's slot", async () => {
    let sims: LocalSim[] = [];
    const router = await fleetOf("", 1, {}, (s) => (sims = s));
    const [gpu0] = sims as [LocalSim];
    const { ask } = documentAsker(router);
    const q1 = await ask("q1", 4); // the document in a slot; this card's generations timed
    // An unrelated request, held at the engine before its first byte, and q2 on the document
    // are committed in the same millisecond (the router's clock stands still meanwhile).
    await gpu0.faults({ stall_ms: 600_000, stall_next: 1 });
    const clock = spyOn(Date, "now").mockReturnValue(Date.now());
    let unrelated: Promise<unknown> | undefined;
    let q2: Answer;
    try {
      unrelated = fetch(`${router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: `unrelated ${crypto.randomUUID()}` }], max_tokens: 4, stream: true }),
      }).catch((error: unknown) => error);
      await until(async () => ((await (await fetch(`${gpu0.url}/sim/faults`)).json()) as { stall_next: number }).stall_next === 0, "the unrelated request to stall at the engine");
      q2 = await ask("q2", 4);
    } finally {
      clock.mockRestore();
    }
    // q2 ended; its slot keeps the document. The unrelated request still runs.
    const q3 = await ask("q3", 4);
    expect(q2).toMatchObject({ replica: q1.replica, route: "cache" });
    expect(q3).toMatchObject({ replica: q1.replica, route: "cache" });
    expect(cachedOf(q3.prefix)).toBeGreaterThan(3_500);
    await gpu0.faults({ stall_ms: 0 });
    expect(await unrelated).toMatchObject({ status: 200 });
  });

  it("a policy that does not wait (affinity) sends it at once: the engine gives it another slot, which prefills the document again", async () => {
    const router = await fleetOf('[routing]\npolicy = "affinity"\n');
    const { q1, rest } = await whileBusy(router, ["q3"]);
    const [q3] = rest as [Answer];

    expect(q3.replica).toBe(q1.replica);
    expect(q3.route).not.toContain("held");
    // Held on that card, but in the busy slot: nothing cached.
    expect(q3.prefix).toContain("stop=elsewhere");
    expect(cachedOf(q3.prefix)).toBe(0);
  });
});
