/**
 * Where each key and value of a TOML document is: smol-toml returns plain values with no
 * positions, so config errors get their file:line:column from this scanner. It runs only
 * on text smol-toml has already accepted, so it follows the grammar without checking it:
 * headers (`[a."b c"]`, `[[replica]]`, an array table's sub-tables), dotted and quoted
 * keys, inline tables (nested, multi-line as TOML 1.1 allows), arrays (element by
 * element), all four string forms (so `[x]` or `=` inside a multi-line string is text),
 * and comments.
 *
 * Paths are the validator's: keys joined with ".", array-of-table elements and array
 * items as `name[i]` — `replica[1].url`, `server.api_keys[0]`,
 * `routing.cache_aware.min_match_ratio`.
 */

export interface Position {
  line: number;
  /** 1-based, in characters (code points), as editors count. */
  column: number;
}

export interface KeyPosition {
  /** Where the key (or the table header) starts. */
  key: Position;
  /** Where the value starts; for a table, its header. */
  value: Position;
}

export function tomlPositions(text: string): Map<string, KeyPosition> {
  const found = new Map<string, { key: number; value: number }>();
  /** Current element index of each array of tables, by its resolved path. */
  const arrays = new Map<string, number>();
  let i = 0;

  const at = (s: string) => text.startsWith(s, i);
  const skipSpaces = () => {
    while (i < text.length && (text[i] === " " || text[i] === "\t")) i++;
  };
  /** Spaces, newlines and comments (between statements, and inside arrays and inline tables). */
  const skipBlank = () => {
    for (;;) {
      skipSpaces();
      if (text[i] === "#") while (i < text.length && text[i] !== "\n") i++;
      if (text[i] === "\n" || text[i] === "\r") i++;
      else return;
    }
  };
  const note = (path: string, key: number, value = key) => {
    if (!found.has(path)) found.set(path, { key, value });
  };

  /** A quoted string starting at i (any of the four forms); returns its unescaped text. */
  const readString = (): string => {
    const quote = text[i]!;
    const multi = at(quote.repeat(3));
    const start = i + (multi ? 3 : 1);
    i = start;
    for (;;) {
      if (i >= text.length) return text.slice(start);
      if (quote === '"' && text[i] === "\\") {
        i += 2;
        continue;
      }
      if (multi ? at(quote.repeat(3)) : text[i] === quote) break;
      i++;
    }
    if (multi) {
      // Up to two quotes right before the closing delimiter belong to the content.
      for (let extra = 0; extra < 2 && text[i + 3] === quote; extra++) i++;
    }
    const end = i;
    i += multi ? 3 : 1;
    const raw = text.slice(start, end);
    if (quote === "'") return raw;
    try {
      return JSON.parse(`"${raw.replace(/\\U([0-9A-Fa-f]{8})/g, (_, h: string) => String.fromCodePoint(parseInt(h, 16)))}"`) as string;
    } catch {
      return raw;
    }
  };

  /** A key, dotted or not: its segments. */
  const readKey = (): string[] => {
    const parts: string[] = [];
    for (;;) {
      skipSpaces();
      if (text[i] === '"' || text[i] === "'") parts.push(readString());
      else {
        const start = i;
        while (i < text.length && /[A-Za-z0-9_-]/.test(text[i]!)) i++;
        parts.push(text.slice(start, i));
        if (i === start) i++; // not TOML smol-toml accepted: never loop
      }
      skipSpaces();
      if (text[i] !== ".") return parts;
      i++;
    }
  };

  /** Resolve header or key segments under `base`, stepping into each array of tables' current element. */
  const resolve = (base: string, parts: string[], key: number): string => {
    let path = base;
    for (const part of parts) {
      path = path === "" ? part : `${path}.${part}`;
      note(path, key);
      const index = arrays.get(path);
      if (index !== undefined) path = `${path}[${index}]`;
    }
    return path;
  };

  const readValue = (path: string): void => {
    note(path, i, i);
    const c = text[i];
    if (c === '"' || c === "'") {
      readString();
    } else if (c === "[") {
      i++;
      for (let n = 0; ; n++) {
        skipBlank();
        if (i >= text.length || text[i] === "]") break;
        readValue(`${path}[${n}]`);
        skipBlank();
        if (text[i] === ",") i++;
      }
      i++;
    } else if (c === "{") {
      i++;
      for (;;) {
        skipBlank();
        if (i >= text.length || text[i] === "}") break;
        keyValue(path);
        skipBlank();
        if (text[i] === ",") i++;
      }
      i++;
    } else {
      // Numbers, booleans, dates (a date-time may hold a space): up to the next delimiter.
      const start = i;
      while (i < text.length && !/[,\]}#\r\n]/.test(text[i]!)) i++;
      if (i === start) i++;
    }
  };

  const keyValue = (base: string): void => {
    const keyAt = i;
    const parts = readKey();
    const path = resolve(base, parts, keyAt);
    skipSpaces();
    if (text[i] === "=") i++;
    skipSpaces();
    const valueAt = i;
    found.set(path, { key: keyAt, value: valueAt });
    readValue(path);
  };

  let table = "";
  for (;;) {
    skipBlank();
    if (i >= text.length) break;
    const start = i;
    if (at("[[")) {
      i += 2;
      const parts = readKey();
      const parent = resolve("", parts.slice(0, -1), start);
      const name = parent === "" ? parts.at(-1)! : `${parent}.${parts.at(-1)!}`;
      const index = (arrays.get(name) ?? -1) + 1;
      arrays.set(name, index);
      note(name, start);
      table = `${name}[${index}]`;
      found.set(table, { key: start, value: start });
      i = text.indexOf("]]", i) + 2;
      // Sub-tables of a former element are not this one's.
      for (const key of arrays.keys()) if (key.startsWith(`${name}[`)) arrays.delete(key);
    } else if (text[i] === "[") {
      i++;
      const parts = readKey();
      table = resolve("", parts, start);
      found.set(table, { key: start, value: start });
      i = text.indexOf("]", i) + 1;
    } else {
      keyValue(table);
    }
    if (i <= start) i = start + 1;
  }

  // Offsets → line and column, once, from the line starts.
  const lineStarts = [0];
  for (let k = 0; k < text.length; k++) if (text[k] === "\n") lineStarts.push(k + 1);
  const position = (offset: number): Position => {
    let lo = 0;
    let hi = lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (lineStarts[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    return { line: lo + 1, column: [...text.slice(lineStarts[lo]!, offset)].length + 1 };
  };
  return new Map([...found].map(([path, p]) => [path, { key: position(p.key), value: position(p.value) }]));
}
