/**
 * Usage on every response (DESIGN key decision 2, the one exception to "forward the
 * client's bytes unchanged"): a streamed chat/completions request that did not ask for
 * usage gets `stream_options.include_usage` set — only for an engine that would not say its
 * cached tokens otherwise (the engine profile decides: llama.cpp's streams carry them
 * unasked, so nothing is added there) — and what that adds to the stream is taken out
 * again, so the client receives the bytes it would have received without the router.
 */
import type { Endpoint } from "../route/shape.ts";
import { splice, topLevelMembers, withoutMember, type Member } from "./_json-members.ts";

const encoder = new TextEncoder();

/** OpenAI's rule: a stream carries usage only with `stream_options.include_usage: true`. */
const openaiAsked = (options: unknown) => (options as Record<string, unknown> | null | undefined)?.include_usage === true;

/**
 * The body to send upstream: `bytes` with `stream_options.include_usage: true`, or
 * undefined when nothing needs adding (not a streamed chat/completions request, usage
 * already asked for — by `asked`, the engine family's reading of `stream_options`
 * (EngineProfile.stream.usageAsked), OpenAI's by default — or a `stream_options` the engine
 * would reject anyway). Only the `stream_options` member is written by the router; every
 * other byte is the client's.
 */
export function withUsageRequested(endpoint: Endpoint, body: Record<string, unknown>, bytes: Uint8Array, asked: (options: unknown) => boolean = openaiAsked): Uint8Array | undefined {
  if ((endpoint !== "chat" && endpoint !== "completions") || body.stream !== true) return undefined;
  const options = body.stream_options;
  if (options !== undefined && options !== null && (typeof options !== "object" || Array.isArray(options))) return undefined;
  if (asked(options)) return undefined;
  const scanned = topLevelMembers(bytes);
  if (!scanned) return undefined;
  const value = encoder.encode(JSON.stringify({ ...(options as object | null), include_usage: true }));
  // JSON.parse keeps the last of duplicate keys; so do we.
  const existing = scanned.members.findLast((m) => m.key === "stream_options");
  if (existing) return splice(bytes, existing.valueStart, existing.valueEnd, value);
  const member = new Uint8Array([...encoder.encode('"stream_options":'), ...value, ...(scanned.members.length > 0 ? encoder.encode(",") : [])]);
  return splice(bytes, scanned.open + 1, scanned.open + 1, member);
}

/**
 * Removes the usage the router asked for from an OpenAI-style SSE stream (one the client did
 * not ask usage of), and nothing else: an event whose JSON has `choices: []` and a usage is
 * dropped whole, and a `usage` member beside the choices is cut out — `null` (OpenAI writes
 * one into every chunk once usage is asked for), a zero object (Ollama's completions, once
 * asked: middleware/openai.go CompleteWriter.writeResponse), or running figures (vLLM, asked,
 * with stream_options.continuous_usage_stats: chat_completion/serving.py
 * chat_completion_stream_generator). Everything else — other events, `[DONE]`, comments, line
 * endings — passes byte for byte. Events are held only until their blank line arrives.
 */
export class UsageStripper {
  private pending = new Uint8Array(0);

  push(chunk: Uint8Array): Uint8Array {
    const bytes = this.pending.length > 0 ? concat(this.pending, chunk) : chunk;
    const out: Uint8Array[] = [];
    let start = 0;
    for (;;) {
      const end = eventEnd(bytes, start);
      if (end < 0) break;
      out.push(this.strip(bytes.subarray(start, end)));
      start = end;
    }
    this.pending = bytes.slice(start);
    return out.length === 1 ? out[0]! : concat(...out);
  }

  /** The end of the stream: an unterminated last event passes as it is. */
  end(): Uint8Array {
    const rest = this.pending;
    this.pending = new Uint8Array(0);
    return rest;
  }

  private strip(event: Uint8Array): Uint8Array {
    if (indexOfBytes(event, USAGE) < 0) return event;
    // Only a single `data:` line is inspected; anything else is not a chunk we added to.
    if (!startsWith(event, DATA)) return event;
    let start = DATA.length;
    if (event[start] === 0x20) start++;
    const lineEnd = event.indexOf(LF, start);
    const end = lineEnd > 0 && event[lineEnd - 1] === CR ? lineEnd - 1 : lineEnd;
    if (end < 0 || indexOfBytes(event.subarray(lineEnd + 1), DATA) >= 0) return event;
    const scanned = topLevelMembers(event, start, end);
    if (!scanned) return event;
    const usage = scanned.members.find((m) => m.key === "usage");
    if (!usage) return event;
    const choices = scanned.members.find((m) => m.key === "choices");
    if (choices && /^\[\s*\]$/.test(text(event, choices)) && text(event, usage) !== "null") return new Uint8Array(0);
    return withoutMember(event, scanned.members, usage);
  }
}

const LF = 0x0a;
const CR = 0x0d;
const USAGE = encoder.encode('"usage"');
const DATA = encoder.encode("data:");

/** Index just past the blank line that ends the event starting at `start`, or -1. */
function eventEnd(bytes: Uint8Array, start: number): number {
  for (let i = bytes.indexOf(LF, start); i >= 0; i = bytes.indexOf(LF, i + 1)) {
    if (bytes[i + 1] === LF) return i + 2;
    if (bytes[i + 1] === CR && bytes[i + 2] === LF) return i + 3;
  }
  return -1;
}

function text(bytes: Uint8Array, m: Member): string {
  return new TextDecoder().decode(bytes.subarray(m.valueStart, m.valueEnd));
}

function startsWith(bytes: Uint8Array, prefix: Uint8Array): boolean {
  if (bytes.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[i] !== prefix[i]) return false;
  return true;
}

function indexOfBytes(bytes: Uint8Array, needle: Uint8Array): number {
  const first = needle[0]!;
  for (let i = bytes.indexOf(first); i >= 0 && i + needle.length <= bytes.length; i = bytes.indexOf(first, i + 1)) {
    let j = 1;
    while (j < needle.length && bytes[i + j] === needle[j]) j++;
    if (j === needle.length) return i;
  }
  return -1;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
