/**
 * The bench's workloads as pure data: the text of every prompt, where the salt goes, and
 * when each request is due. The runner (run.ts) sends them; nothing here touches the
 * network or a clock, so sizes, salting and arrival times are unit-tested directly.
 *
 * Sizes are in tokens at CHARS_PER_TOKEN characters each. The filler is made of common
 * three-letter English words plus a space, which is one token per word on the sim's
 * tokenizer and about one on real BPE tokenizers, so `--context-tokens 90000` means about
 * 90k tokens on a real engine too (the usage table reports the engine's own count).
 */

export const CHARS_PER_TOKEN = 4;

export type Role = "system" | "user" | "assistant";
export interface ChatMessage {
  role: Role;
  content: string;
  /** An assistant message's reasoning, sent back under the field the engine returned it in. */
  reasoning_content?: string;
  reasoning?: string;
}

/**
 * A reply as the engine returned it: its content verbatim (a DeepSeek-R1 served without a
 * reasoning parser returns `reasoning</think>answer` there, and an agent sends that back),
 * and its reasoning when returned apart (Qwen3 behind a reasoning parser: `reasoning_content`;
 * Ollama: `reasoning`), which an agent sends back in the same field.
 */
export interface Reply {
  content: string;
  reasoning?: { text: string; field: "reasoning_content" | "reasoning" };
}

/** The assistant message that carries `reply` in the next request. */
export function replyMessage(reply: Reply): ChatMessage {
  return { role: "assistant", content: reply.content, ...(reply.reasoning ? { [reply.reasoning.field]: reply.reasoning.text } : {}) };
}

