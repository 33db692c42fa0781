/**
 * Chat templates: a conversation → the text the engine tokenizes, the way four model
 * families' templates render it (`--template`).
 *
 * - `chatml` (default): one ChatML template (Qwen 2.5 style), tools at the end of the first
 *   system message. The reply is appended verbatim after the generation prompt, so every
 *   continuation's rendering starts with exactly the text the engine computed.
 * - `mistral3-tools`, `deepseek-r1`, `qwen3-reasoning`: templates under which a
 *   continuation is NOT a token prefix of the previous turn's prompt + reply, although
 *   nothing was evicted. A router that reads the resulting cache shortfall as an eviction is
 *   wrong; these modes exist so the bench can catch it (`x-sim-prefix: …; stop=new`).
 *
 * Sources (the templates as shipped; paths are in llama.cpp at the prebuilt server's commit,
 * /work/ref/llama.cpp/models/templates/, which copies them from the Hugging Face repos):
 * - Mistral 3: `Mistral-Small-3.2-24B-Instruct-2506.jinja` — `[AVAILABLE_TOOLS]…[/AVAILABLE_TOOLS]`
 *   is written just before `user_messages[-1]`, the LAST user message; mistral-common does the
 *   same (`src/mistral_common/tokens/tokenizers/instruct.py`, `encode_user_message`:
 *   `if is_last and available_tools`).
 * - DeepSeek-R1: `deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja` — every assistant message
 *   in the history is cut to `content.split('</think>')[-1]`; the generation prompt is
 *   `<｜Assistant｜><think>\n`, so the model's reply is `reasoning</think>answer`.
 * - Qwen3: `Qwen-Qwen3-0.6B.jinja` — `<think>reasoning</think>` is rendered only for
 *   assistant messages after `ns.last_query_index` (the last user message that is not a
 *   tool response); earlier ones render their content alone.
 *
 * Tool definitions are written with JSON.stringify (Jinja's `tojson` puts spaces after `,`
 * and `:`): the sim's tokens are characters, and only consistency between turns matters.
 */
import type { ChatMessage } from "./prompt-text.ts";

export const TEMPLATES = ["chatml", "mistral3-tools", "deepseek-r1", "qwen3-reasoning"] as const;
export type TemplateName = (typeof TEMPLATES)[number];

export function isTemplateName(value: unknown): value is TemplateName {
  return typeof value === "string" && (TEMPLATES as readonly string[]).includes(value);
}

/** Render a conversation (system messages included, tools separate) with `template`. */
export function renderTemplate(template: TemplateName, messages: readonly ChatMessage[], tools: unknown, addGenerationPrompt = true): string {
  const toolList = Array.isArray(tools) && tools.length > 0 ? tools : undefined;
  switch (template) {
    case "chatml":
      return renderChat(withChatmlTools(messages, toolList), addGenerationPrompt);
    case "mistral3-tools":
      return renderMistral3(messages, toolList);
    case "deepseek-r1":
      return renderDeepseekR1(messages, addGenerationPrompt);
    case "qwen3-reasoning":
      return renderQwen3(messages, toolList, addGenerationPrompt);
  }
}

// --- chatml ------------------------------------------------------------------------------

/** ChatML (`<|im_start|>role\ncontent<|im_end|>\n`), generation prompt `<|im_start|>assistant\n`. */
export function renderChat(messages: readonly ChatMessage[], addGenerationPrompt = true): string {
  let out = "";
  for (const m of messages) out += `<|im_start|>${m.role}\n${chatmlContent(m)}<|im_end|>\n`;
  return addGenerationPrompt ? `${out}<|im_start|>assistant\n` : out;
}

function chatmlContent(m: ChatMessage): string {
  let content = m.content;
  for (const call of m.toolCalls ?? []) content += chatmlToolCall(call.name, call.arguments);
  return m.role === "tool" ? `<tool_response>\n${content}\n</tool_response>` : content;
}

export function chatmlToolCall(name: string, args: string): string {
  return `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": ${args}}\n</tool_call>`;
}

/** Tools go at the end of the first system message (one is created when there is none). */
function withChatmlTools(messages: readonly ChatMessage[], tools: unknown[] | undefined): readonly ChatMessage[] {
  if (!tools) return messages;
  const block = `# Tools\n${tools.map((t) => JSON.stringify(t)).join("\n")}`;
  const [first, ...rest] = messages;
  if (first && first.role === "system") return [{ ...first, content: `${first.content}\n\n${block}` }, ...rest];
  return [{ role: "system", content: block }, ...messages];
}

// --- Mistral 3 (Mistral-Small-3.2-24B-Instruct-2506.jinja) -----------------------------------

