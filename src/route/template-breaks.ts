/**
 * Where a chat template ends the cache of a continuation, learnt per replica (its model's
 * template) from the engine's own reports. Some templates render earlier turns differently
 * once a new user message arrives, so the engine's cached prefix stops short of the previous
 * request even though nothing was evicted:
 *
 * - `before-last-user`: Mistral 3's tool template puts `[AVAILABLE_TOOLS]…` just before the
 *   last user message; the next turn moves it, so the cache ends where the previous request's
 *   last user message began (and the tools, rendered there, are not part of it).
 * - `after-last-user`: Qwen3 renders `<think>` reasoning only for assistant turns after the
 *   last user query; a new user message drops it from all of them, so the cache ends where
 *   the previous request's last user message ended.
 *
 * Each is a position in the request's own segments, so the router can predict the hit the
 * engine will really deliver (instead of a shortfall every user turn), once the same kind has
 * explained a template shortfall twice on that replica. Pure: segment lists in, positions out.
 */
import type { Segment } from "./shape.ts";

export const TEMPLATE_BREAKS = ["before-last-user", "after-last-user"] as const;
export type TemplateBreak = (typeof TEMPLATE_BREAKS)[number];

/** Where each kind of break would put the cache's end for this request, in characters of its prompt. */
export interface BreakPoints {
  "before-last-user": number;
  "after-last-user": number;
  /**
   * Characters of a leading tools segment: the shape lists tools first and the chain counts
   * their characters before the first link (chain.ts: a namespace, never a prefix of their
   * own), while some templates render them late (Mistral 3).
   */
  toolsChars: number;
}

const USER = "user\u001e";
const TOOLS = "tools\u001e";

/**
 * The break points of a continuation whose first `matchedChars` were sent before: only when it
 * adds a user message after that prefix (the turn that re-renders earlier ones) and the prefix
 * itself holds a user message. Undefined otherwise: no template break is expected.
 */
export function breakPoints(segments: readonly Segment[], matchedChars: number): BreakPoints | undefined {
  let at = 0;
  let lastUser: { start: number; end: number } | undefined;
  let newUser = false;
  let toolsChars = 0;
  for (const [i, [head, text]] of segments.entries()) {
    const start = at;
    at += head.length + text.length;
    if (i === 0 && head === TOOLS) toolsChars = at;
    if (!head.startsWith(USER)) continue;
    if (at <= matchedChars) lastUser = { start, end: at };
    else if (start >= matchedChars) newUser = true;
  }
  if (!lastUser || !newUser) return undefined;
  return { "before-last-user": lastUser.start, "after-last-user": lastUser.end, toolsChars };
}

/** The cache's end a break predicts: its position, less the tools when they are rendered late. */
export function predictedEnd(points: BreakPoints, kind: TemplateBreak, toolsLate: boolean): number {
  return Math.max(0, points[kind] - (toolsLate ? points.toolsChars : 0));
}

/** What a replica's template shortfalls have shown so far. */
export interface TemplateEvidence {
  /** Shortfalls each kind (with tools rendered late or not) explained. */
  counts: Partial<Record<`${TemplateBreak}${"" | "+tools-late"}`, number>>;
}

/** A kind is believed once it explained two shortfalls and most of them. */
export function learnedBreak(e: TemplateEvidence): { kind: TemplateBreak; toolsLate: boolean } | undefined {
  let best: string | undefined;
  let bestCount = 0;
  let all = 0;
  for (const [key, n] of Object.entries(e.counts)) {
    all += n ?? 0;
    if ((n ?? 0) > bestCount) {
      best = key;
      bestCount = n ?? 0;
    }
  }
  if (!best || bestCount < 2 || bestCount * 2 <= all) return undefined;
  const toolsLate = best.endsWith("+tools-late");
  return { kind: (toolsLate ? best.slice(0, -"+tools-late".length) : best) as TemplateBreak, toolsLate };
}

/**
 * Which break explains a shortfall that ended at `deliveredChars` (the engine's cached tokens
 * in characters), within `tolerance` characters; undefined when none does.
 */
export function explainBreak(points: BreakPoints, deliveredChars: number, tolerance: number): keyof TemplateEvidence["counts"] | undefined {
  let best: keyof TemplateEvidence["counts"] | undefined;
  let bestGap = tolerance;
  for (const kind of TEMPLATE_BREAKS) {
    for (const late of points.toolsChars > 0 ? [false, true] : [false]) {
      const gap = Math.abs(predictedEnd(points, kind, late) - deliveredChars);
      if (gap <= bestGap) {
        bestGap = gap;
        best = late ? `${kind}+tools-late` : kind;
      }
    }
  }
  return best;
}
