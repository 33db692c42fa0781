/**
 * `llmroute bench --workload trace`: a public production trace in the Mooncake format
 * (kvcache-ai/Mooncake FAST25-release/traces/, the format AIPerf's `mooncake_trace` and
 * Dynamo's replay read): one JSON object a line, `timestamp` (ms from the trace's start),
 * `input_length` and `output_length` (tokens), `hash_ids` (one id per `--trace-block-tokens`
 * block of the prompt, the last one usually partial; an equal id is the same prefix block).
 *
 * Pure steps after one streamed read: parse and check every line (a bad one stops the bench
 * before anything is sent, naming file, line and field), find the conversations (the chains
 * of requests that extend each other's blocks), then keep a sample of them whole, cut a
 * window of trace time with its warm-up, and compress arrivals. The text of each request is
 * trace-text.ts's; the yardsticks are pooled.ts's.
 */
import { LlmrouteError } from "../errors.ts";

/** One line of the trace, checked. */
export interface TraceRecord {
  /** 1-based line in the file. */
  line: number;
  /** Ms from the trace's start. */
  timestamp: number;
  inputLength: number;
  outputLength: number;
  hashIds: number[];
}

export type TraceShape = "chat" | "flat";
export const TRACE_SHAPES: readonly TraceShape[] = ["chat", "flat"];

/** What `--trace*` asks for. */
export interface TraceSpec {
  file: string;
  /** Tokens per hash id (512 in the Mooncake traces). */
  blockTokens: number;
  /** Keep each conversation with probability 1/sample (1 = every one); 2× the load = half the sample. */
  sample: number;
  /** Which conversations the sample keeps (the same in every run). */
  sampleSeed: number;
  /** Arrivals compressed by this factor (2 = twice as fast). */
  speed: number;
  /** Trace minute where the replay starts (the warm-up's start). */
  startMinutes: number;
  /** Trace minutes sent but not measured, from the start. */
  warmupMinutes: number;
  /** Trace minutes measured after the warm-up (Infinity = to the end). */
  minutes: number;
  shape: TraceShape;
  /** max_tokens = min(output_length, this). */
  maxOutput: number;
}

export const TRACE_DEFAULTS: Omit<TraceSpec, "file"> = {
  blockTokens: 512,
  sample: 1,
  sampleSeed: 1,
  speed: 1,
  startMinutes: 0,
  warmupMinutes: 0,
  minutes: Infinity,
  shape: "chat",
  maxOutput: 512,
};

const EXAMPLE = `{"timestamp": 0, "input_length": 1100, "output_length": 300, "hash_ids": [0, 1, 2]}`;

/**
 * Check one line. `previous` is the last good record (timestamps must not go back). Throws
 * LlmrouteError "usage": `FILE:LINE: field NAME: what is wrong; what would be valid`.
 */
export function parseTraceLine(text: string, file: string, line: number, blockTokens: number, previous?: TraceRecord): TraceRecord {
  const at = `${file}:${line}`;
  const fail = (what: string) => new LlmrouteError("usage", `${at}: ${what}`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw fail(`not JSON (${(error as Error).message}); each line must be one JSON object, e.g. ${EXAMPLE}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw fail(`not a JSON object (${kindOf(value)}); each line must be one, e.g. ${EXAMPLE}`);
  }
  const o = value as Record<string, unknown>;
  const field = (name: string, valid: string, ok: (v: number) => boolean): number => {
    const v = o[name];
    if (v === undefined) throw fail(`field ${name}: missing; must be ${valid}`);
    if (typeof v !== "number" || !Number.isFinite(v)) throw fail(`field ${name}: ${JSON.stringify(v)} is ${kindOf(v)}; must be ${valid}`);
    if (v < 0) throw fail(`field ${name}: ${v} is negative; must be ${valid}`);
    if (!ok(v)) throw fail(`field ${name}: ${v}; must be ${valid}`);
    return v;
  };
  const timestamp = field("timestamp", "milliseconds from the trace's start, a number >= 0", () => true);
  const inputLength = field("input_length", "the prompt's tokens, a whole number >= 1", (v) => Number.isInteger(v) && v >= 1);
  const outputLength = field("output_length", "the reply's tokens, a whole number >= 0", (v) => Number.isInteger(v));
  const ids = o.hash_ids;
  const expected = Math.ceil(inputLength / blockTokens);
  const idsValid = `an array of ${expected} block ids (whole numbers >= 0): one per ${blockTokens}-token block of input_length ${inputLength}, the last one partial`;
  if (ids === undefined) throw fail(`field hash_ids: missing; must be ${idsValid}`);
  if (!Array.isArray(ids)) throw fail(`field hash_ids: ${kindOf(ids)}; must be ${idsValid}`);
  const bad = ids.findIndex((id) => typeof id !== "number" || !Number.isInteger(id) || id < 0);
  if (bad >= 0) throw fail(`field hash_ids: item ${bad} is ${JSON.stringify(ids[bad])}; must be ${idsValid}`);
  if (ids.length !== expected) {
    throw fail(`field hash_ids: ${ids.length} ids; must be ${idsValid} (another block size? --trace-block-tokens, ${blockTokens} now)`);
  }
  if (previous && timestamp < previous.timestamp) {
    throw fail(`field timestamp: ${timestamp} is earlier than line ${previous.line}'s ${previous.timestamp}; a trace must be in arrival order (sort it by timestamp)`);
  }
  return { line, timestamp, inputLength, outputLength, hashIds: ids as number[] };
}

function kindOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "number") return Number.isFinite(v) ? "a number" : "not a finite number";
  return `a ${typeof v}`;
}

