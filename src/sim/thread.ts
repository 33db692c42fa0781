/**
 * A sim on its own thread: a Bun Worker with its own event loop, serving on loopback as
 * `startSim` does. The bench's sims share its process with the routers and the client; on
 * threads, what those compute no longer holds back the sims' timers (docs/bench.md#timer-lag).
 */
import { LlmrouteError } from "../errors.ts";
import type { EngineFamily } from "./profiles/index.ts";
import type { SimOptions } from "./options.ts";
import type { StartSimOptions } from "./server.ts";

/** What a caller of a sim needs of it, wherever it runs. */
export interface SimHandle {
  name: string;
  url: string;
  options: SimOptions;
  family: EngineFamily;
  stop(): Promise<void>;
}

export type ThreadMessage =
  | { type: "started"; name: string; url: string; options: SimOptions; family: EngineFamily }
  | { type: "failed"; message: string }
  | { type: "stopped" };

// From source, beside this file; in the compiled executable, the entrypoint build.ts adds
// (Bun's docs/bundler/executables.mdx, "Worker"), named by its path under the entrypoints'
// common folder, src/ (tried: the path from the project root does not resolve).
const WORKER_ENTRY = import.meta.url.includes("/$bunfs/") ? "./sim/thread-worker.ts" : new URL("./thread-worker.ts", import.meta.url).href;

/** Start one sim on a new thread; it is stopped (and the thread ended) by `stop()`. */
export async function startSimThread(options: StartSimOptions): Promise<SimHandle> {
  const worker = new Worker(WORKER_ENTRY);
  const next = () =>
    new Promise<ThreadMessage>((resolve, reject) => {
      worker.onmessage = (event: MessageEvent<ThreadMessage>) => resolve(event.data);
      worker.onerror = (event) => reject(new LlmrouteError("usage", `sim thread: ${event.message}`));
    });
  const started = next();
  worker.postMessage({ type: "start", options });
  const reply = await started.catch((error: unknown) => {
    worker.terminate();
    throw error;
  });
  if (reply.type !== "started") {
    worker.terminate();
    throw new LlmrouteError("usage", reply.type === "failed" ? reply.message : `sim thread: answered ${reply.type} to start`);
  }
  let stopped: Promise<void> | undefined;
  return {
    name: reply.name,
    url: reply.url,
    options: reply.options,
    family: reply.family,
    stop() {
      stopped ??= (async () => {
        const done = next();
        worker.postMessage({ type: "stop" });
        await done.finally(() => worker.terminate());
      })();
      return stopped;
    },
  };
}
