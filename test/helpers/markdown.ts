/**
 * The project's Markdown pages as a reader meets them on GitHub: which pages there are,
 * their headings with GitHub's anchors, and their links — code blocks and code spans left
 * out, since a `[x](y)` inside code is not a link.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");

/** The user documentation: the README and every page in docs/. */
export const USER_PAGES: readonly string[] = ["README.md", ...readdirSync(join(ROOT, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];

/** Every page a reader of the repository is sent to: the user docs, the development guide, the lab notes. */
export const ALL_PAGES: readonly string[] = [...USER_PAGES, "CONTRIBUTING.md", "perf/README.md", "perf/EXPERIMENTS.md"];

export function readPage(page: string): string {
  return readFileSync(join(ROOT, page), "utf8");
}

/** The text with fenced code blocks blanked (line numbers kept) and code spans removed. */
export function prose(text: string): string {
  let fenced = false;
  return text
    .split("\n")
    .map((line) => {
      if (/^\s*```/.test(line)) {
        fenced = !fenced;
        return "";
      }
      return fenced ? "" : line.replace(/``[^\n]*?``/g, "").replace(/`[^`\n]*`/g, "");
    })
    .join("\n");
}

/**
 * GitHub's anchor for a heading: the text without its Markdown (code marks, link targets),
 * lowercased, every character that is not a letter, digit, space, hyphen or underscore
 * dropped, spaces turned into hyphens.
 */
export function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

export interface Heading {
  level: number;
  text: string;
  /** Its anchor; a repeated one gets -1, -2, … as on GitHub. */
  slug: string;
  /** 0-based line. */
  line: number;
}

export function headings(text: string): Heading[] {
  const out: Heading[] = [];
  const seen = new Map<string, number>();
  let fenced = false;
  text.split("\n").forEach((line, i) => {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const m = fenced ? null : /^(#{1,6})\s+(.+?)\s*#*\s*$/.exec(line);
    if (!m) return;
    const base = slug(m[2]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.push({ level: m[1]!.length, text: m[2]!, slug: n === 0 ? base : `${base}-${n}`, line: i });
  });
  return out;
}

export interface Link {
  target: string;
  /** 1-based line, for messages. */
  line: number;
}

/** Inline links and images outside code. */
export function links(text: string): Link[] {
  const out: Link[] = [];
  prose(text)
    .split("\n")
    .forEach((line, i) => {
      for (const m of line.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push({ target: m[1]!, line: i + 1 });
    });
  return out;
}

/** The text of a heading's section: from the heading to the next heading of its level or above. */
export function section(text: string, anchor: string): string | undefined {
  const all = headings(text);
  const at = all.findIndex((h) => h.slug === anchor);
  if (at < 0) return undefined;
  const next = all.slice(at + 1).find((h) => h.level <= all[at]!.level);
  return text.split("\n").slice(all[at]!.line, next?.line).join("\n");
}