function renderMistral3(messages: readonly ChatMessage[], tools: unknown[] | undefined): string {
  let loop = messages;
  let out = "<s>";
  // The real template falls back to a long default system prompt; the sim writes none
  // (it changes every prompt by the same constant and moves no break point).
  if (loop[0]?.role === "system") {
    out += `[SYSTEM_PROMPT]${loop[0].content}[/SYSTEM_PROMPT]`;
    loop = loop.slice(1);
  }
  let lastUser = -1;
  loop.forEach((m, i) => {
    if (m.role === "user") lastUser = i;
  });
  loop.forEach((m, i) => {
    if (m.role === "system") out += `[SYSTEM_PROMPT]${m.content}[/SYSTEM_PROMPT]`;
    else if (m.role === "user") {
      // The quirk this mode exists for: tools travel with the last user message.
      if (tools && i === lastUser) out += `[AVAILABLE_TOOLS]${JSON.stringify(tools)}[/AVAILABLE_TOOLS]`;
      out += `[INST]${m.content}[/INST]`;
    } else if (m.role === "assistant") {
      if (m.toolCalls && m.toolCalls.length > 0) {
        for (const call of m.toolCalls) out += `[TOOL_CALLS]${call.name}[CALL_ID]${call.id ?? ""}[ARGS]${call.arguments}`;
        out += "</s>";
      } else out += `${m.content}</s>`;
    } else if (m.role === "tool") out += `[TOOL_RESULTS]${m.toolCallId ?? ""}[TOOL_CONTENT]${m.content}[/TOOL_RESULTS]`;
    else out += `[INST]${m.content}[/INST]`;
  });
  // No generation prompt: the model continues after `[/INST]` or `[/TOOL_RESULTS]`.
  return out;
}

// --- DeepSeek-R1 (deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja) ---------------------------

const R1_BOS = "<｜begin▁of▁sentence｜>";
const R1_EOS = "<｜end▁of▁sentence｜>";

function renderDeepseekR1(messages: readonly ChatMessage[], addGenerationPrompt: boolean): string {
  let system = "";
  for (const m of messages) if (m.role === "system") system = m.content;
  let out = `${R1_BOS}${system}`;
  let isTool = false;
  let outputFirst = true;
  let callsFirst = true;
  for (const m of messages) {
    if (m.role === "user") {
      isTool = false;
      out += `<｜User｜>${m.content}`;
    }
    if (m.role === "assistant" && m.toolCalls && m.toolCalls.length > 0) {
      isTool = false;
      for (const call of m.toolCalls) {
        const body = `function<｜tool▁sep｜>${call.name}\n\`\`\`json\n${call.arguments}\n\`\`\`<｜tool▁call▁end｜>`;
        out += callsFirst ? `<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>${body}` : `\n<｜tool▁call▁begin｜>${body}`;
        callsFirst = false;
      }
      out += `<｜tool▁calls▁end｜>${R1_EOS}`;
    }
    if (m.role === "assistant" && m.content !== "") {
      if (isTool) {
        out += `<｜tool▁outputs▁end｜>${m.content}${R1_EOS}`;
        isTool = false;
      } else {
        // The quirk this mode exists for: the reasoning is cut out of every earlier reply.
        const content = m.content.includes("</think>") ? m.content.split("</think>").at(-1)! : m.content;
        out += `<｜Assistant｜>${content}${R1_EOS}`;
      }
    }
    if (m.role === "tool") {
      isTool = true;
      out += outputFirst ? `<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>${m.content}<｜tool▁output▁end｜>` : `\n<｜tool▁output▁begin｜>${m.content}<｜tool▁output▁end｜>`;
      outputFirst = false;
    }
  }
  if (isTool) out += "<｜tool▁outputs▁end｜>";
  if (addGenerationPrompt && !isTool) out += "<｜Assistant｜><think>\n";
  return out;
}

// --- Qwen3 (Qwen-Qwen3-0.6B.jinja) --------------------------------------------------------

const QWEN3_TOOLS_HEAD =
  "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const QWEN3_TOOLS_TAIL =
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

function renderQwen3(messages: readonly ChatMessage[], tools: unknown[] | undefined, addGenerationPrompt: boolean): string {
  let out = "";
  if (tools) {
    out += "<|im_start|>system\n";
    if (messages[0]?.role === "system") out += `${messages[0].content}\n\n`;
    out += QWEN3_TOOLS_HEAD;
    for (const tool of tools) out += `\n${JSON.stringify(tool)}`;
    out += QWEN3_TOOLS_TAIL;
  } else if (messages[0]?.role === "system") {
    out += `<|im_start|>system\n${messages[0].content}<|im_end|>\n`;
  }
  // ns.last_query_index: the last user message that is not a wrapped tool response.
  let lastQuery = messages.length - 1;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === "user" && !(m.content.startsWith("<tool_response>") && m.content.endsWith("</tool_response>"))) {
      lastQuery = i;
      break;
    }
  }
  messages.forEach((m, i) => {
    if (m.role === "user" || (m.role === "system" && i !== 0)) {
      out += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
    } else if (m.role === "assistant") {
      let content = m.content;
      let reasoning = "";
      if (m.reasoning !== undefined) reasoning = m.reasoning;
      else if (content.includes("</think>")) {
        reasoning = lstripNl(rstripNl(content.split("</think>")[0]!).split("<think>").at(-1)!);
        content = lstripNl(content.split("</think>").at(-1)!);
      }
      // The quirk this mode exists for: reasoning only after the last user query.
      if (i > lastQuery && (i === messages.length - 1 || reasoning)) {
        out += `<|im_start|>${m.role}\n<think>\n${rstripNl(lstripNl(reasoning))}\n</think>\n\n${lstripNl(content)}`;
      } else {
        out += `<|im_start|>${m.role}\n${content}`;
      }
      (m.toolCalls ?? []).forEach((call, k) => {
        if ((k === 0 && content) || k > 0) out += "\n";
        out += `<tool_call>\n{"name": "${call.name}", "arguments": ${call.arguments}}\n</tool_call>`;
      });
      out += "<|im_end|>\n";
    } else if (m.role === "tool") {
      if (i === 0 || messages[i - 1]!.role !== "tool") out += "<|im_start|>user";
      out += `\n<tool_response>\n${m.content}\n</tool_response>`;
      if (i === messages.length - 1 || messages[i + 1]!.role !== "tool") out += "<|im_end|>\n";
    }
  });
  if (addGenerationPrompt) out += "<|im_start|>assistant\n";
  return out;
}

