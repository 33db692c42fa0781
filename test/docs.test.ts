/**
 * The docs as a reader finds their way through them: short pages that open with a table
 * of contents, links that lead somewhere (the file and, for a #fragment, the heading, by
 * GitHub's anchor rules), words a reader has, the sections scripts keep current, and the
 * six questions a new user must answer by the README's links alone (listed in
 * CONTRIBUTING.md, "The docs' own test").
 */
import { describe, expect, it } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { ALL_PAGES, headings, links, prose, readPage, ROOT, section, slug, USER_PAGES } from "./helpers/markdown.ts";

const LIMITS: Record<string, number> = { "README.md": 250 };
const DOCS_LIMIT = 600;
/** A table of contents must start within this many lines of the top. */
const TOC_WITHIN = 40;

describe("GitHub's heading anchors", () => {
  it.each([
    ["Reload (SIGHUP)", "reload-sighup"],
    ["`[routing.cache_aware]`", "routingcache_aware"],
    ["Discovery and `llmroute check --probe`", "discovery-and-llmroute-check---probe"],
    ["The docs' own test", "the-docs-own-test"],
    ["llama.cpp's slots and the RAM prompt cache", "llamacpps-slots-and-the-ram-prompt-cache"],
    ["Available, captured, delivered", "available-captured-delivered"],
  ])("%s → #%s", (text, anchor) => {
    expect(slug(text)).toBe(anchor);
  });

  it("a repeated heading gets -1 as on GitHub", () => {
    expect(headings("## A\n\n## A\n").map((h) => h.slug)).toEqual(["a", "a-1"]);
  });

  it("a heading inside a code block is not one", () => {
    expect(headings("```\n# not a heading\n```\n## Real\n").map((h) => h.slug)).toEqual(["real"]);
  });
});

