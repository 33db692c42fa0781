/**
 * In-process sims on ephemeral ports for the HTTP tests, plus ways to wait on engine events
 * instead of sleeping.
 */
import OpenAI from "openai";
import type { SimState } from "../../src/sim/app.ts";
import type { SequenceResult, SimSequence } from "../../src/sim/engine-api.ts";
import { startSim, type SimServer, type StartSimOptions } from "../../src/sim/index.ts";

const started = new Set<SimServer>();

export async function sim(options: StartSimOptions = {}): Promise<SimServer> {
  const server = await startSim({ port: 0, ...options });
  started.add(server);
  return server;
}

/** Stop every sim this file started (afterAll). */
export async function stopAll(): Promise<void> {
  await Promise.all([...started].map((s) => s.stop()));
  started.clear();
}

export function openai(server: SimServer): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
}

export async function state(server: SimServer): Promise<SimState> {
  return (await (await fetch(`${server.url}/sim/state`)).json()) as SimState;
}

export async function faults(server: SimServer, body: Record<string, number>): Promise<Response> {
  return fetch(`${server.url}/sim/faults`, { method: "POST", body: JSON.stringify(body) });
}

/** Resolves with the next sequence end on `server` matching `pred`. */
export function nextEnd(server: SimServer, pred: (r: SequenceResult) => boolean = () => true): Promise<SequenceResult> {
  return new Promise((resolve) => {
    const off = server.engine.onSequenceEnd((_, result) => {
      if (!pred(result)) return;
      off();
      resolve(result);
    });
  });
}

/** Resolves with the next sequence submitted to `server`'s engine. */
export function nextSubmit(server: SimServer): Promise<SimSequence> {
  return new Promise((resolve) => {
    const off = server.engine.onSubmit((seq) => {
      off();
      resolve(seq);
    });
  });
}

/** One value from a Prometheus text exposition (first sample whose name+labels start with `prefix`). */
export function metric(text: string, prefix: string): number {
  const line = text.split("\n").find((l) => l.startsWith(prefix));
  if (!line) throw new Error(`no metric ${prefix} in:\n${text}`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

export async function scrape(server: SimServer): Promise<string> {
  return (await fetch(`${server.url}/metrics`)).text();
}

/** A prompt of about `tokens` tokens (4 chars each) that starts with `tag`. */
export function words(tokens: number, tag: string): string {
  return `${tag}|${"lore".repeat(tokens)}`.slice(0, tokens * 4);
}

/** Stream a chat completion; returns real TTFT (ms to the first content delta), text and usage. */
export async function streamChat(client: OpenAI, body: Omit<OpenAI.ChatCompletionCreateParamsStreaming, "stream" | "model"> & { model?: string }) {
  const t0 = performance.now();
  const stream = await client.chat.completions.create({
    model: "sim-model",
    ...body,
    stream: true,
    stream_options: { include_usage: true },
  });
  let ttftMs: number | undefined;
  let text = "";
  let usage: OpenAI.CompletionUsage | undefined;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    const delta = chunk.choices[0]?.delta?.content;
    if (delta) {
      ttftMs ??= performance.now() - t0;
      text += delta;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  return { ttftMs: ttftMs!, text, usage: usage!, chunks };
}

/**
 * The error a promise rejects with (fails if it resolves). Bun's `expect(p).rejects` does not
 * see the openai client's APIPromise reject, so tests go through this.
 */
export async function rejection(promise: PromiseLike<unknown>): Promise<any> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection, but the promise resolved");
}
