/**
 * Salted probe prompts (pure).
 *
 * A probe prompt is one unique leading line (the salt: random + timestamp) followed by
 * deterministic filler sized to the requested token count. The salt comes first because
 * a prefix cache matches from the first token: a new first line makes the whole prompt
 * new to the engine, so no earlier run or other user can have warmed it. The cold and
 * the warm request share that prefix and differ only in a short tail, because a cache
 * that only helps byte-identical prompts is not the cache an agent loop needs.
 */

/** A first guess; replaced by the engine's own count when it has a /tokenize endpoint. */
export const DEFAULT_CHARS_PER_TOKEN = 4;

/** `probe-20251129T192301Z-8f3a9c2e`: sortable, unique per run and per pair. */
export function makeSalt(random: () => number, now: Date): string {
  const stamp = now.toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  let hex = "";
  for (let i = 0; i < 4; i++) hex += Math.floor(random() * 256).toString(16).padStart(2, "0");
  return `probe-${stamp}-${hex}`;
}

export function saltLine(salt: string): string {
  return `llmroute probe ${salt}: this first line is unique, so no earlier request can have cached this prompt.\n`;
}

// Ordinary English words, so a real tokenizer splits the filler the way it splits prose
// (about 4 characters per token) rather than into one token per character.
const WORDS = (
  "the of and to in is that for it as was with be by on not he this are or his from at which " +
  "but have an they you were her she there been one all we their has would when if so no will " +
  "more said what up its about into than them can only other time new some could these two may " +
  "first then do any like my now over such our man me even most made after also did many before " +
  "must through back years where much your way well down should because each just those people " +
  "how too little state good very make world still own see men work long get here between both " +
  "life being under never day same another know while last might us great old year off come " +
  "since against go came right used take three cache block prefix token replica engine router"
).split(" ");

/**
 * Deterministic filler of exactly `chars` characters: numbered sentences of words drawn by
 * a fixed-seed generator. The same `chars` always gives the same text, so two pairs of a
 * `--repeat` run differ only in their salt.
 */
export function filler(chars: number): string {
  if (chars <= 0) return "";
  let x = 0x2545f491;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
  const parts: string[] = [];
  let length = 0;
  let sentence = 0;
  while (length < chars) {
    sentence++;
    const n = 8 + (next() % 10);
    const words: string[] = [];
    for (let i = 0; i < n; i++) words.push(WORDS[next() % WORDS.length]!);
    const s = `${sentence}. ${words.join(" ")}.${sentence % 6 === 0 ? "\n" : " "}`;
    parts.push(s);
    length += s.length;
  }
  return parts.join("").slice(0, chars);
}

/** The shared prefix of one pair: the salt line, then filler for about `tokens` tokens. */
export function buildPrefix(salt: string, tokens: number, charsPerToken = DEFAULT_CHARS_PER_TOKEN): string {
  const head = saltLine(salt);
  const chars = Math.max(0, Math.round(tokens * charsPerToken) - head.length);
  return head + filler(chars);
}

/**
 * Characters per token to use next, from a prompt of `chars` characters the engine counted
 * as `tokens`. Clamped to a plausible range so one odd count cannot produce a huge prompt.
 */
export function calibrate(chars: number, tokens: number): number {
  if (!(tokens > 0) || !(chars > 0)) return DEFAULT_CHARS_PER_TOKEN;
  return Math.min(8, Math.max(1, chars / tokens));
}

/** True when `count` is within `tolerance` (fraction) of `target`. */
export function closeEnough(count: number, target: number, tolerance = 0.05): boolean {
  return Math.abs(count - target) <= target * tolerance;
}

/** The varying tail: short, different for every request of a pair or conversation. */
export function tail(label: string): string {
  return `\n\n[${label}] Reply with one word.`;
}

/**
 * A short shared prefix for the `--via` identity-window check: well under 1 KiB, so a
 * router that identifies conversations by their first N KiB would see each turn's varying
 * tail inside its window and never pin.
 */
export function shortPrefix(salt: string): string {
  return `${saltLine(salt)}You are a terse assistant. Answer in one word.`;
}
