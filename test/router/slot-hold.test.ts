/**
 * llama.cpp keeps one prompt per slot and never gives a request a busy slot (server-context.cpp
 * get_available_slot): a request for a document another request is still using there prefills
 * it again in another slot. hybrid holds it at the router until that slot frees, when that is
 * sooner than the prefill. A real router and llama.cpp sims on loopback ports, in this process.
 */
import { afterAll, afterEach, describe, expect, it } from "bun:test";
import { startRouterInProcess, startSimInProcess, until, type LocalRouter } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterEach(killAll);
afterAll(killAll);

// A ~4,000-token document at 1,000 tokens a second: a cold prefill of ~4 s. An answer of 20
// tokens at 50 a second: ~0.4 s. So waiting for the slot that holds the document is far sooner
// than prefilling it again, however slow the machine.
const llama = { engine: "llamacpp", kvTokens: 32_768, prefillTps: 1_000, decodeTps: 50 } as const;

async function discovered(router: LocalRouter): Promise<void> {
  const status = async () => (await (await fetch(`${router.url}/status`)).json()) as { replicas: { engine?: { family?: string } }[] };
  await until(async () => ((await status()).replicas.every((r) => r.engine?.family === "llamacpp") ? true : undefined), "the router's discovery of both llama.cpp engines");
}

/**
 * Three questions on one document: the first warms a card; the second runs there; the third is
 * sent once the second's first token arrives, while its slot is busy. Returns each answer's card,
 * route and the sim's account of its cache hit, and the order in which things happened.
 */
async function threeQuestions(router: LocalRouter) {
  const doc = `${crypto.randomUUID()} ${"lorem ipsum dolor sit amet ".repeat(600)}`;
  const events: string[] = [];
  const ask = async (q: string, maxTokens: number, onFirst?: () => void) => {
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
  const q1 = await ask("q1", 4);
  let third: Promise<Awaited<ReturnType<typeof ask>>> | undefined;
  const q2 = await ask("q2", 20, () => (third = ask("q3", 4)));
  const q3 = await third!;
  return { q1, q2, q3, events };
}

const cachedOf = (prefix: string) => Number(/cached=(\d+)/.exec(prefix)?.[1]);

describe("a document whose llama.cpp slot is busy", () => {
  it("hybrid holds the next request for that slot: it waits for the running one to end, then finds the document cached", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", llama), startSimInProcess("gpu1", llama)]);
    const router = await startRouterInProcess([gpu0, gpu1]);
    await discovered(router);
    const { q1, q2, q3, events } = await threeQuestions(router);

    expect(q1.route).toBe("spread");
    expect(q2).toMatchObject({ replica: q1.replica, route: "cache" });
    expect(q3).toMatchObject({ replica: q1.replica, route: "cache,held" });
    // It was sent after q2 ended, to the slot q2 left: the document (~4,000 tokens) was cached.
    expect(events.indexOf("q2 end")).toBeLessThan(events.indexOf("q3 first"));
    expect(q3.prefix).toContain("stop=new"); // its hit ends where its own question starts
    expect(cachedOf(q3.prefix)).toBeGreaterThan(3_500);
    const metrics = await (await fetch(`${router.url}/metrics`)).text();
    expect(metrics).toMatch(new RegExp(`llmroute_slot_holds_total\\{replica="${q1.replica}"\\} 1\\b`));
  });

  it("a policy that does not wait (affinity) sends it at once: the engine gives it another slot, which prefills the document again", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0", llama), startSimInProcess("gpu1", llama)]);
    const router = await startRouterInProcess([gpu0, gpu1], { toml: '[routing]\npolicy = "affinity"\n' });
    await discovered(router);
    const { q1, q3 } = await threeQuestions(router);

    expect(q3.replica).toBe(q1.replica);
    expect(q3.route).not.toContain("held");
    // Held on that card, but in the busy slot: nothing cached.
    expect(q3.prefix).toContain("stop=elsewhere");
    expect(cachedOf(q3.prefix)).toBe(0);
  });
});
