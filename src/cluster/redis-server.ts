/**
 * A throwaway redis-server (or valkey-server) on a free loopback port, without persistence:
 * the Redis that `llmroute bench --routers N` starts when it is not given one, and the one
 * the system tests start, kill and restart.
 */
import type { Subprocess } from "bun";
import { LlmrouteError } from "../errors.ts";

export interface RedisServer {
  url: string;
  port: number;
  readonly pid: number;
  /** Stop it (SIGTERM by default; SIGKILL to simulate a crash); resolves when it has exited. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Freeze or thaw it (SIGSTOP / SIGCONT): a server that accepts connections but never answers. */
  pause(): void;
  resume(): void;
  /** Start it again on the same port, empty (there is no persistence). */
  restart(): Promise<void>;
}

export interface RedisServerOptions {
  /** The server binary: redis-server (default) or valkey-server, on PATH or absolute. */
  binary?: string;
  port?: number;
  /** Serve TLS only (rediss://localhost:port) with this certificate and key (PEM files). */
  tls?: { cert: string; key: string };
}

const READY = /Ready to accept connections/;

export async function startRedisServer(options: RedisServerOptions = {}): Promise<RedisServer> {
  const binary = options.binary ?? "redis-server";
  const path = binary.startsWith("/") ? binary : Bun.which(binary);
  if (!path) {
    throw new LlmrouteError("usage", `${binary} not found: install it (Debian: apt-get install -y redis-server), or pass --redis URL to use a running Redis or Valkey`);
  }
  let port = options.port ?? (await freePort());
  const tls = options.tls;
  let proc = await spawnReady(path, port, tls).catch(async (error) => {
    if (options.port !== undefined) throw error;
    // Another process took the free port between the probe and the bind: try another.
    port = await freePort();
    return spawnReady(path, port, tls);
  });
  const server: RedisServer = {
    url: tls ? `rediss://localhost:${port}` : `redis://127.0.0.1:${port}`,
    port,
    get pid() {
      return proc.pid;
    },
    async stop(signal = "SIGTERM") {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGCONT");
      proc.kill(signal);
      await proc.exited;
    },
    pause: () => proc.kill("SIGSTOP"),
    resume: () => proc.kill("SIGCONT"),
    async restart() {
      await server.stop("SIGKILL");
      proc = await spawnReady(path, port, tls);
    },
  };
  return server;
}

async function spawnReady(path: string, port: number, tls?: RedisServerOptions["tls"]): Promise<Subprocess<"ignore", "pipe", "pipe">> {
  const listen = tls
    ? ["--port", "0", "--tls-port", String(port), "--tls-cert-file", tls.cert, "--tls-key-file", tls.key, "--tls-auth-clients", "no"]
    : ["--port", String(port)];
  const proc = Bun.spawn([path, ...listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "notice"], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const seen: string[] = [];
  const decoder = new TextDecoder();
  const reader = proc.stdout.getReader();
  let ready = false;
  while (!ready) {
    const { done, value } = await reader.read();
    if (done) break;
    const text = decoder.decode(value, { stream: true });
    seen.push(text);
    ready = READY.test(seen.join(""));
  }
  // Keep draining its output so the pipe never fills up and blocks it.
  void (async () => {
    try {
      while (!(await reader.read()).done);
    } catch {
      // it exited
    }
  })();
  void new Response(proc.stderr).text();
  if (!ready) {
    await proc.exited;
    throw new LlmrouteError("upstream", `${path} on port ${port} exited (${proc.exitCode ?? proc.signalCode}) before it was ready:\n${seen.join("").slice(-2000)}`);
  }
  return proc;
}

async function freePort(): Promise<number> {
  const socket = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = socket.port;
  socket.stop(true);
  return port;
}
