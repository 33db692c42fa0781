/**
 * A connection llama-server closed, reused: llama-server ends every connection that carried a
 * streamed answer though its headers said `Keep-Alive: timeout=5, max=100` (server-http.cpp
 * process_handler_response; cpp-httplib write_content_chunked / process_server_socket_core),
 * so a request sent on it before its close arrives is reset unread. Seen through the router
 * before it sent such a request again: about 1 in 100 back-to-back streamed turns failed over
 * and its conversation moved. Two real llama-servers (one thread each, 2 slots), llmroute in
 * process, the official client.
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { parseConfig } from "../../src/config.ts";
import { memoryLog } from "../../src/log.ts";
import { startRouter, type RouterServer } from "../../src/proxy/server.ts";
import { killAll } from "../helpers/proc.ts";
import { startLlamaReplicas, WORDS_ONLY } from "./_llamacpp.ts";

/** A thousand turns on two cores, beside whatever else runs. */
const TIMEOUT = 900_000;

let server: RouterServer | undefined;
afterAll(async () => {
  await server?.stop();
  await killAll();
});

describe("back-to-back streamed turns on llama-server's keep-alive connections", () => {
  it(
    "1,000 streamed turns of 4 conversations: every turn on its conversation's first replica, none failed over",
    async () => {
      const replicas = await startLlamaReplicas(2, { prefix: "keepalive" });
      const text = `[server]\nlisten = "127.0.0.1:0"\n${replicas.map((r, i) => `[[replica]]\nname = "gpu${i}"\nurl = "${r.url}"\n`).join("")}`;
      server = await startRouter(parseConfig(text, "<keep-alive system test>", { env: {} }), { log: memoryLog() });
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: TIMEOUT });

      // Each conversation sends its turns one after the other, each as soon as the last ended;
      // the four run side by side (two per replica: its two slots).
      const converse = async (c: number) => {
        const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: `conversation ${c} ${crypto.randomUUID()}` }];
        const turns: string[] = [];
        for (let t = 0; t < 250; t++) {
          messages.push({ role: "user", content: `turn ${t}` });
          const { data, response } = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 2, temperature: 0, stream: true, ...WORDS_ONLY }).withResponse();
          let answer = "";
          for await (const chunk of data) answer += chunk.choices[0]?.delta?.content ?? "";
          turns.push(`${response.headers.get("x-llmroute-replica")} ${response.headers.get("x-llmroute-route")}`);
          messages.push({ role: "assistant", content: answer });
        }
        return turns;
      };
      const conversations = await Promise.all([0, 1, 2, 3].map(converse));

      for (const turns of conversations) {
        const home = turns[0]!.split(" ")[0]!;
        expect(turns[0]).toBe(`${home} spread`);
        const moved = turns.flatMap((turn, t) => (t > 0 && turn !== `${home} pin` ? [`turn ${t}: ${turn}`] : []));
        expect(moved).toEqual([]);
      }
      const failovers = (await (await fetch(`${server.url}/metrics`)).text()).split("\n").filter((l) => l.startsWith("llmroute_failovers_total{"));
      expect(failovers).toHaveLength(2);
      for (const line of failovers) expect(line).toMatch(/ 0$/);
    },
    TIMEOUT,
  );
});
