/**
 * Simulated replicas behind real sockets: the only sim module that calls Bun.serve.
 */
import { LlmrouteError } from "../errors.ts";
import { createSimApp, type SimApp, type SimAppDeps } from "./app.ts";
import type { SimEngineApi } from "./engine-api.ts";
import type { SimOptions } from "./options.ts";

export interface SimServer {
  name: string;
  /** http://HOST:PORT, no trailing slash (127.0.0.1 when bound to 0.0.0.0). */
  url: string;
  port: number;
  engine: SimEngineApi;
  app: SimApp;
  /** Close the listener and every open connection; running sequences end. */
  stop(): Promise<void>;
}

export type StartSimOptions = Partial<SimOptions> & {
  /** 0 = an ephemeral port (default 0). */
  port?: number;
  /** Default 127.0.0.1. */
  hostname?: string;
};

export async function startSim(options: StartSimOptions = {}, deps: SimAppDeps = {}): Promise<SimServer> {
  const { port = 0, hostname = "127.0.0.1", ...simOptions } = options;
  const app = createSimApp(simOptions, deps);
  let server: ReturnType<typeof Bun.serve>;
  try {
    server = Bun.serve({
      port,
      hostname,
      // A cold 90k-token prompt sends nothing for ~22 s at full scale; never time that out.
      idleTimeout: 0,
      fetch: (request) => app.fetch(request),
    });
  } catch (error) {
    app.close();
    const reason = (error as { code?: string })?.code === "EADDRINUSE" ? "address in use" : (error as Error)?.message;
    throw new LlmrouteError("usage", `sim ${app.name}: cannot listen on ${hostname}:${port}: ${reason}`, { cause: error });
  }
  const boundPort = server.port ?? port;
  const host = hostname === "0.0.0.0" || hostname === "::" ? "127.0.0.1" : hostname.includes(":") ? `[${hostname}]` : hostname;
  let stopped: Promise<void> | undefined;
  return {
    name: app.name,
    url: `http://${host}:${boundPort}`,
    port: boundPort,
    engine: app.engine,
    app,
    stop() {
      stopped ??= (async () => {
        app.close();
        await server.stop(true);
      })();
      return stopped;
    },
  };
}

export type StartFleetOptions = Omit<StartSimOptions, "port" | "name"> & {
  replicas: number;
  /** Replica i listens on basePort + i; 0 or absent = an ephemeral port for each. */
  basePort?: number;
};

/** Start `replicas` sims named gpu0, gpu1, …; if one cannot start, the others are stopped. */
export async function startSimFleet(options: StartFleetOptions, deps: SimAppDeps = {}): Promise<SimServer[]> {
  const { replicas, basePort = 0, ...rest } = options;
  if (!Number.isInteger(replicas) || replicas < 1) {
    throw new LlmrouteError("usage", `sim: replicas = ${JSON.stringify(replicas)}: must be a positive integer`);
  }
  return startEach(replicas, (i) => startSim({ ...rest, name: `gpu${i}`, port: basePort === 0 ? 0 : basePort + i }, deps));
}

/** Start `n` sims (wherever `start` runs them), one after the other; if one cannot start, those started are stopped. */
export async function startEach<S extends { stop(): Promise<void> }>(n: number, start: (i: number) => Promise<S>): Promise<S[]> {
  const started: S[] = [];
  try {
    for (let i = 0; i < n; i++) started.push(await start(i));
  } catch (error) {
    await Promise.all(started.map((s) => s.stop()));
    throw error;
  }
  return started;
}

/**
 * A router.toml fragment listing these sims. An Ollama replica has neither /metrics nor
 * /health: it is checked on `/api/version` (profiles/ollama.ts) and not scraped.
 */
export function routerTomlSnippet(servers: readonly SimServer[]): string {
  return servers
    .map((s) => {
      const ollama = s.app.profile.family === "ollama";
      return [
        "[[replica]]",
        `name = "${s.name}"`,
        `url = "${s.url}"`,
        `kv_tokens = ${s.app.options.kvTokens}`,
        `models = ["${s.app.options.model}"]`,
        ...(ollama ? [`health_path = "/api/version"`, `metrics = false`] : [`metrics = "/metrics"`]),
      ].join("\n");
    })
    .join("\n\n");
}
