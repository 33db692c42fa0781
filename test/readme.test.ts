/**
 * The shell examples of every page (the README, docs/, the development guide, the lab
 * notes), read as a user would run them: one must not overwrite the example router.toml,
 * a block that writes a config with `llmroute sim > FILE` must serve that file, and a block
 * that serves another file must ask `status` about it.
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

  it("a block that serves another config asks status about that router (status reads ./router.toml by default)", () => {
    const mismatched: string[] = [];
    let checked = 0;
    for (const { page, lines } of blocks) {
      const served = lines.map((l) => /^(?:\.\/dist\/)?llmroute serve .*(?:--config|-c)\s+(\S+)/.exec(l)?.[1]).find((f) => f !== undefined && f !== "router.toml");
      if (!served) continue;
      for (const status of lines.filter((l) => /^(?:\.\/dist\/)?llmroute status\b/.test(l))) {
        checked++;
        const config = /(?:--config|-c)\s+(\S+)/.exec(status)?.[1];
        if (config !== served && !/--url\s/.test(status)) mismatched.push(`${page}: ${status}  (the block serves ${served})`);
      }
    }
    expect(mismatched).toEqual([]);
    expect(checked).toBeGreaterThan(0);
  });
});
