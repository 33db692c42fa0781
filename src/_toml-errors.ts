/**
 * smol-toml's syntax errors in the words of someone editing router.toml. The parser says
 * where it stopped and what it met there ("illegal character in key" for an unclosed
 * `[server`); the line around that position says what the writer meant. Each rule below
 * names a mistake people make and how to write it instead; anything else keeps the
 * parser's own words. The position stays the parser's: editors jump to it.
 */

export interface TomlErrorAt {
  /** smol-toml's message (its first line; "Invalid TOML document: " is taken off). */
  message: string;
  /** 1-based, as smol-toml reports them. */
  line: number;
  column: number;
}

const KEY = /^[A-Za-z0-9_-]+$/;

/** What is wrong at the parser's position, and how to write it. */
export function explainTomlError(text: string, at: TomlErrorAt): string {
  const lines = text.split(/\r?\n/);
  const line = lines[at.line - 1] ?? "";
  const message = at.message.replace(/^Invalid TOML document: /, "").split("\n")[0]!.trim();
  const ctx: Context = { text, lines, line, trimmed: line.trim(), at, message };
  for (const rule of RULES) {
    const reason = rule(ctx);
    if (reason !== undefined) return reason;
  }
  return `TOML syntax: ${message}`;
}

interface Context {
  text: string;
  lines: string[];
  /** The line the parser stopped on, and the same trimmed. */
  line: string;
  trimmed: string;
  at: TomlErrorAt;
  message: string;
}

type Rule = (c: Context) => string | undefined;