describe.each(USER_PAGES.map((p) => [p]))("%s", (page) => {
  const text = readPage(page);
  const lines = text.split("\n");

  it("is within its line limit", () => {
    const limit = LIMITS[page] ?? DOCS_LIMIT;
    expect(lines.length - (text.endsWith("\n") ? 1 : 0)).toBeLessThanOrEqual(limit);
  });

  it("opens with a table of contents that lists every section", () => {
    const first = lines.findIndex((l) => /^\s*- \[.*\]\(#[^)]+\)/.test(l));
    expect(first).toBeGreaterThanOrEqual(0);
    expect(first).toBeLessThan(TOC_WITHIN);
    let end = first;
    while (end < lines.length && /^\s*- \[/.test(lines[end]!)) end++;
    const listed = new Set(links(lines.slice(first, end).join("\n")).map((l) => l.target.replace(/^#/, "")));
    const sections = headings(text).filter((h) => h.level === 2).map((h) => h.slug);
    expect(sections.length).toBeGreaterThan(1);
    expect(sections.filter((s) => !listed.has(s))).toEqual([]);
  });
});

describe("links", () => {
  it.each(ALL_PAGES.map((p) => [p]))("every relative link in %s leads to a file, and a #fragment to one of its headings", (page) => {
    const broken: string[] = [];
    for (const { target, line } of links(readPage(page))) {
      if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
      const [path, fragment] = target.split("#", 2) as [string, string | undefined];
      const file = path === "" ? page : normalize(join(dirname(page), decodeURI(path)));
      if (!existsSync(join(ROOT, file))) {
        broken.push(`${page}:${line}: ${target}: no such file`);
        continue;
      }
      if (fragment !== undefined && file.endsWith(".md") && !headings(readPage(file)).some((h) => h.slug === fragment)) {
        broken.push(`${page}:${line}: ${target}: no heading #${fragment} in ${file}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it("finds the links it checks (the README links into docs/ and to CONTRIBUTING.md)", () => {
    const targets = links(readPage("README.md")).map((l) => l.target);
    expect(targets.filter((t) => t.startsWith("docs/")).length).toBeGreaterThan(10);
    expect(targets).toContain("CONTRIBUTING.md");
  });
});

describe("words a reader has", () => {
  it.each(ALL_PAGES.map((p) => [p]))("%s never says 'the seed' (the project's source documents) nor names an issue or item number", (page) => {
    const found = prose(readPage(page))
      .split("\n")
      .flatMap((l, i) => [...l.matchAll(/\bthe seed\b|\bissues?\s*#?\d+|\bitems?\s+#?\d+/gi)].map((m) => `${page}:${i + 1}: ${m[0]}`));
    expect(found).toEqual([]);
  });

  it("the glossary defines the words the pages use in a sense of their own", () => {
    const glossary = headings(readPage("docs/glossary.md")).map((h) => h.text.toLowerCase());
    for (const term of ["continuation", "pin", "spread", "cost", "capacity wall", "available", "captured", "delivered", "template break", "false correction"]) {
      expect(glossary.some((h) => h.includes(term))).toBe(true);
    }
    expect(links(readPage("README.md")).some((l) => l.target.startsWith("docs/glossary.md"))).toBe(true);
  });
});

describe("the lab notebook: perf/EXPERIMENTS.md", () => {
  it("links every file under perf/results/ (the experiments' notes and patches in perf/results/experiments/), and no patch lies outside it", () => {
    const linked = new Set(links(readPage("perf/EXPERIMENTS.md")).map((l) => normalize(join("perf", decodeURI(l.target.split("#")[0]!)))));
    const files = readdirSync(join(ROOT, "perf/results"), { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => normalize(join(e.parentPath, e.name)).slice(ROOT.length + 1));
    expect(files.length).toBeGreaterThan(0);
    expect(files.filter((f) => !linked.has(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith(".diff") && !f.startsWith("perf/results/experiments/"))).toEqual([]);
  });
});

describe("sections that scripts and the lead keep current", () => {
  /** The lines of a page that are exactly this marker (a marker quoted in prose is not one). */
  const markerLines = (page: string, marker: string) =>
    readPage(page)
      .split("\n")
      .flatMap((l, i) => (l.trim() === marker ? [i] : []));
  /** The text between two marker lines, each present exactly once and in order. */
  const between = (page: string, start: string, end: string): string => {
    const [a, b] = [markerLines(page, start), markerLines(page, end)];
    expect(a).toHaveLength(1);
    expect(b).toHaveLength(1);
    expect(a[0]!).toBeLessThan(b[0]!);
    return readPage(page).split("\n").slice(a[0]! + 1, b[0]!).join("\n");
  };

  it("perf/README.md holds the perf:overhead tables between its markers (where perf:overhead --readme writes), and no other page has them", () => {
    expect(between("perf/README.md", "<!-- perf:begin -->", "<!-- perf:end -->")).toContain("| direct |");
    expect(ALL_PAGES.filter((p) => p !== "perf/README.md" && markerLines(p, "<!-- perf:begin -->").length > 0)).toEqual([]);
  });

  it("docs/bench.md keeps its sample outputs between markers, with the runs they come from named", () => {
    const samples = between("docs/bench.md", "<!-- bench-sample:start -->", "<!-- bench-sample:end -->");
    expect(samples).toMatch(/runs? [0-9a-f]{12}/);
  });

  it("the README's real-engine block is a measurement: the command that made it, its date, n beside the figures", () => {
    const block = between("README.md", "<!-- realengine:start -->", "<!-- realengine:end -->");
    expect(block).toMatch(/Measured by `npm run perf:real-engine` on \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    expect(block).toContain("n warm turns");
    const around = section(readPage("README.md"), "checked-against-a-real-engine") ?? "";
    expect(around).toContain("npm run engine:llamacpp");
    expect(around).toContain("llmroute bench --config");
  });
});

describe("the docs' own test: six questions answered by the README's links alone", () => {
  const guide = section(readPage("CONTRIBUTING.md"), "the-docs-own-test") ?? "";
  const rows = [...guide.matchAll(/^\| (.+?) \| \[[^\]]*\]\(([^)]+)\) \| `([^`]+)` \|$/gm)].map((m) => ({ question: m[1]!, target: m[2]!, term: m[3]! }));
  const readme = readPage("README.md");

  it("CONTRIBUTING.md lists the six", () => {
    expect(rows.map((r) => r.question)).toEqual([
      "How do I set the first-byte timeout?",
      "What does SIGHUP do?",
      "What do I enable on vLLM so the router sees cached tokens?",
      'What does "captured" mean?',
      "How do I run two routers?",
      "How do I check that a replica's cache works?",
    ]);
  });

  it.each(rows.map((r) => [r.question, r]))("%s", (_question, { target, term }) => {
    expect(links(readme).map((l) => l.target)).toContain(target);
    const [file, anchor] = target.split("#") as [string, string];
    expect(anchor).toBeDefined();
    const answer = section(readPage(file), anchor);
    expect(answer).toBeDefined();
    expect(answer).toContain(term);
  });
});
