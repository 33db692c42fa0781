/**
 * Request bodies for the perf scripts: deterministic text that looks like prose (words of
 * varied length, punctuation, line breaks that JSON must escape), so JSON parsing and hashing
 * cost what they cost on real prompts. Pure: a seed in, the same bodies out.
 */
import { rng as createRandom } from "../../src/bench/workloads.ts";

const WORDS = (
  "the of and to in is that for it as with was on be by this are from at or an have not but " +
  "function return const value error request response server client model token cache prefix " +
  "replica router stream config output input result build test file line path system message " +
  "assistant user tool call json parse string number array object index memory process thread"
).split(" ");

/** About `chars` characters of prose-like text. */
export function prose(random: () => number, chars: number): string {
  const out: string[] = [];
  let n = 0;
  while (n < chars) {
    let w = WORDS[Math.floor(random() * WORDS.length)]!;
    const r = random();
    if (r < 0.06) w += ".";
    else if (r < 0.1) w += ",";
    else if (r < 0.115) w += "\n";
    else if (r < 0.12) w = `"${w}"`;
    out.push(w);
    n += w.length + 1;
  }
  return out.join(" ").slice(0, chars);
}

export interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface ChatBody {
  model: string;
  stream: boolean;
  stream_options?: { include_usage: boolean };
  max_tokens: number;
  messages: Message[];
}

export const MODEL = "perf-model";

/** A small chat (~1 KB): a shared app system prompt, a question, every other one a short continuation. */
export function smallChat(i: number, stream = false): ChatBody {
  const random = createRandom(1000 + i);
  const messages: Message[] = [
    { role: "system", content: prose(createRandom(i % 4), 400) },
    { role: "user", content: `(${i}) ${prose(random, 300)}` },
  ];
  if (i % 2 === 1) messages.push({ role: "assistant", content: prose(random, 200) }, { role: "user", content: prose(random, 80) });
  return { model: MODEL, stream, ...(stream ? { stream_options: { include_usage: true } } : {}), max_tokens: 16, messages };
}

/**
 * An agent's long chat: a system prompt, then turns of large tool output and short
 * assistant steps, up to about `bytes` of JSON (339 KB ≈ 90k tokens at the 3.77 bytes per
 * token this kind of text has).
 */
export function agentChat(i: number, bytes: number, turns = 30): ChatBody {
  const random = createRandom(5000 + i);
  const messages: Message[] = [{ role: "system", content: `agent ${i}: ${prose(random, 3000)}` }];
  const per = Math.floor((bytes - 3200) / turns);
  for (let t = 0; t < turns; t++) {
    messages.push({ role: "user", content: `tool output ${t}:\n${prose(random, Math.floor(per * 0.8))}` });
    messages.push({ role: "assistant", content: prose(random, Math.floor(per * 0.15)) });
  }
  messages.push({ role: "user", content: "continue" });
  const body: ChatBody = { model: MODEL, stream: false, max_tokens: 16, messages };
  // Grow or trim the last tool output until the JSON is within 0.2 % of the size asked for
  // (escaped line breaks make the JSON longer than the text).
  const last = messages[messages.length - 3]!;
  for (let i = 0; i < 10; i++) {
    const off = JSON.stringify(body).length - bytes;
    if (Math.abs(off) <= bytes * 0.002) break;
    last.content = off > 0 ? last.content.slice(0, Math.max(0, last.content.length - off)) : last.content + prose(random, -off);
  }
  return body;
}

/**
 * A three-turn chat as a chat app sends it, turn by turn: one of 16 shared system prompts,
 * user messages of 100–600 characters, assistant replies of 200–2,000.
 */
export const CONVERSATION_SHAPE =
  "three-turn chats (one of 16 shared ~1.5 KB system prompts, user messages of 100–600 characters, assistant replies of 200–2,000)";

export function conversationTurns(c: number): Message[][] {
  const random = createRandom(c + 7);
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo));
  const history: Message[] = [{ role: "system", content: SYSTEM_PROMPTS[c % SYSTEM_PROMPTS.length]! }];
  const turns: Message[][] = [];
  for (let t = 0; t < 3; t++) {
    if (t > 0) history.push({ role: "assistant", content: prose(random, between(200, 2000)) });
    history.push({ role: "user", content: `${c}.${t} ${prose(random, between(100, 600))}` });
    turns.push([...history]);
  }
  return turns;
}

const SYSTEM_PROMPTS = Array.from({ length: 16 }, (_, i) => `app ${i}: ${prose(createRandom(90 + i), 1500)}`);
