import { describe, expect, it } from "bun:test";
import { endpointOf, shapeOf } from "../../src/route/shape.ts";

const chatShape = (body: unknown, tenant?: string) => shapeOf("chat", body, { tenant });
const segments = (s: ReturnType<typeof shapeOf>) => s.sequences[0] ?? [];

describe("continuation: carries an earlier turn, not merely several messages", () => {
  it.each([
    ["system + user one-shot", [{ role: "system", content: "s" }, { role: "user", content: "q" }], false],
    ["single user message", [{ role: "user", content: "q" }], false],
    ["two user messages, no answer yet", [{ role: "user", content: "a" }, { role: "user", content: "b" }], false],
    ["after an assistant turn", [{ role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: "q2" }], true],
    ["after a tool result", [{ role: "user", content: "q" }, { role: "tool", content: "42", tool_call_id: "c1" }], true],
  ])("chat: %s → %p", (_name, messages, expected) => {
    expect(chatShape({ model: "m", messages }).continuation).toBe(expected);
  });

  it("anthropic: system + user is not a continuation; an assistant turn or a tool_result is", () => {
    const base = { model: "m", system: "be brief", max_tokens: 8 };
    expect(shapeOf("messages", { ...base, messages: [{ role: "user", content: "hi" }] }).continuation).toBe(false);
    expect(
      shapeOf("messages", {
        ...base,
        messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "ok" }] }],
      }).continuation,
    ).toBe(true);
    expect(
      shapeOf("messages", { ...base, messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }] }).continuation,
    ).toBe(true);
  });

  it("responses: previous_response_id or a function call output is a continuation", () => {
    expect(shapeOf("responses", { model: "m", input: "hi" }).continuation).toBe(false);
    const chained = shapeOf("responses", { model: "m", input: "more", previous_response_id: "resp_1" });
    expect(chained.continuation).toBe(true);
    expect(chained.previousResponseId).toBe("resp_1");
    expect(
      shapeOf("responses", { model: "m", input: [{ type: "function_call_output", call_id: "c", output: "1" }] }).continuation,
    ).toBe(true);
  });

  it("completions and embeddings are not continuations by shape (the router asks its index: see router.test.ts)", () => {
    expect(shapeOf("completions", { model: "m", prompt: "User: hi\nAssistant: hello\nUser:" }).continuation).toBe(false);
    expect(shapeOf("embeddings", { model: "m", input: ["a", "b"] }).continuation).toBe(false);
  });
});

describe("segments", () => {
  it("anthropic's top-level system comes first, then the messages", () => {
    const s = shapeOf("messages", { model: "m", system: [{ type: "text", text: "SYS" }], messages: [{ role: "user", content: "U" }] });
    expect(segments(s)[0]).toEqual(["system\u001e", "SYS"]);
    expect(segments(s)[1]).toEqual(["user\u001e", "U"]);
  });

  it("a text-only content array has the identity of the same plain string", () => {
    const a = chatShape({ model: "m", messages: [{ role: "user", content: "hello world" }] });
    const b = chatShape({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "hello " }, { type: "text", text: "world" }] }] });
    expect(a.sequences).toEqual(b.sequences);
  });

  it("tool calls are part of the message; their key order is not", () => {
    const call = (args: Record<string, unknown>) => ({
      model: "m",
      messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: args }] }],
    });
    const a = chatShape(call({ name: "f", arguments: "{}" }));
    const b = chatShape(call({ arguments: "{}", name: "f" }));
    const c = chatShape(call({ name: "g", arguments: "{}" }));
    expect(a.sequences).toEqual(b.sequences);
    expect(a.sequences).not.toEqual(c.sequences);
  });

  it("completions: a prompt string is one sequence; a batch is one sequence per prompt", () => {
    expect(shapeOf("completions", { prompt: "abc" }).sequences).toEqual([[["", "abc"]]]);
    expect(shapeOf("completions", { prompt: ["a", "b"] }).sequences).toEqual([[["", "a"]], [["", "b"]]]);
    expect(shapeOf("completions", { prompt: [1, 2, 3] }).sequences).toEqual([[["", "[1,2,3]"]]]);
    expect(shapeOf("completions", { prompt: [[1, 2], [3]] }).sequences).toEqual([[["", "[1,2]"]], [["", "[3]"]]]);
    expect(shapeOf("embeddings", { input: ["x", "y", "z"] }).sequences).toHaveLength(3);
  });
});

describe("tenant (isolation) and session (a soft hint)", () => {
  it.each([
    [{ cache_salt: "s1" }, undefined, true],
    [{}, "team-a", true],
    [{ prompt_cache_key: "acme" }, undefined, false],
    [{}, undefined, false],
  ])("body %p, header %p → tenant set: %p", (extra, header, set) => {
    const s = chatShape({ model: "m", messages: [{ role: "user", content: "q" }], ...extra }, header);
    expect(s.tenant !== "").toBe(set);
  });

  it.each([
    ["chat", { prompt_cache_key: "pk" }, undefined, "pk"],
    ["chat", { prompt_cache_key: "pk" }, "hdr", "hdr"],
    ["messages", { metadata: { user_id: "u-1" } }, undefined, "u-1"],
    ["chat", { metadata: { user_id: "u-1" } }, undefined, undefined],
    ["chat", {}, undefined, undefined],
  ] as const)("%s body %p, x-session-id %p → session %p", (endpoint, extra, header, session) => {
    expect(shapeOf(endpoint, { model: "m", messages: [{ role: "user", content: "q" }], ...extra }, { session: header }).session).toBe(session);
  });
});

describe("endpointOf", () => {
  it.each([
    ["/v1/chat/completions", "chat"],
    ["/v1/completions", "completions"],
    ["/v1/embeddings", "embeddings"],
    ["/v1/responses", "responses"],
    ["/v1/messages", "messages"],
    ["/v1/audio/speech", "other"],
  ])("%s → %s", (path, endpoint) => expect(endpointOf(path)).toBe(endpoint as ReturnType<typeof endpointOf>));
});

it("model, stream and garbage bodies", () => {
  expect(chatShape({ model: "x", stream: true, messages: [] })).toMatchObject({ model: "x", stream: true, sequences: [] });
  expect(chatShape("not an object")).toMatchObject({ stream: false, sequences: [], continuation: false });
  expect(segments(chatShape({ messages: [null, 3, { role: "user", content: "ok" }] }))).toHaveLength(1);
});
