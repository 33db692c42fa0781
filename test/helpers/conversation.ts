/**
 * Client-side pieces the router's integration tests share: a growing agent conversation
 * that records where each turn was served, and a stream read to its end or its error.
 */
import type OpenAI from "openai";

export interface Turn {
  replica: string;
  route: string;
  cached: number;
}

/** A conversation with a long system prompt (unique per call) that grows by one turn per `turn()`. */
export function conversation(label: string, contextWords = 60) {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: `${label} ${crypto.randomUUID()} ${"context ".repeat(contextWords)}` },
    { role: "user", content: "begin" },
  ];
  const replicas: string[] = [];
  return {
    messages,
    /** Where each turn was served, in order. */
    replicas,
    async turn(client: OpenAI): Promise<Turn> {
      const { data, response } = await client.chat.completions.create({ model: "sim-model", messages, max_tokens: 2 }).withResponse();
      messages.push({ role: "assistant", content: data.choices[0]!.message.content ?? "" }, { role: "user", content: `next ${messages.length}` });
      replicas.push(response.headers.get("x-llmroute-replica")!);
      return { replica: replicas.at(-1)!, route: response.headers.get("x-llmroute-route")!, cached: data.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
    },
  };
}

/** The content of every chunk until the stream ends, and the error that ended it (if one did). */
export async function readStream(stream: AsyncIterable<OpenAI.ChatCompletionChunk>): Promise<{ received: string[]; error?: any }> {
  const received: string[] = [];
  try {
    for await (const chunk of stream) received.push(chunk.choices[0]?.delta?.content ?? "");
    return { received };
  } catch (error) {
    return { received, error };
  }
}
