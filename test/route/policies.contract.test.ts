/**
 * One contract for every policy (hono's common.case pattern): never a down replica, never
 * a name outside the pool, no choice from an empty or all-down pool, deterministic for a
 * given state. Then properties checked over random fleets and requests with fast-check.
 */
import { describe, expect, it } from "bun:test";
import fc from "fast-check";
import { POLICY_NAMES } from "../../src/route/options.ts";
import { chat, conversation, fleet, input, router, send } from "./_fixtures.ts";

const requests = [
  chat([{ role: "user", content: "one-shot" }]),
  chat([{ role: "system", content: "S" }, { role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: "q2" }]),
  input("/v1/completions", { model: "m", prompt: "complete me" }),
  input("/v1/embeddings", { model: "m", input: "embed me" }),
  input("/v1/responses", { model: "m", input: "hi", previous_response_id: "resp_x" }),
  input("/v1/models", {}),
];

describe.each(POLICY_NAMES.map((p) => [p]))("contract: %s", (policy) => {
  it("an empty pool has no choice", () => {
    expect(router(policy).route(requests[0]!, [])).toBeUndefined();
  });

  it("an all-down pool has no choice", () => {
    const replicas = fleet(3, [{ healthy: false }, { healthy: false }, { healthy: false }]);
    for (const req of requests) expect(router(policy).route(req, replicas)).toBeUndefined();
  });

  it("with one replica down, every request goes to a live one", () => {
    for (const down of [0, 1, 2]) {
      const r = router(policy);
      const replicas = fleet(3);
      replicas[down]!.healthy = false;
      for (let i = 0; i < 3; i++) {
        for (const req of requests) {
          const d = send(r, req, replicas, i);
          expect(d).toBeDefined();
          expect(d!.replica).not.toBe(`gpu${down}`);
        }
      }
    }
  });

  it("the only live replica is chosen", () => {
    const replicas = fleet(2, [{ healthy: false }]);
    for (const req of requests) expect(router(policy).route(req, replicas)?.replica).toBe("gpu1");
  });

  it("is deterministic for a given state", () => {
    const a = router(policy);
    const b = router(policy);
    const ra = fleet(3);
    const rb = fleet(3);
    const convo = conversation("sys", "start");
    for (let turn = 0; turn < 6; turn++) {
      const req = turn % 2 ? chat(convo.messages) : requests[turn % requests.length]!;
      expect(send(a, req, ra, turn)).toEqual(send(b, req, rb, turn)!);
      convo.next(turn);
    }
  });

  it("property: never a down replica, always a member of the pool", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ healthy: fc.boolean(), inflight: fc.nat(8), queuedTokens: fc.nat(100_000) }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.tuple(fc.nat(requests.length - 1), fc.nat(5)), { minLength: 1, maxLength: 12 }),
        (states, picks) => {
          const r = router(policy, { maxInflight: 3 });
          const replicas = fleet(states.length, states.map((s) => ({ ...s, load: s.inflight })));
          const names = new Set(replicas.filter((x) => x.healthy).map((x) => x.name));
          for (const [i, t] of picks) {
            const d = send(r, requests[i]!, replicas, t);
            if (names.size === 0) expect(d).toBeUndefined();
            else expect(names.has(d!.replica)).toBe(true);
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe("property: identity ignores JSON formatting", () => {
  const jsonValue = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small" },
      fc.string(),
      fc.integer(),
      fc.boolean(),
      fc.constant(null),
      fc.array(tie("value"), { maxLength: 3 }),
      fc.dictionary(fc.string({ minLength: 1, maxLength: 5 }), tie("value"), { maxKeys: 3 }),
    ),
  })).value;

  /** Re-serialise with other whitespace and reversed key order at every level. */
  function reformat(v: unknown): unknown {
    if (Array.isArray(v)) return v.map(reformat);
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, reformat(x)]));
    }
    return v;
  }

  it("same messages, reordered keys and re-indented JSON → same chain", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ role: fc.constantFrom("system", "user", "assistant", "tool"), content: fc.oneof(fc.string(), jsonValue) }),
          { minLength: 1, maxLength: 5 },
        ),
        fc.option(jsonValue, { nil: undefined }),
        (messages, tools) => {
          const body = { model: "m", messages, ...(tools === undefined ? {} : { tools }) };
          const bytesA = JSON.stringify(body);
          const bytesB = JSON.stringify(reformat(body), null, 3);
          const a = input("/v1/chat/completions", JSON.parse(bytesA));
          const b = input("/v1/chat/completions", JSON.parse(bytesB));
          expect(b.chains).toEqual(a.chains);
        },
      ),
      { numRuns: 200 },
    );
  });
});