/**
 * Every line of a trace file, checked, read as a stream (the toolagent trace is large).
 * Blank lines are skipped; a file with no request is an error.
 */
export async function readTrace(file: string, blockTokens: number): Promise<TraceRecord[]> {
  const handle = Bun.file(file);
  if (!(await handle.exists())) throw new LlmrouteError("usage", `${file}: no such file; --trace takes a Mooncake-format JSONL file (one request a line, e.g. ${EXAMPLE})`);
  const records: TraceRecord[] = [];
  const decoder = new TextDecoder();
  let pending = "";
  let line = 0;
  const take = (text: string) => {
    line++;
    if (text.trim() === "") return;
    records.push(parseTraceLine(text, file, line, blockTokens, records.at(-1)));
  };
  for await (const chunk of handle.stream()) {
    pending += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      take(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
    }
  }
  pending += decoder.decode();
  if (pending !== "") take(pending);
  if (records.length === 0) throw new LlmrouteError("usage", `${file}:${Math.max(1, line)}: empty: no request in the file; --trace takes one JSON object a line, e.g. ${EXAMPLE}`);
  return records;
}

// --- conversations ---------------------------------------------------------------------------

/** Full blocks of a request: the last one is partial unless input_length is a multiple of the block. */
export function fullBlocks(r: Pick<TraceRecord, "inputLength">, blockTokens: number): number {
  return Math.floor(r.inputLength / blockTokens);
}

export interface Conversations {
  /** Leading blocks every request shares (a system prompt): they chain nothing. */
  preamble: number;
  /** Per record: its conversation (numbered in order of first appearance). */
  conversation: number[];
  /** Per record: the earlier request it extends, or -1 (a conversation's first request). */
  parent: number[];
  /** Per record: 1-based turn in its conversation (parent's + 1). */
  turn: number[];
  count: number;
}

interface TrieNode {
  children?: Map<number, TrieNode>;
  /** The request whose full blocks end here (the first one). */
  mark: number;
  /** Some node below is marked. */
  markedBelow: boolean;
  up?: TrieNode;
}

/**
 * The conversations: a request whose `hash_ids` start with all of an earlier request's full
 * blocks, more of them than the preamble, extends it; of several, the longest. (The earlier
 * request's last block is usually partial, and the next turn's block at that place holds
 * more text, so only its full blocks can be shared.) A request whose full blocks end inside
 * a longer chain already seen (a shorter re-ask) extends what it can but is no one's parent:
 * so the requests marked on any path of blocks are exactly its chain of turns, and every
 * request's turns — hence its rendering in the chat shape — agree with every other
 * request's wherever they share blocks.
 */
export function findConversations(records: readonly TraceRecord[], blockTokens: number): Conversations {
  const preamble = sharedPreamble(records, blockTokens);
  const root: TrieNode = { mark: -1, markedBelow: false };
  const conversation: number[] = [];
  const parent: number[] = [];
  const turn: number[] = [];
  let count = 0;
  records.forEach((r, i) => {
    let node = root;
    let best = -1;
    for (let d = 0; d < r.hashIds.length; d++) {
      const next = node.children?.get(r.hashIds[d]!);
      if (!next) break;
      node = next;
      if (d + 1 > preamble && node.mark >= 0) best = node.mark;
    }
    parent.push(best);
    conversation.push(best < 0 ? count++ : conversation[best]!);
    turn.push(best < 0 ? 1 : turn[best]! + 1);
    const full = fullBlocks(r, blockTokens);
    node = root;
    for (let d = 0; d < full; d++) {
      const id = r.hashIds[d]!;
      node.children ??= new Map();
      let next = node.children.get(id);
      if (!next) node.children.set(id, (next = { mark: -1, markedBelow: false, up: node }));
      node = next;
    }
    if (full > preamble && node.mark < 0 && !node.markedBelow) {
      node.mark = i;
      for (let up = node.up; up && !up.markedBelow; up = up.up) up.markedBelow = true;
    }
  });
  return { preamble, conversation, parent, turn, count };
}

