/**
 * Template modes (`--template`) and the prefix-stop introspection (`x-sim-prefix`): under
 * Mistral 3, DeepSeek-R1 and Qwen3 templates turn N+1's rendered prompt is not a prefix of
 * turn N's prompt + reply, and the sim's cache hit stops exactly where the renderings part —
 * reported as `stop=new`, never as an eviction; a real eviction reports `stop=evicted`.
 * Driven by the official openai client; prompts are recomputed with the sim's own parser to
 * know where the renderings part.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parseRequest } from "../../src/sim/prompt-text.ts";
import type { TemplateName } from "../../src/sim/chat-templates.ts";
import { openai, sim, state, stopAll, words } from "./_helpers.ts";

afterAll(stopAll);

/** tiny: 4 characters per token, 16-token blocks. */
const BLOCK_CHARS = 64;
const TOOLS = [{ type: "function", function: { name: "read_file", description: "read a file", parameters: { type: "object", properties: { path: { type: "string" } } } } }];

type Message = OpenAI.ChatCompletionMessageParam & { reasoning_content?: string };

interface Turn {
  content: string;
  reasoning: string | undefined;
  cached: number;
  header: { cached: number; stop: string };
}

async function turn(client: OpenAI, messages: Message[], tools = false): Promise<Turn> {
  const { data, response } = await client.chat.completions
    .create({ model: "sim-model", messages, max_tokens: 12, ...(tools ? { tools: TOOLS as OpenAI.ChatCompletionTool[] } : {}) })
    .withResponse();
  const header = /^cached=(\d+); stop=(full|evicted|new)$/.exec(response.headers.get("x-sim-prefix") ?? "");
  if (!header) throw new Error(`no x-sim-prefix header: ${response.headers.get("x-sim-prefix")}`);
  const message = data.choices[0]!.message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
  return {
    content: message.content ?? "",
    reasoning: message.reasoning_content,
    cached: data.usage!.prompt_tokens_details!.cached_tokens!,
    header: { cached: Number(header[1]), stop: header[2]! },
  };
}

const render = (template: TemplateName, messages: Message[], tools = false) =>
  parseRequest("/v1/chat/completions", { messages, ...(tools ? { tools: TOOLS } : {}) }, undefined, template).prompt;

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/** What the engine computed for a reply: Qwen3's reasoning markup is in the generated text, not in content. */
function generated(template: TemplateName, t: Turn): string {
  return template === "qwen3-reasoning" ? `<think>\n${t.reasoning}\n</think>\n\n${t.content}` : t.content;
}

/**
 * The hit the sim must report when the engine last computed `prompt + reply` (`computed`)
 * and the new prompt is `prompt`: full blocks of their common prefix. The reply's last token
 * was never fed back (no KV), and the new prompt's last token is always recomputed.
 */
function expectedHit(computed: string, prompt: string): number {
  const usable = Math.min(commonPrefix(computed.slice(0, -4), prompt), prompt.length - 1);
  return Math.floor(usable / BLOCK_CHARS) * 16;
}

describe.each<[TemplateName, boolean]>([
  ["mistral3-tools", true],
  ["deepseek-r1", false],
  ["qwen3-reasoning", false],
])("--template %s", (template, tools) => {
  it("turn 2's prompt is not a prefix of turn 1's prompt + reply; the hit stops where they part, as stop=new", async () => {
    const s = await sim({ profile: "tiny", template, name: template });
    const client = openai(s);
    const history: Message[] = [
      { role: "system", content: words(300, `${template}-rules`) },
      { role: "user", content: words(200, "first question") },
    ];
    const one = await turn(client, history, tools);
    expect(one.header).toEqual({ cached: 0, stop: "new" }); // nothing computed yet
    const sent: Message = { role: "assistant", content: one.content, ...(one.reasoning === undefined ? {} : { reasoning_content: one.reasoning }) };
    const next: Message[] = [...history, sent, { role: "user", content: words(50, "second question") }];
    const before = render(template, history, tools) + generated(template, one);
    const after = render(template, next, tools);
    expect(after.startsWith(before)).toBe(false);
    // the renderings part within turn 1's prompt (Mistral, R1) or where its reply begins (Qwen3)
    expect(commonPrefix(before, after)).toBeLessThanOrEqual(render(template, history, tools).length);

    const two = await turn(client, next, tools);
    expect(two.header).toEqual({ cached: expectedHit(before, after), stop: "new" });
    expect(two.cached).toBe(two.header.cached);
    expect(two.cached).toBeGreaterThan(0); // the system prompt is still shared
    const st = await state(s);
    expect(st).toMatchObject({ template, stop_evicted_total: 0, stop_new_total: 2, evicted_blocks_total: 0 });
  });
});