const RULES: Rule[] = [
  // JSON (or YAML's flow style) pasted for TOML.
  (c) => (c.at.line === firstContentLine(c.lines) && c.trimmed.startsWith("{") ? "this is not TOML (it looks like JSON): write [table] headers and key = value lines, as in the example router.toml" : undefined),

  // Table headers (a line that starts with "[" outside any value).
  (c) => {
    if (!c.trimmed.startsWith("[") || unclosed(c.lines, c.at.line, 1)) return undefined;
    if (!/^(illegal character in key|expected end of table array declaration|unexpected end of key|illegal empty bare key|each key-value declaration must be followed by an end-of-line)$/.test(c.message)) return undefined;
    const array = c.trimmed.startsWith("[[");
    const written = c.trimmed.replace(/^\[+/, "").replace(/[\]\s#=].*$/, "");
    const name = written.split(".").filter((part) => part !== "").join(".");
    const header = array ? `[[${name}]]` : `[${name}]`;
    if (c.message.startsWith("each key-value")) {
      const rest = c.line.slice(c.at.column - 1).trim();
      return `a table header stands on a line of its own: put ${rest} on the next line, under ${header}`;
    }
    if (name !== written) return `a table name has an empty part around a ".": write ${header}`;
    if (!c.trimmed.includes(array ? "]]" : "]")) return `the table header is not closed: write ${header}`;
    return `a table header holds only a name: write ${header} on a line of its own, then key = value lines`;
  },

  // A key = value line whose key is not a key.
  (c) => {
    if (!/^(illegal character in key|unexpected end of key|illegal empty bare key|incomplete key-value: cannot find end of key)$/.test(c.message)) return undefined;
    const eq = c.line.indexOf("=");
    if (eq >= 0 && c.line.slice(0, eq).trim() === "") return 'the key is missing before "="';
    const colon = /^\s*([A-Za-z0-9_.-]+)\s*:\s*(.*)$/.exec(c.line);
    if (eq < 0 && colon) return `use "=" between a key and its value, not ":": write ${colon[1]} = ${asValue(colon[2]!)}`;
    const spaced = /^\s*([A-Za-z0-9_-]+)\s+([^=\s].*)$/.exec(c.line);
    if (eq < 0 && spaced) return `"=" is missing after the key: write ${spaced[1]} = ${asValue(spaced[2]!)}`;
    if (eq >= 0) {
      const key = c.line.slice(0, eq).trim();
      if (/\s/.test(key) && !/["']/.test(key)) return `a key cannot contain spaces: write ${key.replace(/\s+/g, "_")}`;
      if (!/["']/.test(key) && !key.split(".").every((part) => KEY.test(part.trim()))) return `a bare key is letters, digits, "_" and "-" only; "${key}" is not one (put it in quotes if it must be)`;
    }
    return undefined;
  },

  // Strings.
  (c) => {
    if (c.message !== "control characters are not allowed in strings" && c.message !== "unfinished string") return undefined;
    const value = valueOf(c.line);
    if (value?.raw.startsWith('"""') || value?.raw.startsWith("'''")) {
      return `the multi-line string is not closed: end it with ${value.raw.slice(0, 3)}`;
    }
    // Stopped at the end of the line (or of the file): the closing quote is missing.
    if (c.message === "unfinished string" || c.at.column > c.line.length) {
      const quote = value?.raw[0] === "'" ? "'" : '"';
      const written = value ? `: ${value.key} = ${quote}${value.raw.slice(1).trim()}${quote}` : "";
      return `the string is not closed: end it with ${quote} on the same line${written}`;
    }
    return "a string cannot hold a control character (a tab, a line break): write it as \\t or \\n, or use a multi-line string (\"\"\"…\"\"\")";
  },

  // Backslashes in "…" strings.
  (c) => {
    if (!/escape/.test(c.message)) return undefined;
    const value = valueOf(c.line);
    const literal = value && value.raw.startsWith('"') && !value.raw.slice(1).includes("'") ? `: ${value.key} = '${value.raw.slice(1).replace(/"\s*(#.*)?$/, "")}'` : "";
    return `a backslash in a "…" string starts an escape (\\n, \\t, \\u00e9): write \\\\ for a backslash, or use a literal string in single quotes${literal}`;
  },

  // One key = value per line.
  (c) => {
    if (c.message !== "each key-value declaration must be followed by an end-of-line") return undefined;
    const rest = c.line.slice(c.at.column - 1).trim();
    return `one key = value per line: put ${rest} on a line of its own (a comment starts with #)`;
  },

  // Arrays and inline tables: a missing comma, or a bracket never closed.
  (c) => {
    if (c.message !== "expected comma or end of structure" && c.message !== "unfinished array" && c.message !== "unfinished table" && !(c.message === "invalid value" && valueOf(c.line) === undefined)) return undefined;
    const open = unclosed(c.lines, c.at.line, c.at.column);
    if (!open) return undefined;
    const what = open.char === "[" ? "the array" : "the inline table";
    const close = open.char === "[" ? "]" : "}";
    // What follows is a new key, a header or the end: the structure was never closed.
    const next = c.line.slice(c.at.column - 1).trim();
    if (next === "" || next.startsWith("[") && open.line < c.at.line || assignment(next) && open.char === "[" || c.message !== "expected comma or end of structure") {
      return `${what} opened at line ${open.line} is not closed: end it with ${close}${open.char === "{" ? " (an inline table stays on one line)" : ""}`;
    }
    return open.char === "[" ? 'a comma is missing between two items: write ["a", "b"]' : "a comma is missing between two keys: write { a = 1, b = 2 }";
  },

  // Values: of a key, or an item of an array or inline table.
  (c) => {
    const value = valueOf(c.line);
    if (!value) return undefined;
    // Inside [ … ] or { … } the value in question is the item at the parser's position.
    const item = /^[[{]/.test(value.raw) ? tokenAt(c.line, c.at.column) : undefined;
    const raw = item ?? value.raw;
    const write = (v: string) => (item === undefined ? `${value.key} = ${v}` : v);
    if (c.message === "integer value cannot be represented losslessly") return `${raw} is too large for an integer`;
    if (c.message === "illegal leading zero" && /^[+-]?\d+$/.test(raw)) return `an integer cannot start with 0: write ${write(String(Number(raw)))}`;
    if (!/^(invalid value|illegal character in numeric literal|unfinished numeric value|illegal leading zero|illegal underscore|invalid date|invalid date-time: .*)$/.test(c.message)) return undefined;
    if (raw === "" || raw.startsWith("#")) return `the value is missing after "="${raw.startsWith("#") ? " (a # starts a comment)" : ""}`;
    if (/^[“”‘’]/.test(raw)) return `typographic quotes: write straight ones: ${write(`"${raw.replace(/^[“”‘’]|[“”‘’]$/g, "")}"`)}`;
    if (/^(true|false)$/i.test(raw)) return `true and false are lowercase: write ${write(raw.toLowerCase())}`;
    if (/^[+-]?\d/.test(raw)) return `${raw} is not a number: an address, a duration or a size is a string: write ${write(`"${raw}"`)}`;
    if (/^[A-Za-z]/.test(raw)) return `a string goes in quotes: write ${write(`"${raw}"`)}`;
    return undefined;
  },

  // The same table or key twice.
  (c) => {
    if (!c.message.startsWith("trying to redefine")) return undefined;
    if (c.trimmed.startsWith("[")) {
      const array = c.trimmed.startsWith("[[");
      const name = c.trimmed.replace(/^\[+\s*/, "").replace(/\s*\].*$/, "");
      const first = c.lines.findIndex((l, i) => i < c.at.line - 1 && (sameHeader(l, name) || new RegExp(`^\\s*${escape(name)}\\s*=`).test(l)));
      const where = first >= 0 ? ` (first at line ${first + 1})` : "";
      if (!array && c.lines.some((l, i) => i < c.at.line - 1 && l.trim().startsWith(`[[${name}]]`))) return `${name} is a list of tables: write [[${name}]] for each one`;
      if (array) return `${name} is already a table${where}, not a list: write [[${name}]] everywhere, or [${name}] once`;
      return `[${name}] appears twice${where}: put its keys under one [${name}] (only [[replica]] repeats)`;
    }
    const value = valueOf(c.line);
    if (!value) return undefined;
    const { table, line: first } = definedBefore(c.lines, c.at.line, value.key);
    const where = first === undefined ? "" : ` (first at line ${first})`;
    return `${value.key} is set twice in ${table}${where}: keep one`;
  },
];

/** `key = value` on a line: the key and the value as written (its comment taken off). */
function valueOf(line: string): { key: string; raw: string } | undefined {
  const m = /^\s*([^=\s"'][^=]*?|"[^"]*"|'[^']*')\s*=\s*(.*)$/.exec(line);
  if (!m) return undefined;
  let raw = m[2]!.trim();
  if (!/^["'“‘]/.test(raw)) raw = raw.replace(/\s+#.*$/, "").trim();
  return { key: m[1]!.trim(), raw };
}

/** The item of an array or inline table around `column` (1-based): between delimiters. */
function tokenAt(line: string, column: number): string | undefined {
  const delimiter = /[\s,[\]{}=]/;
  let start = column - 1;
  let end = column - 1;
  while (start > 0 && !delimiter.test(line[start - 1]!)) start--;
  while (end < line.length && !delimiter.test(line[end]!)) end++;
  const token = line.slice(start, end);
  return token === "" ? undefined : token;
}

function assignment(text: string): boolean {
  return /^\s*[A-Za-z0-9_."'-]+\s*=/.test(text);
}

/** A value as it should be written: kept when it is one already, else quoted. */
function asValue(raw: string): string {
  const v = raw.replace(/\s+#.*$/, "").trim();
  if (/^(".*"|'.*'|\[.*\]|\{.*\}|true|false|[+-]?\d+(\.\d+)?)$/.test(v)) return v;
  return `"${v.replace(/^["']|["']$/g, "")}"`;
}

function firstContentLine(lines: string[]): number {
  return lines.findIndex((l) => l.trim() !== "" && !l.trim().startsWith("#")) + 1;
}

function sameHeader(line: string, name: string): boolean {
  return new RegExp(`^\\s*\\[\\[?\\s*${escape(name)}\\s*\\]`).test(line);
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The table a key at `lineNo` belongs to, and the line where the same key was set in it before. */
function definedBefore(lines: string[], lineNo: number, key: string): { table: string; line?: number } {
  for (let i = lineNo - 2; i >= 0; i--) {
    const t = lines[i]!.trim();
    if (t.startsWith("[")) {
      const name = t.replace(/^\[+\s*/, "").replace(/\s*\].*$/, "");
      return { table: t.startsWith("[[") ? `this [[${name}]]` : `[${name}]` };
    }
    if (valueOf(lines[i]!)?.key === key) {
      const header = lines.slice(0, i).reverse().find((l) => l.trim().startsWith("["))?.trim();
      const name = header?.replace(/^\[+\s*/, "").replace(/\s*\].*$/, "");
      return { table: header === undefined ? "the file's top level" : header.startsWith("[[") ? `this [[${name}]]` : `[${name}]`, line: i + 1 };
    }
  }
  return { table: "the file's top level" };
}

/**
 * The innermost `[` or `{` of a value still open where the parser stopped (strings and
 * comments skipped; table headers are not values).
 */
function unclosed(lines: string[], lineNo: number, column: number): { char: "[" | "{"; line: number } | undefined {
  const stack: { char: "[" | "{"; line: number }[] = [];
  for (let i = 0; i < lineNo && i < lines.length; i++) {
    const line = i === lineNo - 1 ? lines[i]!.slice(0, column - 1) : lines[i]!;
    if (stack.length === 0 && line.trim().startsWith("[") && !assignment(line)) continue;
    let quote: string | undefined;
    for (let j = 0; j < line.length; j++) {
      const ch = line[j]!;
      if (quote) {
        if (ch === "\\" && quote === '"') j++;
        else if (ch === quote) quote = undefined;
        continue;
      }
      if (ch === "#") break;
      if (ch === '"' || ch === "'") quote = ch;
      else if (ch === "[" || ch === "{") stack.push({ char: ch, line: i + 1 });
      else if (ch === "]" || ch === "}") stack.pop();
    }
  }
  return stack.at(-1);
}
