/**
 * The text of a trace's requests. A trace carries no text, only block ids; each id becomes
 * the same text every time (`blockTokens` × CHARS_PER_TOKEN characters of the bench's filler
 * words, about one token each on the sim and on real BPE tokenizers), so two requests share
 * exactly the prefix the trace says they do, and a leading salt line, the same for every
 * request of an arm, keeps runs and arms apart. A request's last, partial block is the first
 * (input_length mod block) tokens of its id's text.
 *
 * Two shapes, the two a client sends:
 * - `flat`: one user message, the salt line and the whole text (the preamble included).
 * - `chat`: a request that extends earlier ones carries them as turns. The preamble (the
 *   blocks every request shares) is the system message; each earlier turn's new full blocks
 *   are an assistant message — the first min(previous turn's output_length, those blocks)
 *   tokens, which is where the previous reply sits in a real conversation — and a user
 *   message with the rest; the request's own new text is the last user message (split the
 *   same way). The messages' contents, joined, are the flat text: only the chat template's
 *   markers come between them, and every split is a function of the turn alone, so a turn
 *   renders the same in every request that carries it. Two requests that share k blocks
 *   therefore render alike through those k blocks and differ within the next one.
 */
import type { ChatMessage } from "./workloads.ts";
import { CHARS_PER_TOKEN, filler, seedOf } from "./workloads.ts";
import { fullBlocks, type TracePlan, type TraceRecord, type TraceShape } from "./trace.ts";

/** Block texts are made often (every request of every arm): keep the recent ones. */
const CACHE_LIMIT = 8_192;
const cache = new Map<string, string>();

/**
 * The text of block `id`: `blockTokens` tokens of filler, headed by a tag drawn from the id
 * and the id itself, the same every time. The tag makes two different blocks differ from
 * their first character (35 times in 36), so two requests share no more than the blocks
 * the trace says, not the few characters of a common heading.
 */
export function blockText(id: number, blockTokens: number): string {
  const key = `${blockTokens}:${id}`;
  let text = cache.get(key);
  if (text === undefined) {
    if (cache.size >= CACHE_LIMIT) cache.clear();
    text = filler(blockTokens, `${seedOf(`block ${id}`).toString(36).padStart(7, "0").slice(-4)} block ${id}:`);
    cache.set(key, text);
  }
  return text;
}

/** `tokens` tokens of the request's text from block `from` on (the last block cut where the tokens end). */
export function spanText(r: Pick<TraceRecord, "hashIds">, from: number, tokens: number, blockTokens: number): string {
  const parts: string[] = [];
  let left = tokens;
  for (let b = from; left > 0 && b < r.hashIds.length; b++) {
    const text = blockText(r.hashIds[b]!, blockTokens);
    const take = Math.min(left, blockTokens);
    parts.push(take === blockTokens ? text : text.slice(0, take * CHARS_PER_TOKEN));
    left -= take;
  }
  return parts.join("");
}

/** The whole prompt text of a record (no salt). */
export function recordText(r: Pick<TraceRecord, "hashIds" | "inputLength">, blockTokens: number): string {
  return spanText(r, 0, r.inputLength, blockTokens);
}

/** One turn of a conversation: where its new blocks start, and how they split into a reply and a user message. */
interface Turn {
  /** First block of the turn (its parent's full blocks, or the preamble's). */
  from: number;
  /** Tokens of the turn's new text: its full blocks only when an earlier turn of a later request; all of it when the request's own. */
  tokens: number;
  /** Leading tokens that are the previous turn's reply (an assistant message). */
  reply: number;
}

/**
 * The reply part of record `i`'s turn: min(its parent's output_length, its new full blocks'
 * tokens). A function of the record alone, so the same wherever the turn is rendered.
 */
export function replyTokens(plan: Pick<TracePlan, "records" | "conversations">, i: number, blockTokens: number): number {
  const p = plan.conversations.parent[i]!;
  if (p < 0) return 0;
  const newFull = (fullBlocks(plan.records[i]!, blockTokens) - fullBlocks(plan.records[p]!, blockTokens)) * blockTokens;
  return Math.max(0, Math.min(plan.records[p]!.outputLength, newFull));
}

/** The messages of record `i` in the given shape, the salt line first. */
export function traceMessages(plan: Pick<TracePlan, "records" | "conversations">, i: number, shape: TraceShape, salt: string, blockTokens: number): ChatMessage[] {
  const r = plan.records[i]!;
  if (shape === "flat") return [{ role: "user", content: `${salt}\n${recordText(r, blockTokens)}` }];
  const { parent, preamble } = plan.conversations;
  const chain: number[] = [];
  for (let p = parent[i]!; p >= 0; p = parent[p]!) chain.unshift(p);
  const start = (k: number) => (parent[k]! < 0 ? preamble : fullBlocks(plan.records[parent[k]!]!, blockTokens));
  const turns: Turn[] = chain.map((k) => ({
    from: start(k),
    tokens: (fullBlocks(plan.records[k]!, blockTokens) - start(k)) * blockTokens,
    reply: replyTokens(plan, k, blockTokens),
  }));
  const own: Turn = { from: start(i), tokens: r.inputLength - start(i) * blockTokens, reply: replyTokens(plan, i, blockTokens) };
  const messages: ChatMessage[] = [];
  if (preamble > 0) messages.push({ role: "system", content: spanText(r, 0, preamble * blockTokens, blockTokens) });
  for (const t of [...turns, own]) {
    // Every earlier turn's full blocks open this request's ids too.
    const text = spanText(r, t.from, t.tokens, blockTokens);
    const split = t.reply * CHARS_PER_TOKEN;
    if (t.reply > 0) messages.push({ role: "assistant", content: text.slice(0, split) });
    // An earlier turn whose new blocks are all reply adds no user message; the request's own always ends with one.
    if (t === own || text.length > split) messages.push({ role: "user", content: text.slice(split) });
  }
  messages[0] = { ...messages[0]!, content: `${salt}\n${messages[0]!.content}` };
  return messages;
}
