/**
 * The shell examples of every page (the README, docs/, the development guide, the lab
 * notes), read as a user would run them: one must not overwrite the example router.toml,
 * and a block that writes a config with `llmroute sim > FILE` must serve that file.
 */
import { describe, expect, it } from "bun:test";
import { ALL_PAGES, readPage } from "./helpers/markdown.ts";

/** Each fenced block's command lines, without a "$ " prompt or a trailing comment, per page. */
const blocks = ALL_PAGES.flatMap((page) =>
  [...readPage(page).matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => ({
    page,
    lines: m[1]!
      .split("\n")
      .map((l) => l.replace(/^\$ /, "").replace(/\s+#.*$/, "").trim())
      .filter((l) => l.startsWith("llmroute ") || l.startsWith("./dist/llmroute ")),
  })),
);

describe("the shell examples of every page", () => {
  it("reads commands from the README and from docs/", () => {
    const pages = new Set(blocks.filter((b) => b.lines.length > 0).map((b) => b.page));
    expect(pages.has("README.md")).toBe(true);
    expect([...pages].filter((p) => p.startsWith("docs/")).length).toBeGreaterThan(3);
  });

  it("no command writes its output over the example router.toml", () => {
    const overwriting = blocks.flatMap(({ page, lines }) => lines.filter((l) => />\s*router\.toml\b/.test(l)).map((l) => `${page}: ${l}`));
    expect(overwriting).toEqual([]);
  });

  it("a block that writes a sim fleet's config serves that file", () => {
    const mismatched: string[] = [];
    let checked = 0;
    for (const { page, lines } of blocks) {
      const written = lines.map((l) => /^llmroute sim .*>\s*(\S+)/.exec(l)?.[1]).find((f) => f !== undefined);
      if (!written) continue;
      for (const serve of lines.filter((l) => l.startsWith("llmroute serve"))) {
        checked++;
        const config = /(?:--config|-c)\s+(\S+)/.exec(serve)?.[1] ?? "router.toml";
        if (config !== written) mismatched.push(`${page}: ${serve}  (the sim wrote ${written})`);
      }
    }
    expect(mismatched).toEqual([]);
    expect(checked).toBeGreaterThan(0);
  });
});
