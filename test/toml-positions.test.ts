import { describe, expect, it } from "bun:test";
import { parse } from "smol-toml";
import { tomlPositions } from "../src/_toml-positions.ts";

/** `path → "line:column"` of the value (or "key@line:column" to check the key). */
function where(text: string, path: string, part: "key" | "value" = "value"): string | undefined {
  parse(text); // every case is valid TOML: the scanner only ever sees what smol-toml accepted
  const p = tomlPositions(text).get(path)?.[part];
  return p && `${p.line}:${p.column}`;
}

describe("tomlPositions: where each value is", () => {
  it.each([
    ["a plain key", `[server]\nlisten = "x"\n`, "server.listen", "2:10"],
    ["a key with spaces and tabs", `[server]\n  listen\t=   1\n`, "server.listen", "2:14"],
    ["a table header", `# c\n\n[health]\n`, "health", "3:1"],
    ["a dotted key at the root", `routing.cache_aware.min_match_ratio = 5\n`, "routing.cache_aware.min_match_ratio", "1:39"],
    ["a dotted key in a table", `[routing]\ncache_aware.balance_abs = 2\n`, "routing.cache_aware.balance_abs", "2:27"],
    ["a dotted header", `[routing.cache_aware]\nbalance_rel = 1.5\n`, "routing.cache_aware.balance_rel", "2:15"],
    ["a dotted header with spaces", `[ routing . cache_aware ]\nbalance_rel = 1.5\n`, "routing.cache_aware.balance_rel", "2:15"],
    ["quoted keys", `["server"]\n"listen" = 1\n'max_body' = 2\n`, "server.max_body", "3:14"],
    ["a quoted key holding a dot", `[a]\n"b.c" = 1\nd = 2\n`, "a.d", "3:5"],
    ["an inline table", `[routing]\ncache_aware = { min_match_ratio = 5, balance_abs = 3 }\n`, "routing.cache_aware.balance_abs", "2:52"],
    ["a nested inline table", `x = { y = { z = 1 } }\n`, "x.y.z", "1:17"],
    ["an inline table over lines (TOML 1.1)", `x = {\n  a = 1,\n  b = 2\n}\n`, "x.b", "3:7"],
    ["the inline table itself", `[routing]\ncache_aware = { min_match_ratio = 5 }\n`, "routing.cache_aware", "2:15"],
    ["array items", `[server]\napi_keys = ["a", "b",\n  "c"]\n`, "server.api_keys[2]", "3:3"],
    ["an array of inline tables", `x = [{ a = 1 }, { a = 2 }]\n`, "x[1].a", "1:23"],
    ["the first [[replica]]", `[[replica]]\nname = "a"\n`, "replica[0].name", "2:8"],
    ["the second [[replica]]", `[[replica]]\nname = "a"\n\n[[replica]]\nname = "b"\nurl = "u"\n`, "replica[1].url", "6:7"],
    ["an array table's header", `[[replica]]\n[[replica]]\n`, "replica[1]", "2:1"],
    ["the array's name (its first header)", `[server]\n[[replica]]\n[[replica]]\n`, "replica", "2:1"],
    ["a sub-table of an array element", `[[replica]]\nname = "a"\n[replica.extra]\nk = 1\n[[replica]]\n[replica.extra]\nk = 2\n`, "replica[1].extra.k", "7:5"],
    ["a nested array of tables", `[[a]]\n[[a.b]]\nx = 1\n[[a]]\n[[a.b]]\n[[a.b]]\nx = 3\n`, "a[1].b[1].x", "7:5"],
    ["after a multi-line string holding TOML", `s = """\n[server]\nlisten = 1\n"""\n[routing]\npolicy = "x"\n`, "routing.policy", "6:10"],
    ["after a multi-line literal string", `s = '''\nkey = "x\n'''\nt = 2\n`, "t", "4:5"],
    ["after a string ending in quotes", `s = """a""""\nt = 1\n`, "t", "2:5"],
    ["after a string with an escaped quote", `s = "a\\"b = 1"\nt = 1\n`, "t", "2:5"],
    ["after a comment with brackets", `# [server]\n# listen = 1\nx = 1 # [[y]]\nz = 2\n`, "z", "4:5"],
    ["a date-time with a space", `a = 1979-05-27 07:32:00Z\nb = 1\n`, "b", "2:5"],
    ["CRLF line ends", `[server]\r\nlisten = 1\r\nmax_body = 2\r\n`, "server.max_body", "3:12"],
    ["columns count characters, not bytes", `x = { "ünï" = 1, b = 2 }\n`, "x.b", "1:22"],
  ])("%s", (_name, text, path, expected) => {
    expect(where(text, path)).toBe(expected);
  });

  it.each([
    ["an unknown key", `[routing]\npolcy = "x"\n`, "routing.polcy", "2:1"],
    ["a dotted key's first part", `routng.policy = "x"\n`, "routng", "1:1"],
    ["a key inside an inline table", `[routing]\ncache_aware = { min_match = 1 }\n`, "routing.cache_aware.min_match", "2:17"],
  ])("key position: %s", (_name, text, path, expected) => {
    expect(where(text, path, "key")).toBe(expected);
  });

  it("finds every key of the example router.toml", async () => {
    const text = await Bun.file(new URL("../router.toml", import.meta.url)).text();
    const positions = tomlPositions(text);
    const leaves = (value: unknown, path: string): string[] =>
      Array.isArray(value)
        ? value.flatMap((v, i) => leaves(v, `${path}[${i}]`))
        : value !== null && typeof value === "object"
          ? Object.entries(value).flatMap(([k, v]) => leaves(v, path === "" ? k : `${path}.${k}`))
          : [path];
    const paths = leaves(parse(text), "");
    expect(paths.length).toBeGreaterThan(5);
    for (const path of paths) {
      const p = positions.get(path);
      expect({ path, found: p !== undefined }).toEqual({ path, found: true });
      // the value starts where the scanner says: its text is there
      const line = text.split("\n")[p!.value.line - 1]!;
      expect(line.slice(p!.value.column - 1)).not.toMatch(/^\s*$/);
    }
  });
});
