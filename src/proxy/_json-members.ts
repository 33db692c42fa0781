/**
 * Byte-level JSON scanning, so the proxy can edit one member of a body or an SSE event and
 * leave every other byte as the engine or the client wrote it. Every structural character
 * of JSON is ASCII and every byte of a multi-byte UTF-8 sequence is ≥ 0x80, so scanning
 * bytes is exact; a quote inside a string is always escaped, so strings are skipped by
 * their escapes alone.
 */

/** One member of the top-level object: byte offsets of its key (from the opening quote) and value. */
export interface Member {
  key: string;
  keyStart: number;
  valueStart: number;
  valueEnd: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

function isSpace(b: number | undefined): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

function skipSpace(bytes: Uint8Array, i: number, end: number): number {
  while (i < end && isSpace(bytes[i])) i++;
  return i;
}

/** Index just past the string that opens at `i` (a quote), or -1 if it never closes. */
function skipString(bytes: Uint8Array, i: number, end: number): number {
  // A chat body is mostly string content: find each quote natively (memchr) and count the
  // backslashes before it — an odd number escapes it — instead of visiting every byte.
  for (let from = i + 1; ; ) {
    const q = bytes.indexOf(QUOTE, from);
    if (q < 0 || q >= end) return -1;
    let slashes = 0;
    while (q - slashes - 1 > i && bytes[q - slashes - 1] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** Index just past the value that starts at `i`, or -1 if it is cut off. */
function skipValue(bytes: Uint8Array, i: number, end: number): number {
  const first = bytes[i];
  if (first === QUOTE) return skipString(bytes, i, end);
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
    let depth = 0;
    for (; i < end; i++) {
      const b = bytes[i]!;
      if (b === QUOTE) {
        i = skipString(bytes, i, end);
        if (i < 0) return -1;
        i--;
      } else if (b === OPEN_OBJECT || b === OPEN_ARRAY) depth++;
      else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) {
        if (--depth === 0) return i + 1;
      }
    }
    return -1;
  }
  // a number or a literal: runs to the next delimiter
  while (i < end && bytes[i] !== COMMA && bytes[i] !== CLOSE_OBJECT && bytes[i] !== CLOSE_ARRAY && !isSpace(bytes[i])) i++;
  return i;
}

/**
 * The members of the JSON object in `bytes[start, end)`, in order, or undefined when it is
 * not an object (or is cut off). Values are not validated; the caller has parsed the JSON
 * or only reads members it can check.
 */
export function topLevelMembers(bytes: Uint8Array, start = 0, end = bytes.length): { open: number; members: Member[] } | undefined {
  const decoder = new TextDecoder();
  let i = skipSpace(bytes, start, end);
  if (bytes[i] !== OPEN_OBJECT) return undefined;
  const open = i;
  const members: Member[] = [];
  i = skipSpace(bytes, i + 1, end);
  if (bytes[i] === CLOSE_OBJECT) return { open, members };
  for (;;) {
    if (bytes[i] !== QUOTE) return undefined;
    const keyStart = i;
    const keyEnd = skipString(bytes, i, end);
    if (keyEnd < 0) return undefined;
    i = skipSpace(bytes, keyEnd, end);
    if (bytes[i] !== COLON) return undefined;
    const valueStart = skipSpace(bytes, i + 1, end);
    const valueEnd = skipValue(bytes, valueStart, end);
    if (valueEnd < 0 || valueEnd === valueStart) return undefined;
    let key: string;
    try {
      key = JSON.parse(decoder.decode(bytes.subarray(keyStart, keyEnd))) as string;
    } catch {
      return undefined;
    }
    members.push({ key, keyStart, valueStart, valueEnd });
    i = skipSpace(bytes, valueEnd, end);
    if (bytes[i] === CLOSE_OBJECT) return { open, members };
    if (bytes[i] !== COMMA) return undefined;
    i = skipSpace(bytes, i + 1, end);
  }
}

/** `bytes` without `member` and one comma next to it, so the object stays valid JSON. */
export function withoutMember(bytes: Uint8Array, members: readonly Member[], member: Member): Uint8Array {
  const index = members.indexOf(member);
  let from: number;
  let to: number;
  if (index + 1 < members.length) {
    // drop "key": value, up to the next key
    from = member.keyStart;
    to = members[index + 1]!.keyStart;
  } else if (index > 0) {
    // the last member: drop from the end of the previous value, its comma included
    from = members[index - 1]!.valueEnd;
    to = member.valueEnd;
  } else {
    from = member.keyStart;
    to = member.valueEnd;
  }
  return splice(bytes, from, to, new Uint8Array());
}

/** `bytes` with `[from, to)` replaced by `insert`. */
export function splice(bytes: Uint8Array, from: number, to: number, insert: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.length - (to - from) + insert.length);
  out.set(bytes.subarray(0, from), 0);
  out.set(insert, from);
  out.set(bytes.subarray(to), from + insert.length);
  return out;
}

/** Deepest nesting of arrays and objects in `bytes` (strings skipped); stops counting past `limit`. */
export function nestingDepth(bytes: Uint8Array, limit: number): number {
  let depth = 0;
  let max = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (b === QUOTE) {
      const next = skipString(bytes, i, bytes.length);
      if (next < 0) return max;
      i = next - 1;
    } else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (++depth > max) max = depth;
      if (max > limit) return max;
    } else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) depth--;
  }
  return max;
}
