/**
 * Responses API state survives errors: a response is stored on one replica only, so a
 * follow-up (previous_response_id) and GET/DELETE /v1/responses/{id} go there; when that
 * replica cannot take it, the client gets 503 with retry-after — never a 404 from a
 * replica that never saw the response.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { startRouterInProcess, startSimInProcess, type LocalSim, type Router } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

// Each test starts its own fleet (router and sims in this process: the routing is the
// subject) and they run concurrently, so everything is stopped once, at the end.
afterAll(killAll);

async function fleetWithAResponse(): Promise<{ router: Router; client: OpenAI; owner: LocalSim; other: LocalSim; id: string }> {
  const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
  const router = await startRouterInProcess([gpu0, gpu1]);
  const client = router.client();
  const first = await client.responses.create({ model: "sim-model", input: `remember ${crypto.randomUUID()}`, max_output_tokens: 2 }).withResponse();
  const owner = first.response.headers.get("x-llmroute-replica") === "gpu0" ? gpu0 : gpu1;
  return { router, client, owner, other: owner === gpu0 ? gpu1 : gpu0, id: first.data.id };
}

const followUp = (client: OpenAI, id: string, i: number) =>
  client.responses.create({ model: "sim-model", input: `and ${i}`, previous_response_id: id, max_output_tokens: 2 }).withResponse();

describe.concurrent("previous_response_id", () => {
  it("a 503 on an unrelated request to the owner does not move or break the chain", async () => {
    const { client, owner, id } = await fleetWithAResponse();
    await owner.faults({ fail_next: 1 });
    // the counter's next pick is the other replica, then the owner: two one-shots meet the 503 once
    for (let i = 0; i < 2; i++) await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: `x${i}` }], max_tokens: 1 });
    expect((await owner.state()).faulted_total).toBe(1);
    for (let i = 0; i < 4; i++) {
      const next = await followUp(client, id, i);
      expect([next.response.status, next.response.headers.get("x-llmroute-replica"), next.response.headers.get("x-llmroute-route")]).toEqual([200, owner.name, "sticky"]);
      expect(next.data.usage?.input_tokens_details?.cached_tokens).toBeGreaterThan(0);
    }
  });

  it("the owner fails the follow-up: 503 with retry-after, and no other replica is asked", async () => {
    const { client, owner, other, id } = await fleetWithAResponse();
    await owner.faults({ fail_next: 1 });
    const before = (await other.state()).requests_total;
    const error = await followUp(client, id, 0).catch((e) => e);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(error.status).toBe(503);
    expect(error.headers.get("retry-after")).toBe("2");
    expect(error.error.message).toBe(`response ${id} is stored on replica ${owner.name}, which cannot take requests now (${owner.name}: HTTP 503); its state exists only there: retry later`);
    expect((await other.state()).requests_total).toBe(before);
    // a blip: the next follow-up is served where the state is
    expect((await followUp(client, id, 1)).response.headers.get("x-llmroute-replica")).toBe(owner.name);
  });

  it("the owner is gone: 503 with retry-after at once, never a 404 from a replica that never saw the response", async () => {
    const { client, owner, other, id } = await fleetWithAResponse();
    await owner.stop(); // its port closed, as when its process dies
    const before = (await other.state()).requests_total;
    for (let i = 0; i < 3; i++) {
      const error = await followUp(client, id, i).catch((e) => e);
      expect([error.status, error.headers.get("retry-after")]).toEqual([503, "2"]);
    }
    expect((await other.state()).requests_total).toBe(before);
  });
});

describe.concurrent("GET and DELETE /v1/responses/{id}", () => {
  it("go to the replica that holds the response, every time (not round-robin)", async () => {
    const { router, owner, id } = await fleetWithAResponse();
    for (const [method, path] of [
      ["GET", `/v1/responses/${id}`],
      ["GET", `/v1/responses/${id}/input_items`],
      ["GET", `/v1/responses/${id}`],
      ["DELETE", `/v1/responses/${id}`],
    ]) {
      const res = await fetch(`${router.url}${path}`, { method });
      expect([res.headers.get("x-llmroute-replica"), res.headers.get("x-llmroute-route")]).toEqual([owner.name, "sticky"]);
    }
  });

  it("an id the router never saw is sent by the policy (a replica may still know it)", async () => {
    const { router } = await fleetWithAResponse();
    const res = await fetch(`${router.url}/v1/responses/resp_unknown`);
    expect(res.headers.get("x-llmroute-route")).toBe("spread");
  });
});
