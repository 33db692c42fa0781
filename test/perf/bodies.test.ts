import { describe, expect, it } from "bun:test";
import { agentChat, conversationTurns, smallChat } from "../../perf/lib/bodies.ts";

describe("bodies", () => {
  it("an agent chat's JSON is the size asked for (within 0.2 %), the same every time, different per index", () => {
    for (const i of [0, 5]) {
      const text = JSON.stringify(agentChat(i, 339_000));
      expect(Math.abs(text.length - 339_000)).toBeLessThanOrEqual(678);
      expect(JSON.stringify(agentChat(i, 339_000))).toBe(text);
    }
    expect(JSON.stringify(agentChat(0, 339_000))).not.toBe(JSON.stringify(agentChat(1, 339_000)));
  });

  it("an agent chat is a continuation of many turns, ending with the user", () => {
    const { messages } = agentChat(0, 339_000);
    expect(messages).toHaveLength(62);
    expect(messages.at(-1)).toEqual({ role: "user", content: "continue" });
  });

  it("a small chat is about 1 KB; a streamed one asks for usage, so a router has nothing to add", () => {
    expect(JSON.stringify(smallChat(3)).length).toBeGreaterThan(700);
    expect(JSON.stringify(smallChat(3)).length).toBeLessThan(1400);
    expect(smallChat(3, true)).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(smallChat(3).stream_options).toBeUndefined();
  });

  it("a conversation's three turns each extend the one before", () => {
    const turns = conversationTurns(42);
    expect(turns.map((t) => t.length)).toEqual([2, 4, 6]);
    expect(turns[2]!.slice(0, 4)).toEqual(turns[1]!);
    expect(turns[1]!.slice(0, 2)).toEqual(turns[0]!);
    expect(conversationTurns(42)).toEqual(turns);
    expect(conversationTurns(42 + 16)[0]![0]).toEqual(turns[0]![0]); // a shared system prompt
  });
});
