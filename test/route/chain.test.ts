/** A prompt's prefix chain (src/route/chain.ts): one link per message and per chunk, equal exactly where prompts share text. */
import { describe, expect, it } from "bun:test";
import { chainChars, linkHash, prefixChain, type PrefixChain } from "../../src/route/chain.ts";
import { hex64 } from "../../src/route/hash.ts";
import { chat, hasher, input, only } from "./_fixtures.ts";

describe("prefixChain", () => {
  it("one link per message, and long segments cut every chunk", () => {
    const chain = only(chat([{ role: "system", content: "s" }, { role: "user", content: "x".repeat(2500) }]));
    // system: 1 link; user: "user␞" + 2500 chars = 2505 chars → 3 chunks of 1024
    expect(chain.length).toBe(4);
    expect(chainChars(chain)).toBe("system\u001es".length + "user\u001e".length + 2500);
  });

  it("two requests share exactly the links of their shared messages", () => {
    const a = only(chat([{ role: "system", content: "s" }, { role: "user", content: "a" }]));
    const b = only(chat([{ role: "system", content: "s" }, { role: "user", content: "b" }]));
    expect([a.lo[0], a.hi[0]]).toEqual([b.lo[0]!, b.hi[0]!]);
    expect([a.lo[1], a.hi[1]]).not.toEqual([b.lo[1]!, b.hi[1]!]);
  });

  it("a message split across two messages is not the same prompt as one message", () => {
    const shape = { tenant: "", model: "m" };
    const one = prefixChain({ ...shape, segments: [["", "ab"]] }, hasher, 1);
    const two = prefixChain({ ...shape, segments: [["", "a"], ["", "b"]] }, hasher, 1);
    expect(one.lo.at(-1)).not.toBe(two.lo.at(-1)!);
  });

  it("tenant (header, cache_salt) and model separate identical text; a session key does not", () => {
    const body = { model: "m", messages: [{ role: "user", content: "q" }] };
    const first = (i: ReturnType<typeof input>) => only(i).lo[0];
    const plain = input("/v1/chat/completions", body);
    expect(first(input("/v1/chat/completions", body, { tenant: "team-b" }))).not.toBe(first(plain));
    expect(first(input("/v1/chat/completions", { ...body, cache_salt: "k" }))).not.toBe(first(plain));
    expect(first(input("/v1/chat/completions", { ...body, model: "other" }))).not.toBe(first(plain));
    // The engine shares KV across prompt_cache_key values: so does the identity.
    expect(first(input("/v1/chat/completions", { ...body, prompt_cache_key: "k" }))).toBe(first(plain));
    expect(first(input("/v1/chat/completions", body, { session: "s1" }))).toBe(first(plain));
  });

  it("a request without tools keeps the identity it always had (decision 1: hashes equal across router versions)", () => {
    const hashes = (c: PrefixChain) => Array.from({ length: c.length }, (_, i) => hex64(linkHash(c, i)));
    const call = { id: "c1", type: "function", function: { name: "f", arguments: "{}" } };
    const talk = only(chat([{ role: "system", content: "You are terse." }, { role: "user", content: "x".repeat(2500) }, { role: "assistant", content: "ok", tool_calls: [call] }]));
    // Computed by the identity before tools became a namespace: a change here breaks saved states and clusters of mixed versions.
    expect(hashes(talk)).toEqual(["bcd65fe362959790", "13788f494683dc40", "967d20fe1bfff0d3", "038ffe3cbaaee30d", "a67adf36f7b018b3"]);
    expect([...talk.ends]).toEqual([21, 1050, 2074, 2526, 2622]);
    expect(hashes(only(input("/v1/completions", { model: "m", prompt: "alpha beta" })))).toEqual(["7601e5ed223f8f9a"]);
  });

  it("tools are a namespace, never a prefix: prompts that share only their tools share no link", () => {
    const tools = [{ type: "function", function: { name: "search", description: "searches ".repeat(400), parameters: {} } }];
    const other = [{ type: "function", function: { name: "fetch", parameters: {} } }];
    const talk = (system: string, t: unknown) => only(chat([{ role: "system", content: system }, { role: "user", content: "q" }], t === undefined ? {} : { tools: t }));
    const a = talk("system A", tools);
    // Qwen2.5/3 render tools after the system text, Llama 3.1 in the first user message,
    // Mistral 3 before the last user message: the same tools under another system prompt are
    // no shared tokens.
    expect([a.lo[0], a.hi[0]]).not.toEqual([talk("system B", tools).lo[0]!, talk("system B", tools).hi[0]!]);
    // The same tools and system prompt: the same links, one per message as without tools.
    expect(talk("system A", tools)).toEqual(a);
    expect(a.length).toBe(talk("system A", undefined).length);
    // Other tools change every token after them: nothing shared with the same system prompt.
    expect(a.lo[0]).not.toBe(talk("system A", other).lo[0]!);
    expect(a.lo[0]).not.toBe(talk("system A", undefined).lo[0]!);
    // The tools' characters still count in the prompt's positions (what a hit covers).
    const toolsChars = "tools\u001e".length + chat([{ role: "user", content: "q" }], { tools }).shape.sequences[0]![0]![1].length;
    expect(a.ends[0]).toBe(toolsChars + "system\u001esystem A".length);
    // The links after the tools hash as they did when the tools had a link of their own (computed then).
    const small = only(chat([{ role: "system", content: "You are terse." }, { role: "user", content: "hi" }], { tools: [{ type: "function", function: { name: "f" } }] }));
    expect(Array.from({ length: small.length }, (_, i) => hex64(linkHash(small, i)))).toEqual(["a8b6627b5be0ea1b", "2551923fd5f3c887"]);
    expect([...small.ends]).toEqual([72, 79]);
  });

  it("a batch of prompts gets one chain per prompt, each as if sent alone", () => {
    const batch = input("/v1/completions", { model: "m", prompt: ["alpha", "beta"] });
    const alone = input("/v1/completions", { model: "m", prompt: "beta" });
    expect(batch.chains).toHaveLength(2);
    expect(batch.chains[1]).toEqual(alone.chains[0]!);
  });
});
