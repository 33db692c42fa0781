/**
 * Real llama.cpp replicas for system tests: llama-server processes on loopback ports,
 * started from the engine `npm run engine:llamacpp` made (or the files LLMROUTE_LLAMA_SERVER
 * and LLMROUTE_LLAMA_MODEL name), each ready only when its /health answers 200.
 *
 * A missing engine fails the test with what to run; it never skips, so a green run always
 * means the tests ran against the real engine. Replicas are Procs of test/helpers/proc.ts:
 * `killAll()` stops them with everything else a file started, and none outlives the run.
 */
import { BUILD_COMMAND, ENV_MODEL, ENV_SERVER, LLAMACPP_SHORT_COMMIT, locateLlamacppEngine, type EnginePart } from "../../scripts/_llamacpp-engine.ts";
import { spawnProcess, type Proc } from "../helpers/proc.ts";

/**
 * What the project's measurements used (see README, "Checked against a real engine"): one
 * thread each so two replicas share two cores, 2 slots of 32,768 tokens, the counters
 * and slot view a router reads, and one model name, `tiny`.
 */
export const DEFAULT_LLAMA_FLAGS: readonly string[] = ["-t", "1", "-c", "65536", "--parallel", "2", "--metrics", "--slots", "--no-ui", "-a", "tiny"];

/**
 * Sent with every generation request a test makes of llama-server (chat and completions:
 * both answers go through the parser): answer in lowercase words. The tiny model's random
 * weights now and then pick a token holding part of a UTF-8 character and then one that
 * does not finish it; llama.cpp's output parser
 * (common/chat.cpp, common_chat_peg_parse) fails on that text and the server answers
 * 500 "The model produced output that does not match the expected peg-native format"
 * (its log shows the unparsed output starting F0 AC 9E, three bytes of a four-byte
 * character). Measured on 80fb11a, 150 two-token chats of the restart test's shape:
 * 4 such 500s without it, 0 of 300 with it; one-token answers (the probe's, the engine
 * tests') never trip it, 0 of 300. `grammar` is llama-server's own request field
 * (tools/server/server-common.cpp oaicompat_chat_params_parse; server-schema.cpp for every
 * endpoint): it changes what is sampled,
 * not the prompt, so nothing a test reads of the cache moves.
 */
export const WORDS_ONLY = { grammar: "root ::= [a-z ]+" } as const;

/** Loading the 54 MB model takes ~2 s on a quiet machine; a loaded 2-core one needs far more. */
const READY_TIMEOUT_MS = 120_000;
/** SIGTERM lets llama-server finish its clean-up; one that does not exit by then is killed. */
const STOP_GRACE_MS = 15_000;

export interface LlamaEngine {
  server: string;
  model: string;
}

/**
 * The llama-server binary and model the tests run: LLMROUTE_LLAMA_SERVER /
 * LLMROUTE_LLAMA_MODEL, else the engine cache. Throws a message that says what to run.
 */
export function requireLlamaEngine(env: Record<string, string | undefined> = process.env): LlamaEngine {
  const location = locateLlamacppEngine(env);
  const problems = [location.server, location.model].filter((part) => !part.exists).map(missing);
  if (problems.length > 0) {
    throw new Error(
      `${problems.join("; ")}. This system test runs against llama.cpp's llama-server (commit ${LLAMACPP_SHORT_COMMIT}). ` +
        `Run \`${BUILD_COMMAND}\` (it builds from npm, ~17 minutes on 2 cores; \`${BUILD_COMMAND} -- --seed-from DIR\` copies a prebuilt pair), ` +
        `or set ${ENV_SERVER} and ${ENV_MODEL} to existing files, then run \`npm run test:system\` again.`,
    );
  }
  return { server: location.server.path, model: location.model.path };
}

function missing(part: EnginePart): string {
  return part.from === "env" ? `${part.variable}=${part.path}: no such file` : `${part.path} does not exist`;
}

export interface LlamaReplicaOptions {
  /** Names the replica in errors and verbose output (default `llama<N>`). */
  name?: string;
  /** Replaces DEFAULT_LLAMA_FLAGS. Never --host or --port: the launcher sets them. */
  flags?: readonly string[];
  /** Added after the flags, e.g. ["--cache-ram", "0"] or ["--no-cache-prompt"]. */
  extraFlags?: readonly string[];
  /** A fixed port; default 0, the engine binds a free one and logs it. */
  port?: number;
  readyTimeoutMs?: number;
  env?: Record<string, string>;
}