const lstripNl = (s: string) => s.replace(/^\n+/, "");
const rstripNl = (s: string) => s.replace(/\n+$/, "");

// --- replies ----------------------------------------------------------------------------

/**
 * How a reasoning model's reply is laid out in the text the engine generates, and which
 * part the API returns where. `open` is generated before the reasoning (empty when the
 * generation prompt already opened the block), `close` after it.
 */
export interface ReasoningShape {
  open: string;
  close: string;
  /** true: reasoning goes to `reasoning_content` and the answer to `content` (a reasoning
   * parser, as agents use with Qwen3); false: everything stays in `content` (R1 served
   * without a reasoning parser: `reasoning</think>answer`, cut by the template next turn). */
  separate: boolean;
}

export function reasoningShape(template: TemplateName): ReasoningShape | undefined {
  switch (template) {
    case "deepseek-r1":
      return { open: "", close: "\n</think>\n\n", separate: false };
    case "qwen3-reasoning":
      // Exactly what the template re-renders for a reply after the last query, so an agent
      // that sends `reasoning_content` back continues on the cached tokens.
      return { open: "<think>\n", close: "\n</think>\n\n", separate: true };
    default:
      return undefined;
  }
}

/**
 * The generated text of a reasoning reply, character by character: `open`, some reasoning
 * words, `close`, then answer words. `word(i)` gives the i-th word; every word is exactly
 * `charsPerToken` characters, so the text can be cut into tokens of that size anywhere.
 * Returns the text of token `index` and where the reasoning ends, in characters.
 */
export class ReasoningReply {
  readonly shape: ReasoningShape;
  /** [start, end) of the reasoning in the generated text, in characters. */
  readonly reasoningStart: number;
  readonly reasoningEnd: number;
  /** Where the answer starts. */
  readonly answerStart: number;
  private readonly head: string;
  private readonly word: (i: number) => string;
  private readonly charsPerToken: number;
  private readonly reasoningWords: number;

  constructor(shape: ReasoningShape, maxTokens: number, charsPerToken: number, word: (i: number) => string) {
    this.shape = shape;
    this.word = word;
    this.charsPerToken = charsPerToken;
    const markupTokens = Math.ceil((shape.open.length + shape.close.length) / charsPerToken);
    // Reasoning takes about half of what is left after the markup.
    this.reasoningWords = Math.max(1, Math.floor((maxTokens - markupTokens) / 2));
    let reasoning = "";
    for (let i = 0; i < this.reasoningWords; i++) reasoning += word(i);
    // Pad so that the answer starts on a token boundary (spaces survive the templates' strip('\n')).
    const unpadded = shape.open.length + reasoning.length + shape.close.length;
    const pad = (charsPerToken - (unpadded % charsPerToken)) % charsPerToken;
    reasoning = " ".repeat(pad) + reasoning;
    this.reasoningStart = shape.open.length;
    this.reasoningEnd = this.reasoningStart + reasoning.length;
    this.answerStart = this.reasoningEnd + shape.close.length;
    this.head = shape.open + reasoning + shape.close;
  }

  /** The text of generated token `index` (exactly charsPerToken characters). */
  token(index: number): string {
    const c = this.charsPerToken;
    const start = index * c;
    if (start + c <= this.head.length) return this.head.slice(start, start + c);
    if (start >= this.head.length) return this.word(this.reasoningWords + (start - this.head.length) / c);
    return this.head.slice(start);
  }

  /** Split generated text (a prefix of the reply) into what the API returns. */
  split(text: string): { reasoning: string; content: string } {
    const reasoning = text.slice(this.reasoningStart, Math.min(text.length, this.reasoningEnd));
    const content = text.length > this.answerStart ? text.slice(this.answerStart) : "";
    return { reasoning, content };
  }
}
