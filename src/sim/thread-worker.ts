/** The thread behind startSimThread (thread.ts): one sim, started and stopped on message. */
import { startSim, type SimServer } from "./server.ts";
import type { ThreadMessage } from "./thread.ts";

declare const self: Worker;
let server: SimServer | undefined;
const reply = (message: ThreadMessage) => self.postMessage(message);

self.onmessage = async (event: MessageEvent<{ type: "start"; options: Parameters<typeof startSim>[0] } | { type: "stop" }>) => {
  const message = event.data;
  if (message.type === "start") {
    try {
      server = await startSim(message.options);
      reply({ type: "started", name: server.name, url: server.url, options: server.app.options, family: server.app.profile.family });
    } catch (error) {
      reply({ type: "failed", message: (error as Error).message });
    }
  } else {
    await server?.stop();
    reply({ type: "stopped" });
  }
};