export interface LlamaReplica {
  name: string;
  /** http://127.0.0.1:PORT, the same across restarts. */
  url: string;
  port: number;
  /** The running process (a new one after restart()). */
  proc: Proc;
  /** Every line the current process printed (llama-server logs on stderr). */
  readonly lines: string[];
  /** The command line, for messages. */
  command: string[];
  /** Stop the process: `signal` (default SIGTERM), then SIGKILL if it has not exited within the grace. Resolves with its exit code. */
  stop(signal?: NodeJS.Signals): Promise<number>;
  /** Stop (SIGTERM, or `signal`) and start again on the same port with the same flags; resolves once /health is 200. */
  restart(signal?: NodeJS.Signals): Promise<void>;
}

let started = 0;

/** One llama-server, ready to serve (its /health answered 200). */
export async function startLlamaReplica(options: LlamaReplicaOptions = {}): Promise<LlamaReplica> {
  const engine = requireLlamaEngine();
  const name = options.name ?? `llama${started++}`;
  const flags = [...(options.flags ?? DEFAULT_LLAMA_FLAGS), ...(options.extraFlags ?? [])];
  if (flags.includes("--port") || flags.includes("--host")) throw new Error(`startLlamaReplica(${name}): --host/--port are the launcher's; pass options.port`);
  const timeoutMs = options.readyTimeoutMs ?? READY_TIMEOUT_MS;

  const launch = async (port: number) => {
    const command = [engine.server, "-m", engine.model, "--host", "127.0.0.1", "--port", String(port), ...flags];
    const proc = spawnProcess(command, { env: options.env, label: `llama-server ${name} (${command.join(" ")})`, tag: name });
    // Logged once the model is loaded and the socket bound (tools/server/server.cpp, main:
    // "listening on"), with the port the engine chose when given 0.
    const [, url, boundPort] = await proc.waitFor(/listening on (http:\/\/127\.0\.0\.1:(\d+))/, timeoutMs);
    await waitHealthy(url!, proc, name, timeoutMs);
    return { proc, command, url: url!, port: Number(boundPort) };
  };

  let current = await launch(options.port ?? 0);
  const replica: LlamaReplica = {
    name,
    url: current.url,
    port: current.port,
    proc: current.proc,
    command: current.command,
    get lines() {
      return replica.proc.lines;
    },
    async stop(signal = "SIGTERM") {
      return stopProc(replica.proc, signal);
    },
    async restart(signal = "SIGTERM") {
      await stopProc(replica.proc, signal);
      current = await launch(replica.port);
      replica.proc = current.proc;
      replica.command = current.command;
    },
  };
  return replica;
}

/** `n` replicas started side by side, named `${prefix}0…`; all ready, or an error naming the one that was not. */
export async function startLlamaReplicas(n: number, options: Omit<LlamaReplicaOptions, "name" | "port"> & { prefix?: string } = {}): Promise<LlamaReplica[]> {
  const { prefix = "llama", ...rest } = options;
  return Promise.all(Array.from({ length: n }, (_, i) => startLlamaReplica({ ...rest, name: `${prefix}${i}` })));
}

/** Poll /health until 200: llama-server answers 503 "Loading model" until then (tools/server/server-http.cpp, middleware_server_state). */
async function waitHealthy(url: string, proc: Proc, name: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: number | null = null;
  void proc.exited.then((code) => (exited = code));
  let last = "no answer";
  for (;;) {
    if (exited !== null) throw new Error(`llama-server ${name} exited with ${exited} before /health answered 200; output:\n${proc.lines.join("\n")}`);
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5_000) });
      last = `HTTP ${res.status} ${await res.text()}`;
      if (res.status === 200) return;
    } catch (error) {
      last = String(error);
    }
    if (Date.now() > deadline) throw new Error(`llama-server ${name}: ${url}/health did not answer 200 within ${timeoutMs} ms (last: ${last}); output:\n${proc.lines.join("\n")}`);
    await Bun.sleep(50);
  }
}

async function stopProc(proc: Proc, signal: NodeJS.Signals): Promise<number> {
  const escalate = setTimeout(() => proc.proc.kill("SIGKILL"), STOP_GRACE_MS);
  try {
    return await proc.kill(signal);
  } finally {
    clearTimeout(escalate);
  }
}
