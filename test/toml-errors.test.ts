/**
 * TOML syntax errors in the words of someone editing router.toml: what
 * is wrong and how to write it, at the parser's file:line:column. Each case is a mistake
 * people make; the parser's own message for it is in the comment.
 */
import { describe, expect, it } from "bun:test";
import { parseConfig } from "../src/config.ts";
import { ConfigError, formatIssue } from "../src/errors.ts";

function syntaxError(text: string): string {
  try {
    parseConfig(text, "router.toml", { env: {} });
  } catch (error) {
    if (error instanceof ConfigError) {
      expect(error.issues).toHaveLength(1);
      expect(error.issues[0]!.key).toBe("(syntax)");
      return formatIssue(error.issues[0]!);
    }
    throw error;
  }
  throw new Error("expected a ConfigError");
}

const R = `[[replica]]\nname = "gpu0"\nurl = "http://127.0.0.1:8001"\n`;

describe("TOML syntax errors say what is wrong and how to write it", () => {
  it.each([
    // "illegal character in key"
    ["an unclosed table header", `[server\nlisten = "127.0.0.1:8080"\n`, "1:8", "the table header is not closed: write [server]"],
    // "illegal character in key"
    ["an unclosed [[replica", `[[replica\nname = "a"\n`, "1:10", "the table header is not closed: write [[replica]]"],
    // "expected end of table array declaration"
    ["[[replica] with one closing bracket", `[[replica]\nname = "a"\n`, "1:11", "the table header is not closed: write [[replica]]"],
    // "illegal character in key"
    ["a key = value inside a header", `[routing = 1]\n`, "1:10", "a table header holds only a name: write [routing] on a line of its own, then key = value lines"],
    // "each key-value declaration must be followed by an end-of-line"
    ["a key after a header on its line", `[server] listen = "127.0.0.1:8080"\n`, "1:10", 'a table header stands on a line of its own: put listen = "127.0.0.1:8080" on the next line, under [server]'],
    // "unexpected end of key"
    ["a table name ending in a dot", `[server.]\n`, "1:9", "a table name has an empty part around a \".\": write [server]"],
    // "control characters are not allowed in strings"
    ["an unclosed string", `[server]\nlisten = "127.0.0.1:8080\n`, "2:25", 'the string is not closed: end it with " on the same line: listen = "127.0.0.1:8080"'],
    // "control characters are not allowed in strings"
    ["an unclosed literal string", `[routing]\npolicy = 'hybrid\n`, "2:17", "the string is not closed: end it with ' on the same line: policy = 'hybrid'"],
    // "unfinished string"
    ["an unclosed string at the end of the file", `[server]\nlisten = "127.0.0.1:8080`, "2:10", 'the string is not closed: end it with " on the same line: listen = "127.0.0.1:8080"'],
    // "unfinished string"
    ["an unclosed multi-line string", `${R}models = """a\n`, "4:10", 'the multi-line string is not closed: end it with """'],
    // "illegal character in numeric literal"
    ["an unquoted address", `[server]\nlisten = 127.0.0.1:8080\n`, "2:15", '127.0.0.1:8080 is not a number: an address, a duration or a size is a string: write listen = "127.0.0.1:8080"'],
    // "illegal character in numeric literal"
    ["an unquoted duration", `[health]\ninterval = 10s\n`, "2:14", '10s is not a number: an address, a duration or a size is a string: write interval = "10s"'],
    // "illegal character in numeric literal"
    ["an unquoted size", `[server]\nmax_body = 32MiB\n`, "2:14", '32MiB is not a number: an address, a duration or a size is a string: write max_body = "32MiB"'],
    // "invalid value"
    ["an unquoted URL", `[[replica]]\nname = "a"\nurl = http://127.0.0.1:8001\n`, "3:7", 'a string goes in quotes: write url = "http://127.0.0.1:8001"'],
    // "invalid value"
    ["a bare word", `[routing]\npolicy = hybrid\n`, "2:10", 'a string goes in quotes: write policy = "hybrid"'],
    // "invalid value"
    ["a bare word with a comment after it", `[routing]\npolicy = cache-aware   # the default is hybrid\n`, "2:10", 'a string goes in quotes: write policy = "cache-aware"'],
    // "invalid value"
    ["typographic quotes", `[routing]\npolicy = “hybrid”\n`, "2:10", 'typographic quotes: write straight ones: policy = "hybrid"'],
    // "invalid value"
    ["True", `${R}metrics = True\n`, "4:11", "true and false are lowercase: write metrics = true"],
    // "invalid value"
    ["no value", `[routing]\npolicy =\n`, "2:9", 'the value is missing after "="'],
    // "illegal leading zero"
    ["a leading zero", `[routing]\nmax_attempts = 03\n`, "2:16", "an integer cannot start with 0: write max_attempts = 3"],
    // "integer value cannot be represented losslessly"
    ["an integer too large", `[routing]\nmax_inflight = 99999999999999999999\n`, "2:16", "99999999999999999999 is too large for an integer"],
    // "illegal character in key"
    ["a missing =", `[server]\nlisten "127.0.0.1:8080"\n`, "2:8", '"=" is missing after the key: write listen = "127.0.0.1:8080"'],
    // "illegal character in key"
    ["a missing = before a bare word", `[routing]\npolicy hybrid\n`, "2:8", '"=" is missing after the key: write policy = "hybrid"'],
    // "illegal character in key"
    ["a colon for =", `[routing]\npolicy: "hybrid"\n`, "2:7", 'use "=" between a key and its value, not ":": write policy = "hybrid"'],
    // "illegal character in key"
    ["a key with a space", `[routing]\nmax inflight = 2\n`, "2:5", "a key cannot contain spaces: write max_inflight"],
    // "unexpected end of key"
    ["no key", `[routing]\n= 2\n`, "2:1", 'the key is missing before "="'],
    // "illegal character in key"
    ["JSON", `{"routing": {"policy": "hybrid"}}\n`, "1:1", "this is not TOML (it looks like JSON): write [table] headers and key = value lines, as in the example router.toml"],
    // "trying to redefine an already defined table or value"
    ["a duplicate key", `[routing]\npolicy = "hybrid"\nmax_attempts = 2\npolicy = "affinity"\n`, "4:1", "policy is set twice in [routing] (first at line 2): keep one"],
    // "trying to redefine an already defined table or value"
    ["a duplicate key in a [[replica]]", `${R}name = "gpu1"\n`, "4:1", "name is set twice in this [[replica]] (first at line 2): keep one"],
    // "trying to redefine an already defined table or value"
    ["a table twice", `[routing]\npolicy = "hybrid"\n[health]\n[routing]\nmax_attempts = 2\n`, "4:2", "[routing] appears twice (first at line 1): put its keys under one [routing] (only [[replica]] repeats)"],
    // "trying to redefine an already defined table or value"
    ["[replica] after [[replica]]", `${R}[replica]\nname = "b"\n`, "4:2", "replica is a list of tables: write [[replica]] for each one"],
    // "each key-value declaration must be followed by an end-of-line"
    ["two keys on a line", `[routing]\npolicy = "hybrid" max_attempts = 2\n`, "2:19", "one key = value per line: put max_attempts = 2 on a line of its own (a comment starts with #)"],
    // "expected comma or end of structure"
    ["an unclosed array", `[server]\napi_keys = ["a", "b"\nlisten = "127.0.0.1:8080"\n`, "3:1", "the array opened at line 2 is not closed: end it with ]"],
    // "invalid value"
    ["an array unclosed at the end of the file", `[server]\napi_keys = [\n  "a",\n`, "4:1", "the array opened at line 2 is not closed: end it with ]"],
    // "expected comma or end of structure"
    ["a missing comma in an array", `[server]\napi_keys = ["a" "b"]\n`, "2:17", 'a comma is missing between two items: write ["a", "b"]'],
    // "expected comma or end of structure"
    ["a missing comma in a multi-line array", `[server]\napi_keys = [\n  "a"\n  "b"\n]\n`, "4:3", 'a comma is missing between two items: write ["a", "b"]'],
    // "expected comma or end of structure"
    ["an unclosed inline table", `[routing]\ncache_aware = { balance_abs = 2\n`, "3:1", "the inline table opened at line 2 is not closed: end it with } (an inline table stays on one line)"],
    // "expected comma or end of structure"
    ["a missing comma in an inline table", `[routing]\ncache_aware = { balance_abs = 2 balance_rel = 1.5 }\n`, "2:33", "a comma is missing between two keys: write { a = 1, b = 2 }"],
    // "invalid value"
    ["a bare word in an array", `[server]\napi_keys = ["a", hunter2]\n`, "2:18", 'a string goes in quotes: write "hunter2"'],
    // "illegal character in numeric literal"
    ["an unquoted duration in an inline table", `[routing]\ncache_aware = { balance_abs = 2s }\n`, "2:32", '2s is not a number: an address, a duration or a size is a string: write "2s"'],
    // "invalid non-hex character in unicode escape"
    ["a Windows path in double quotes", `[routing]\nstate_file = "C:\\users\\x"\n`, "2:19", "a backslash in a \"…\" string starts an escape (\\n, \\t, \\u00e9): write \\\\ for a backslash, or use a literal string in single quotes: state_file = 'C:\\users\\x'"],
  ])("%s", (_name, text, position, reason) => {
    expect(syntaxError(text)).toBe(`router.toml:${position}: (syntax): ${reason}`);
  });

  it("anything else keeps the parser's words, at its position", () => {
    // "document contains excessively nested structures. aborting."
    expect(syntaxError(`x = ${"[".repeat(2000)}${"]".repeat(2000)}\n`)).toBe("router.toml:1:1005: (syntax): TOML syntax: document contains excessively nested structures. aborting.");
  });
});