/** mulberry32: a small seeded PRNG, so a workload is the same for every arm of a run. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a of a label, to seed one text's PRNG. */
export function seedOf(label: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) h = Math.imul(h ^ label.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

const WORDS = (
  "the and for you not are but had her was one our out day get has him his how man new now old see two way who boy did its let put say " +
  "she too use any ask big buy end far few got lot own run set sit top try why yes yet act add age ago air all art bad bed box car cut " +
  "dog eat eye fit fix fun gas god guy hit hot job key kid law lay leg lie low map may mix net oil pay per pop red row sea sky son sun " +
  "tax tea ten tie toy war win arm bag bar bit bus cat cow cup die dry ear egg fan fat fee fly gap gun hat ice ink jam lab lip log mad"
).split(" ");

/**
 * About `tokens` tokens of filler that starts with `label` (a heading that also makes the
 * text distinct), deterministic in `label`: the same label always gives the same text.
 */
export function filler(tokens: number, label: string): string {
  const head = `${label}\n`;
  const chars = Math.max(0, tokens * CHARS_PER_TOKEN - head.length);
  const next = rng(seedOf(label));
  const parts: string[] = [head];
  let length = 0;
  while (length + 4 <= chars) {
    const word = WORDS[Math.floor(next() * WORDS.length)]!;
    // A line break now and then, like real text; still four characters.
    parts.push(length > 0 && length % 240 === 0 ? `${word}\n` : `${word} `);
    length += 4;
  }
  if (length < chars) parts.push("x".repeat(chars - length));
  return parts.join("");
}

/** Approximate tokens of a text (the sim's count; real engines report their own). */
export function tokensOf(text: string): number {
  return Math.ceil(text.length / CHARS_PER_TOKEN);
}

/** A fresh identifier for one bench run: 12 hex characters. */
export function newRunId(random: (n: number) => Uint8Array = (n) => crypto.getRandomValues(new Uint8Array(n))): string {
  return [...random(6)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Each agent's tool time after each of its turns, in model ms: drawn from the run's id alone
 * (never the arm's), so every arm of a run is offered the same pauses.
 */
export function toolPauses(run: string, agents: number, turns: number, [lo, hi]: readonly [number, number]): number[][] {
  let seed = 0x811c9dc5;
  for (let i = 0; i < run.length; i++) seed = Math.imul(seed ^ run.charCodeAt(i), 0x01000193) >>> 0;
  const next = rng(seed);
  return Array.from({ length: agents }, () => Array.from({ length: turns }, () => (lo + (hi - lo) * next()) * 1000));
}

/**
 * The unique leading line of every prompt of one arm (the measurement advice "salt your corpora"): it
 * opens the first message, so the very first KV block and the router's first prefix link
 * differ between runs and arms, and no arm can hit a cache another one warmed.
 */
export function saltLine(run: string, workload: string, arm: string): string {
  return `[bench ${run} ${workload} ${arm}]`;
}

// --- agent: one conversation growing turn by turn ------------------------------------------

export interface AgentSpec {
  /** Prompt tokens of the last turn. */
  contextTokens: number;
  /** Requests in the conversation (the first is cold; the rest are warm turns). */
  turns: number;
  /** Tokens the client adds per turn (a tool result). */
  turnTokens: number;
  /** max_tokens of each reply (sent back verbatim in the next turn). */
  replyTokens: number;
  /** Tokens of the system prompt. */
  systemTokens: number;
}

export interface AgentPlan {
  system: string;
  /** The first user message: the task and the context the agent starts with. */
  first: string;
  /** toolOutputs[i] follows the reply to request i+1 (so request k carries k-1 of them). */
  toolOutputs: string[];
  replyTokens: number;
}

/** Template and reply overhead per message, in tokens, kept out of the first message. */
const MESSAGE_OVERHEAD = 8;

/** The first message's tokens so that the last turn's prompt is about `contextTokens`. */
export function agentFirstTokens(spec: AgentSpec): number {
  const growth = (spec.turns - 1) * (spec.turnTokens + spec.replyTokens + 2 * MESSAGE_OVERHEAD);
  return spec.contextTokens - spec.systemTokens - growth - 3 * MESSAGE_OVERHEAD;
}

export function agentPlan(spec: AgentSpec, salt: string, agent = 0): AgentPlan {
  const firstTokens = agentFirstTokens(spec);
  if (firstTokens < 16) {
    throw new RangeError(
      `agent: ${spec.turns} turns of ${spec.turnTokens}+${spec.replyTokens} tokens do not fit in ${spec.contextTokens} tokens of context; use fewer turns or a larger context`,
    );
  }
  return {
    system: `${salt}\n${filler(spec.systemTokens, `You are coding agent ${agent}. Tools: read_file, run_tests.`)}`,
    first: filler(firstTokens, `[${salt} agent ${agent}] Task and repository context:`),
    toolOutputs: Array.from({ length: spec.turns - 1 }, (_, i) => filler(spec.turnTokens, `[${salt} agent ${agent}] tool result ${i + 1}:`)),
    replyTokens: spec.replyTokens,
  };
}

/** The messages of turn `turn` (1-based) given the replies received so far. */
export function agentMessages(plan: AgentPlan, replies: readonly Reply[], turn: number): ChatMessage[] {
  if (replies.length < turn - 1) throw new RangeError(`agent turn ${turn} needs ${turn - 1} replies, got ${replies.length}`);
  const messages: ChatMessage[] = [
    { role: "system", content: plan.system },
    { role: "user", content: plan.first },
  ];
  for (let i = 0; i < turn - 1; i++) {
    messages.push(replyMessage(replies[i]!), { role: "user", content: plan.toolOutputs[i]! });
  }
  return messages;
}

// --- burst: distinct cold one-shots sharing a system prompt, all at once ---------------------

export interface BurstSpec {
  /** Requests sent at once. */
  size: number;
  /** Tokens of the shared system prompt (what parallel subagents have in common). */
  systemTokens: number;
  /** Tokens of each request's own task. */
  taskTokens: number;
  replyTokens: number;
}

export function burstMessages(spec: BurstSpec, salt: string, burst = 0): ChatMessage[][] {
  const system = `${salt}\n${filler(spec.systemTokens, "You are a subagent. Answer the task below in one paragraph.")}`;
  return Array.from({ length: spec.size }, (_, i) => [
    { role: "system", content: system },
    { role: "user", content: filler(spec.taskTokens, `[${salt} burst ${burst} task ${i}]`) },
  ]);
}

// --- shared: many users over a few long shared prefixes, Poisson arrivals -------------------

export interface SharedSpec {
  /** Distinct shared prefixes (documents). */
  docs: number;
  docTokens: number;
  /** Tokens of each user's own question (varies per request). */
  tailTokens: number;
  requests: number;
  /** Mean arrivals per second, in model time. */
  rate: number;
  replyTokens: number;
  seed: number;
}

export interface SharedRequest {
  /** Arrival time in model ms from the start of the arm. */
  atMs: number;
  doc: number;
  messages: ChatMessage[];
}

/** Exponential gaps with mean 1/rate (a Poisson process), in ms, starting at 0. */
export function poissonArrivals(count: number, rate: number, next: () => number): number[] {
  const times: number[] = [];
  let t = 0;
  for (let i = 0; i < count; i++) {
    times.push(t);
    t += (-Math.log(1 - next()) / rate) * 1000;
  }
  return times;
}

export function sharedRequests(spec: SharedSpec, salt: string): SharedRequest[] {
  // The salt and the document share the first message, so every document's first prefix
  // link (and KV block chain) is its own, as with distinct RAG documents or bots.
  const docs = Array.from({ length: spec.docs }, (_, d) => `${salt}\n${filler(spec.docTokens, `Reference document ${d}:`)}`);
  const next = rng(spec.seed);
  const times = poissonArrivals(spec.requests, spec.rate, next);
  return times.map((atMs, i) => {
    const doc = Math.floor(next() * spec.docs);
    return {
      atMs,
      doc,
      messages: [
        { role: "system", content: docs[doc]! },
        { role: "user", content: filler(spec.tailTokens, `[${salt} user ${i}] Question about the document:`) },
      ],
    };
  });
}

// --- llmd: llm-d's shared_prefix benchmark, a Poisson ladder over groups of prompts -------

/**
 * llm-d's `shared_prefix` shape (inference-perf): `groups` system prompts, each shared by
 * `promptsPerGroup` prompts that add their own question. The prompts are shuffled once and
 * requests cycle through them in that order, so after one full set every request repeats a
 * prompt already sent. One full set arrives first at `warmupRate` (llm-d's warm-up "seats
 * the residents"), then the ladder: `rungRequests` Poisson arrivals at each of `rates`.
 */
export interface LadderSpec {
  groups: number;
  promptsPerGroup: number;
  systemTokens: number;
  questionTokens: number;
  replyTokens: number;
  /** Requests per model second of the warm-up (one full set of prompts). */
  warmupRate: number;
  /** The ladder's rates, requests per model second, in the order they run. */
  rates: number[];
  /** Requests per rung: the same sample size at every rate. */
  rungRequests: number;
  seed: number;
}

export interface LadderRequest {
  atMs: number;
  /** 0 = warm-up; k = the ladder's k-th rate. */
  rung: number;
  group: number;
  /** The prompt within its group. */
  prompt: number;
  messages: ChatMessage[];
}

/** Fisher–Yates with the given PRNG. */
function shuffle<T>(items: T[], next: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

export function ladderRequests(spec: LadderSpec, salt: string): LadderRequest[] {
  const systems = Array.from({ length: spec.groups }, (_, g) => `${salt}\n${filler(spec.systemTokens, `You are assistant ${g}. Follow these instructions:`)}`);
  const next = rng(spec.seed);
  const prompts = shuffle(
    Array.from({ length: spec.groups * spec.promptsPerGroup }, (_, i) => ({ group: Math.floor(i / spec.promptsPerGroup), prompt: i % spec.promptsPerGroup })),
    next,
  );
  const questions = prompts.map(({ group, prompt }) => filler(spec.questionTokens, `[${salt} group ${group} prompt ${prompt}] Question:`));
  const stages = [{ rate: spec.warmupRate, count: prompts.length }, ...spec.rates.map((rate) => ({ rate, count: spec.rungRequests }))];
  const out: LadderRequest[] = [];
  let t = 0;
  stages.forEach(({ rate, count }, rung) => {
    for (let k = 0; k < count; k++) {
      const i = out.length % prompts.length;
      const { group, prompt } = prompts[i]!;
      out.push({
        atMs: t,
        rung,
        group,
        prompt,
        messages: [
          { role: "system", content: systems[group]! },
          { role: "user", content: questions[i]! },
        ],
      });
      t += (-Math.log(1 - next()) / rate) * 1000;
    }
  });
  return out;
}

// --- the ceiling: what no placement can beat ------------------------------------------------

/**
 * The best hit rate any router could deliver on these requests, in plan tokens: a request
 * can reuse at most the longest run of leading messages that some earlier request already
 * sent (with an unbounded cache). So each document's, group's or prompt's first request
 * is a compulsory miss for what is new in it. Σ reusable ÷ Σ prompt tokens; the chat
 * template's few tokens per message and the 16-token block rounding are left out.
 */
export function hitCeiling(requests: readonly { messages: readonly ChatMessage[] }[]): number {
  // Messages are interned to small ids so a prefix key is a short string, not the text.
  const ids = new Map<string, number>();
  const seen = new Set<string>();
  let reusable = 0;
  let total = 0;
  for (const r of requests) {
    let key = "";
    let reused = 0;
    let prefix = 0;
    let matching = true;
    for (const m of r.messages) {
      const tokens = tokensOf(m.content);
      total += tokens;
      prefix += tokens;
      let id = ids.get(m.content);
      if (id === undefined) ids.set(m.content, (id = ids.size));
      key += `${m.role}:${id},`;
      if (matching && seen.has(key)) reused = prefix;
      else matching = false;
      seen.add(key);
    }
    reusable += reused;
  }
  return total === 0 ? NaN : reusable / total;
}

// --- the request body ---------------------------------------------------------------------

/** A streamed chat request with usage in the last chunk (cached_tokens per request), and the agent's tools when given. */
export function chatBody(model: string, messages: readonly ChatMessage[], maxTokens: number, tools?: readonly unknown[]): Record<string, unknown> {
  return { model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true }, ...(tools ? { tools } : {}) };
}

/**
 * The two tools the agents' system prompt names, as an agent declares them on every request.
 * Sent under the sims' non-ChatML templates, where the template writes them matters
 * (Mistral 3 writes them before the last user message); under ChatML the conversations stay
 * as they always were.
 */
export const AGENT_TOOLS: readonly unknown[] = [
  {
    type: "function",
    function: { name: "read_file", description: "Read a file of the repository", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } },
  },
  {
    type: "function",
    function: { name: "run_tests", description: "Run the test suite and return its output", parameters: { type: "object", properties: { filter: { type: "string" } } } },
  },
];
