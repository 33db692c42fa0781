/**
 * Request body → RequestShape: what the router needs to decide, read once from the parsed
 * JSON. The client's bytes are forwarded untouched; nothing here re-serialises a request.
 *
 * Segments are canonical: object keys sorted, text-only content arrays joined, so two
 * requests that differ only in JSON whitespace, key order or content-part packaging have
 * the same identity.
 */

export type Endpoint = "chat" | "completions" | "embeddings" | "responses" | "messages" | "other";

/**
 * One canonical prompt segment: a short head (the role and any tool-call fields) and the
 * text itself, kept apart so the text — often hundreds of KB straight from JSON.parse — is
 * hashed where it lies instead of being copied into a concatenation.
 */
export type Segment = readonly [head: string, text: string];

export interface RequestShape {
  endpoint: Endpoint;
  model?: string;
  stream: boolean;
  /**
   * Isolation key: header x-llmroute-tenant, body cache_salt (vLLM only shares KV between
   * requests with the same salt). "" if none.
   */
  tenant: string;
  /**
   * The prompt sequences, each as canonical segments in prompt order (tools, system, then
   * each message / item). A chat is one sequence; a batch of completion prompts or embedding
   * inputs is one sequence per prompt, since the engine runs each separately.
   */
  sequences: Segment[][];
  /** Carries an earlier turn: an assistant/tool message, a tool result, or previous_response_id. */
  continuation: boolean;
  previousResponseId?: string;
  /**
   * A client's session key — header x-session-id, Anthropic metadata.user_id, OpenAI
   * prompt_cache_key: a soft hint that requests belong together (a compacted context keeps
   * its system prompt and tools cached where the session ran), never an isolation key.
   */
  session?: string;
}

const ENDPOINTS: Record<string, Endpoint> = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completions",
  "/v1/embeddings": "embeddings",
  "/v1/responses": "responses",
  "/v1/messages": "messages",
};

export function endpointOf(path: string): Endpoint {
  return ENDPOINTS[path] ?? "other";
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

const SEP = "\u001e";

export interface ShapeHeaders {
  tenant?: string | null;
  session?: string | null;
}

export function shapeOf(endpoint: Endpoint, body: unknown, headers: ShapeHeaders = {}): RequestShape {
  const b: Obj = isObject(body) ? body : {};
  // Positional, so a header "a" and a cache_salt "a" stay different tenants.
  const keys = [headers.tenant ?? "", str(b.cache_salt)];
  const tenant = keys.some(Boolean) ? keys.join("\u001f") : "";
  const metadata = isObject(b.metadata) ? b.metadata : {};
  const session = headers.session || (endpoint === "messages" ? str(metadata.user_id) : "") || str(b.prompt_cache_key) || undefined;
  const segments: Segment[] = [];
  let sequences: Segment[][] | undefined;
  let continuation = false;
  let previousResponseId: string | undefined;

  if (b.tools !== undefined && b.tools !== null) segments.push([`tools${SEP}`, canonical(b.tools)]);

  switch (endpoint) {
    case "chat":
      for (const m of arr(b.messages)) {
        if (!isObject(m)) continue;
        const role = str(m.role);
        if (role === "assistant" || role === "tool" || role === "function") continuation = true;
        segments.push(message(role, m.content, m, ["name", "tool_calls", "tool_call_id", "function_call"]));
      }
      break;
    case "messages":
      if (b.system !== undefined && b.system !== null) segments.push([`system${SEP}`, content(b.system)]);
      for (const m of arr(b.messages)) {
        if (!isObject(m)) continue;
        const role = str(m.role);
        if (role === "assistant") continuation = true;
        if (arr(m.content).some((p) => isObject(p) && p.type === "tool_result")) continuation = true;
        segments.push(message(role, m.content, m, []));
      }
      break;
    case "responses": {
      previousResponseId = str(b.previous_response_id) || undefined;
      if (previousResponseId) continuation = true;
      if (b.instructions !== undefined && b.instructions !== null) segments.push([`system${SEP}`, content(b.instructions)]);
      if (typeof b.input === "string") segments.push([`user${SEP}`, b.input]);
      for (const item of arr(b.input)) {
        if (!isObject(item)) continue;
        const role = str(item.role);
        const type = str(item.type);
        if (role === "assistant" || /(_call|_call_output|^reasoning)$/.test(type)) continuation = true;
        if (role !== "") segments.push(message(role, item.content, item, []));
        else segments.push(["", canonical(item)]);
      }
      break;
    }
    case "completions":
      sequences = prompts(b.prompt, segments);
      break;
    case "embeddings":
      sequences = prompts(b.input, segments);
      break;
    case "other":
      break;
  }

  return {
    endpoint,
    ...(typeof b.model === "string" ? { model: b.model } : {}),
    stream: b.stream === true,
    tenant,
    sequences: sequences ?? (segments.length > 0 ? [segments] : []),
    continuation,
    ...(previousResponseId ? { previousResponseId } : {}),
    ...(session ? { session } : {}),
  };
}

/** A prompt field: one prompt (after a shared `tools` segment, if any), or a batch of them. */
function prompts(prompt: Json | undefined, lead: readonly Segment[]): Segment[][] {
  const one = (p: string): Segment[] => [...lead, ["", p]];
  if (typeof prompt === "string") return [one(prompt)];
  if (!Array.isArray(prompt)) return lead.length > 0 ? [[...lead]] : [];
  // An array of numbers is one tokenised prompt; an array of strings/arrays is a batch.
  if (prompt.every((p) => typeof p === "number")) return [one(canonical(prompt))];
  return prompt.map((p) => one(typeof p === "string" ? p : canonical(p)));
}

function message(role: string, body: Json | undefined, m: Obj, extra: string[]): Segment {
  let head = `${role}${SEP}`;
  for (const key of extra) {
    if (m[key] !== undefined && m[key] !== null) head += `${key}=${canonical(m[key]!)}${SEP}`;
  }
  return [head, content(body)];
}

const TEXT_PARTS = new Set(["text", "input_text", "output_text"]);

/** Message content as text: strings as-is, text parts joined, other parts canonical JSON. */
function content(value: Json | undefined): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) return canonical(value);
  let out = "";
  for (const part of value) {
    if (typeof part === "string") out += part;
    else if (isObject(part) && TEXT_PARTS.has(str(part.type)) && typeof part.text === "string") out += part.text;
    else if (isObject(part) && part.type === "tool_result") {
      out += `${SEP}tool_result=${str(part.tool_use_id)}${SEP}${content(part.content)}`;
    } else if (isObject(part)) {
      // cache_control and similar hints do not change the prompt the engine sees.
      const { cache_control: _ignored, ...rest } = part;
      out += `${SEP}${canonical(rest)}`;
    }
  }
  return out;
}

/** JSON with object keys sorted at every level: independent of key order and whitespace. */
export function canonical(value: Json): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k]!)}`).join(",")}}`;
}

function isObject(v: unknown): v is Obj {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function arr(v: Json | undefined): Json[] {
  return Array.isArray(v) ? v : [];
}

function str(v: Json | undefined): string {
  return typeof v === "string" ? v : "";
}