describe("what stays a prefix", () => {
  it("chatml: turn 2 starts with turn 1's prompt + reply; the hit covers both, and stops at the new content as stop=new", async () => {
    const s = await sim({ profile: "tiny" });
    const client = openai(s);
    const history: Message[] = [
      { role: "system", content: words(300, "chatml-rules") },
      { role: "user", content: words(200, "first question") },
    ];
    const one = await turn(client, history);
    const next: Message[] = [...history, { role: "assistant", content: one.content }, { role: "user", content: "second question" }];
    const before = render("chatml", history) + one.content;
    const after = render("chatml", next);
    expect(after.startsWith(before)).toBe(true);
    const two = await turn(client, next);
    expect(two.header).toEqual({ cached: expectedHit(before, after), stop: "new" });
    expect(two.cached).toBe(Math.floor((before.length - 4) / BLOCK_CHARS) * 16);
  });

  it("qwen3-reasoning: an agent that sends reasoning_content back continues on the cached reasoning until a new user query", async () => {
    const s = await sim({ profile: "tiny", template: "qwen3-reasoning" });
    const client = openai(s);
    const history: Message[] = [
      { role: "system", content: words(300, "agent-rules") },
      { role: "user", content: words(100, "do the task") },
    ];
    const one = await turn(client, history);
    expect(one.reasoning!.length).toBeGreaterThan(0);
    expect(one.content).not.toContain("think>");
    const call = { id: "call_1", type: "function" as const, function: { name: "read_file", arguments: '{"path":"a.txt"}' } };
    const step: Message[] = [
      ...history,
      { role: "assistant", content: one.content, reasoning_content: one.reasoning, tool_calls: [call] },
      { role: "tool", tool_call_id: "call_1", content: words(40, "file contents") },
    ];
    const before = render("qwen3-reasoning", history) + generated("qwen3-reasoning", one);
    expect(render("qwen3-reasoning", step).startsWith(before)).toBe(true);
    const two = await turn(client, step);
    // every full block of turn 1's prompt and reasoning reply is hit
    expect(two.header).toEqual({ cached: Math.floor((before.length - 4) / BLOCK_CHARS) * 16, stop: "new" });

    // a new user query: the earlier replies lose their reasoning, the cache stops there
    const asked: Message[] = [...step, { role: "assistant", content: two.content, reasoning_content: two.reasoning }, { role: "user", content: "and now?" }];
    const cachedText = render("qwen3-reasoning", step) + generated("qwen3-reasoning", two);
    const three = await turn(client, asked);
    expect(three.header).toEqual({ cached: expectedHit(cachedText, render("qwen3-reasoning", asked)), stop: "new" });
    expect(three.cached).toBeLessThan(render("qwen3-reasoning", history).length / 4);
  });

  it("mistral3-tools: tool results after the last user message keep the prefix; a new user message moves [AVAILABLE_TOOLS]", async () => {
    const s = await sim({ profile: "tiny", template: "mistral3-tools" });
    const client = openai(s);
    const history: Message[] = [
      { role: "system", content: words(300, "mistral-rules") },
      { role: "user", content: words(100, "do the task") },
    ];
    const one = await turn(client, history, true);
    const prompt1 = render("mistral3-tools", history, true);
    expect(prompt1).toContain(`[AVAILABLE_TOOLS]${JSON.stringify(TOOLS)}[/AVAILABLE_TOOLS][INST]`);
    const call = { id: "abcdefghi", type: "function" as const, function: { name: "read_file", arguments: '{"path":"a.txt"}' } };
    const newUser: Message[] = [...history, { role: "assistant", content: one.content }, { role: "user", content: "next" }];
    const moved = render("mistral3-tools", newUser, true);
    // the tools left the first user message: the renderings part right where they stood
    const at = prompt1.indexOf("[AVAILABLE_TOOLS]");
    expect(moved.startsWith(prompt1.slice(0, at))).toBe(true);
    expect(moved.slice(at, at + 6)).toBe("[INST]");
    expect(moved).toContain(`[AVAILABLE_TOOLS]${JSON.stringify(TOOLS)}[/AVAILABLE_TOOLS][INST]next[/INST]`);
    const agentStep: Message[] = [...history, { role: "assistant", content: "", tool_calls: [call] }, { role: "tool", tool_call_id: "abcdefghi", content: "file" }];
    expect(render("mistral3-tools", agentStep, true).startsWith(prompt1)).toBe(true);
  });
});

describe("x-sim-prefix: full, evicted, new", () => {
  it("a repeat hits every cacheable block (full); a prefix evicted under pressure says evicted; /sim/state counts each", async () => {
    const s = await sim({ profile: "tiny" }); // 256 blocks of 16 tokens
    const client = openai(s);
    const ask = async (prompt: string) => {
      const { data, response } = await client.completions.create({ model: "sim-model", prompt, max_tokens: 1 }).withResponse();
      return { header: response.headers.get("x-sim-prefix"), cached: data.usage!.prompt_tokens_details!.cached_tokens };
    };
    const docs = ["a", "b", "c", "d"].map((tag) => words(2_000, `doc-${tag}`)); // 125 blocks each
    expect(await ask(docs[0]!)).toEqual({ header: "cached=0; stop=new", cached: 0 });
    for (const doc of docs.slice(1)) await ask(doc);
    expect(await ask(docs[3]!)).toEqual({ header: "cached=1984; stop=full", cached: 1984 });
    // held: every cacheable block of it had been computed here (124 of 16 tokens).
    expect(await ask(docs[0]!)).toEqual({ header: "cached=0; stop=evicted; held=1984", cached: 0 });
    expect(await state(s)).toMatchObject({ stop_full_total: 1, stop_evicted_total: 1, stop_new_total: 4 });
    // a reset forgets what was computed: the same prompt is new again
    await fetch(`${s.url}/sim/reset`, { method: "POST" });
    expect((await ask(docs[3]!)).header).toBe("cached=0; stop=new");
  });

  it("streamed responses carry the header too", async () => {
    const s = await sim({ profile: "tiny" });
    const prompt = words(500, "streamed");
    const body = { model: "sim-model", prompt, max_tokens: 2, stream: true };
    const first = await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify(body) });
    expect(first.headers.get("x-sim-prefix")).toBe("cached=0; stop=new");
    await first.text();
    const second = await fetch(`${s.url}/v1/completions`, { method: "POST", body: JSON.stringify(body) });
    expect(second.headers.get("x-sim-prefix")).toBe("cached=496; stop=full");
    await second.text();
  });
});