/** Leading block ids every request has, no more than any request's full blocks. */
export function sharedPreamble(records: readonly TraceRecord[], blockTokens: number): number {
  if (records.length === 0) return 0;
  const first = records[0]!.hashIds;
  let n = Math.min(...records.map((r) => fullBlocks(r, blockTokens)));
  for (const r of records) {
    let k = 0;
    while (k < n && r.hashIds[k] === first[k]) k++;
    n = k;
    if (n === 0) break;
  }
  return n;
}

// --- sample, window, speed -------------------------------------------------------------------

/** One request the replay sends. */
export interface PlannedRequest {
  /** Index into the records. */
  record: number;
  /** Model ms from the arm's start. */
  atMs: number;
  /** Sent but not measured (the warm-up). */
  warmup: boolean;
  conversation: number;
  turn: number;
}

export interface TracePlan {
  spec: TraceSpec;
  records: readonly TraceRecord[];
  conversations: Conversations;
  requests: PlannedRequest[];
  /** Conversations kept by the sample (in the whole trace) and how many the trace has. */
  keptConversations: number;
  /** Trace ms of the window: [start, warmupEnd) warm-up, [warmupEnd, end) measured. */
  window: { startMs: number; warmupEndMs: number; endMs: number };
}

/** A uniform number in [0, 1) for conversation `c` under `seed` (a 32-bit integer mix). */
export function sampleDraw(seed: number, c: number): number {
  let x = (Math.imul(seed | 0, 0x9e3779b1) ^ Math.imul(c + 1, 0x85ebca6b)) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x7feb352d) >>> 0;
  x = Math.imul(x ^ (x >>> 15), 0x846ca68b) >>> 0;
  return ((x ^ (x >>> 16)) >>> 0) / 4294967296;
}

/**
 * Whether the sample keeps conversation `c`: its draw is below 1/sample. A smaller sample
 * keeps a superset (the 2× load replays every conversation of the 1× one, and as many again).
 */
export function keeps(spec: Pick<TraceSpec, "sample" | "sampleSeed">, c: number): boolean {
  return spec.sample <= 1 || sampleDraw(spec.sampleSeed, c) < 1 / spec.sample;
}

export function planTrace(records: readonly TraceRecord[], spec: TraceSpec, conversations = findConversations(records, spec.blockTokens)): TracePlan {
  const startMs = spec.startMinutes * 60_000;
  const warmupEndMs = startMs + spec.warmupMinutes * 60_000;
  const endMs = warmupEndMs + spec.minutes * 60_000;
  const kept = new Set<number>();
  for (let c = 0; c < conversations.count; c++) if (keeps(spec, c)) kept.add(c);
  const requests: PlannedRequest[] = [];
  records.forEach((r, i) => {
    const c = conversations.conversation[i]!;
    if (!kept.has(c) || r.timestamp < startMs || r.timestamp >= endMs) return;
    requests.push({ record: i, atMs: (r.timestamp - startMs) / spec.speed, warmup: r.timestamp < warmupEndMs, conversation: c, turn: conversations.turn[i]! });
  });
  return { spec, records, conversations, requests, keptConversations: kept.size, window: { startMs, warmupEndMs, endMs } };
}

/** Read, check and plan: everything the replay needs before it sends a request. */
export async function loadTrace(spec: TraceSpec): Promise<TracePlan> {
  const records = await readTrace(spec.file, spec.blockTokens);
  const plan = planTrace(records, spec);
  if (plan.requests.filter((r) => !r.warmup).length === 0) {
    const last = records.at(-1)!.timestamp / 60_000;
    throw new LlmrouteError(
      "usage",
      `${spec.file}: no request to measure: the window (--trace-start ${spec.startMinutes}, --trace-warmup-minutes ${spec.warmupMinutes}, --trace-minutes ${spec.minutes}) ` +
        `and --trace-sample ${spec.sample} leave none of the trace's ${records.length} requests (${last.toFixed(1)} minutes) after the warm-up`,
    );
  }
  return plan;
}
