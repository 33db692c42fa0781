/**
 * The README's shell examples, read as a user would run them (issue 20, item 18): one must
 * not overwrite the example router.toml, and a block that writes a config with `llmroute
 * sim > FILE` must serve that file.
 */
import { describe, expect, it } from "bun:test";

const README = await Bun.file(new URL("../README.md", import.meta.url)).text();
/** Each fenced block's command lines, without a "$ " prompt or a trailing comment. */
const blocks = [...README.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) =>
  m[1]!
    .split("\n")
    .map((l) => l.replace(/^\$ /, "").replace(/\s+#.*$/, "").trim())
    .filter((l) => l.startsWith("llmroute ") || l.startsWith("./dist/llmroute ")),
);

describe("the README's shell examples", () => {
  it("no command writes its output over the example router.toml", () => {
    const overwriting = blocks.flat().filter((l) => />\s*router\.toml\b/.test(l));
    expect(overwriting).toEqual([]);
  });

  it("a block that writes a sim fleet's config serves that file", () => {
    const mismatched: string[] = [];
    let checked = 0;
    for (const lines of blocks) {
      const written = lines.map((l) => /^llmroute sim .*>\s*(\S+)/.exec(l)?.[1]).find((f) => f !== undefined);
      if (!written) continue;
      for (const serve of lines.filter((l) => l.startsWith("llmroute serve"))) {
        checked++;
        const config = /(?:--config|-c)\s+(\S+)/.exec(serve)?.[1] ?? "router.toml";
        if (config !== written) mismatched.push(`${serve}  (the sim wrote ${written})`);
      }
    }
    expect(mismatched).toEqual([]);
    expect(checked).toBeGreaterThan(0);
  });
});
