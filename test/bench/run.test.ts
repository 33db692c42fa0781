/**
 * The runner's conversation client against a scripted arm: what each turn puts on the wire
 * (the previous replies as returned, the tools) and what each sample records (delivered
 * from the sim's own account, usage's figure beside it, the sim's stop, the router's
 * verdict). No network, no clock: the arm answers at once.
 */
import { describe, expect, it } from "bun:test";
import type { Outcome } from "../../src/bench/client.ts";
import { armLine, driveConversation, setupLabel, silentProgress, toolsFor, type DriveContext } from "../../src/bench/run.ts";
import type { Arm } from "../../src/bench/targets.ts";
import { AGENT_TOOLS, agentPlan, type ChatMessage } from "../../src/bench/workloads.ts";

const spec = { contextTokens: 3_000, turns: 3, turnTokens: 100, replyTokens: 8, systemTokens: 100 };

/** An arm that records every body and answers turn k with `answer(k)`. */
function scriptedArm(answer: (turn: number) => Partial<Outcome>): { arm: Arm; bodies: Record<string, unknown>[] } {
  const bodies: Record<string, unknown>[] = [];
  const arm: Arm = {
    name: "hybrid",
    async send(body) {
      bodies.push(body);
      const turn = bodies.length;
      return { replica: "gpu0", route: "pin", status: 200, ttftMs: 1, totalMs: 2, text: `answer ${turn}`, promptTokens: 1_000, cachedTokens: 0, cachedReported: false, completionTokens: 8, ...answer(turn) };
    },
    stop: async () => {},
  };
  return { arm, bodies };
}

function context(arm: Arm, tools?: readonly unknown[]): DriveContext {
  return { arm, model: "m", run: "r1", salt: "salt", ...(tools ? { tools } : {}), scale: 1, now: () => 0, until: async () => {}, progress: silentProgress };
}

const messagesOf = (body: Record<string, unknown>) => body.messages as ChatMessage[];

describe("driveConversation", () => {
  it("waits each turn's tool time before the next turn, and none after the last", async () => {
    const { arm, bodies } = scriptedArm(() => ({}));
    let clock = 0;
    const sentAt: number[] = [];
    const waits: number[] = [];
    const ctx: DriveContext = {
      ...context(arm),
      now: () => clock,
      until: async (at) => {
        waits.push(at - clock);
        clock = at;
      },
    };
    const counted = { ...arm, send: async (body: Record<string, unknown>) => (sentAt.push(clock), arm.send(body)) };
    await driveConversation({ ...ctx, arm: counted }, agentPlan(spec, "salt"), 3, 0, "agent", undefined, (turn) => turn * 1_000);
    expect(bodies.length).toBe(3);
    expect(waits).toEqual([1_000, 2_000]);
    expect(sentAt).toEqual([0, 1_000, 3_000]);
  });

  it("sends each reply back as returned: R1's content with its </think>, reasoning in the field it came in", async () => {
    const { arm, bodies } = scriptedArm((turn) =>
      turn === 1 ? { text: "  mm\n</think>\n\nfirst" } : { text: `answer ${turn}`, reasoning: { text: `thought ${turn}`, field: "reasoning_content" } },
    );
    await driveConversation(context(arm), agentPlan(spec, "salt"), 3, 0, "agent");
    expect(bodies.length).toBe(3);
    const third = messagesOf(bodies[2]!);
    expect(third.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant", "user"]);
    expect(third[2]).toEqual({ role: "assistant", content: "  mm\n</think>\n\nfirst" });
    expect(third[4]).toEqual({ role: "assistant", content: "answer 2", reasoning_content: "thought 2" });
    // Each turn re-sends the previous one whole.
    expect(messagesOf(bodies[1]!)).toEqual(third.slice(0, 4));
  });

  it("declares the tools on every turn when the context has them, and none otherwise", async () => {
    const withTools = scriptedArm(() => ({}));
    await driveConversation(context(withTools.arm, AGENT_TOOLS), agentPlan(spec, "salt"), 3, 0, "agent");
    expect(withTools.bodies.every((b) => b.tools === AGENT_TOOLS)).toBe(true);
    const plain = scriptedArm(() => ({}));
    await driveConversation(context(plain.arm), agentPlan(spec, "salt"), 3, 0, "agent");
    expect(plain.bodies.some((b) => "tools" in b)).toBe(false);
  });

  it("records delivered as the sim's own figure, usage's beside it when reported, the sim's stop and the router's verdict", async () => {
    const { arm } = scriptedArm((turn) =>
      turn === 1
        ? { sim: { cachedTokens: 0, stop: "new", heldTokens: 0 } }
        : turn === 2
          ? { sim: { cachedTokens: 960, stop: "new", heldTokens: 960 }, verdict: "hit" } // vLLM default: usage has no cached figure
          : { sim: { cachedTokens: 0, stop: "evicted", heldTokens: 900 }, cachedTokens: 0, cachedReported: true, verdict: "miss" },
    );
    const samples = await driveConversation(context(arm), agentPlan(spec, "salt"), 3, 0, "agent");
    expect(samples.map((s) => [s.cachedTokens, s.reportedCachedTokens, s.simStop, s.simHeld, s.verdict])).toEqual([
      [0, undefined, "new", 0, undefined],
      [960, undefined, "new", 960, "hit"],
      [0, 0, "evicted", 900, "miss"],
    ]);
  });

  it("on real replicas (no x-sim-prefix) delivered is usage's cached_tokens", async () => {
    const { arm } = scriptedArm(() => ({ cachedTokens: 640, cachedReported: true }));
    const [first] = await driveConversation(context(arm), agentPlan(spec, "salt"), 2, 0, "agent");
    expect([first!.cachedTokens, first!.reportedCachedTokens, first!.simStop]).toEqual([640, 640, undefined]);
  });
});

describe("engine setups", () => {
  it.each([
    [{ engine: "vllm-details", template: "chatml" }, "vllm-details"],
    [{ engine: "sglang", template: "qwen3-reasoning" }, "sglang · qwen3-reasoning"],
    [undefined, undefined],
  ] as const)("%j is labelled %p", (sim, label) => {
    expect(setupLabel(sim)).toBe(label);
  });

  it("tools go with the conversations under the non-ChatML templates only", () => {
    expect(toolsFor("chatml")).toBeUndefined();
    expect(toolsFor(undefined)).toBeUndefined();
    for (const t of ["mistral3-tools", "deepseek-r1", "qwen3-reasoning"] as const) expect(toolsFor(t)).toBe(AGENT_TOOLS);
  });

  it("a finished arm's progress line names its engine setup", () => {
    const arm = { arm: "hybrid" as const, samples: [], bursts: [], wallMs: 1_000 };
    expect(armLine("agent", arm, ["gpu0"], true, "llamacpp · deepseek-r1")).toBe("llamacpp · deepseek-r1 · agent · hybrid: no samples · 1.00 s model");
    expect(armLine("agent", arm, ["gpu0"], false)).toBe("agent · hybrid: no samples · 1.00 s");
  });
});
