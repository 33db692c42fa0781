/**
 * A deterministic tokenizer stand-in: token i is characters [i·c, (i+1)·c) of the rendered
 * text (c = charsPerToken). Identical text gives identical tokens at identical positions, so
 * a prefix cache hit needs exactly what a real engine needs: the same rendered bytes up to
 * the block. Generated tokens are exactly c characters each, so a client that sends the
 * reply back in its next turn re-creates the very tokens the engine cached.
 */

const LETTERS = "etaoinshrdlucmfwypvbgkqjxz";

export class Tokenizer {
  readonly charsPerToken: number;

  constructor(charsPerToken: number) {
    this.charsPerToken = charsPerToken;
  }

  count(text: string): number {
    return Math.ceil(text.length / this.charsPerToken);
  }

  /** Token ids (a stable hash of each slice into a 151,936-entry vocabulary). */
  ids(text: string): number[] {
    const ids: number[] = [];
    for (let i = 0; i < text.length; i += this.charsPerToken) {
      ids.push(Bun.hash.crc32(text.slice(i, i + this.charsPerToken)) % 151_936);
    }
    return ids;
  }

  /** The i-th generated token of a sequence whose output is seeded by `seed`: a short word and a space. */
  word(seed: number, i: number): string {
    let x = (seed ^ Math.imul(i + 1, 0x9e3779b1)) >>> 0;
    const letters = this.charsPerToken === 1 ? 1 : this.charsPerToken - 1;
    let out = "";
    for (let k = 0; k < letters; k++) {
      x = Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) >>> 0;
      x = (x ^ (x >>> 12)) >>> 0;
      out += LETTERS[x % LETTERS.length];
    }
    return this.charsPerToken === 1 ? out : `${out} `;
  }
}

/** A seed for a prompt's output, so the same prompt always gets the same reply (like temperature 0). */
export function outputSeed(prompt: string): number {
  return Bun.hash.crc32(prompt);
}

/** Characters two strings share at their start (long runs compared natively first). */
export function commonPrefixChars(a: string, b: string): number {
  if (a === b) return a.length;
  const n = Math.min(a.length, b.length);
  const RUN = 1024;
  let i = 0;
  while (i + RUN <= n && a.startsWith(b.slice(i, i + RUN), i)) i += RUN;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

/**
 * Tokens two texts share at their start (server_tokens::get_common_prefix). Tokens are
 * `charsPerToken` characters on a grid from the start, so a token is shared when all its
 * characters are; a shorter last token only equals the same last token.
 */
export function commonPrefixTokens(a: string, b: string, charsPerToken: number): number {
  const chars = commonPrefixChars(a, b);
  if (chars === a.length && chars === b.length) return Math.ceil(chars / charsPerToken);
  return Math.floor(chars / charsPerToken);
}
