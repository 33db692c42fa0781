/**
 * `llmroute sim`: one simulated replica, or a fleet with --replicas. Prints one readiness
 * line per replica on stderr (`sim gpu0 listening on http://127.0.0.1:8001`), a router.toml
 * fragment on stdout, and runs until SIGINT/SIGTERM, then stops its servers and returns 0.
 */
import { defineCommand, type ArgsDef } from "citty";
import { listenError, LlmrouteError } from "../errors.ts";
import { TEMPLATES } from "./chat-templates.ts";
import { PROFILES, type SimOptions } from "./options.ts";
import { DEFAULT_ENGINE, ENGINE_PROFILES } from "./profiles/index.ts";
import { routerTomlSnippet, startSim, startSimFleet, type SimServer } from "./server.ts";
import { ui } from "../ui.ts";

/** Numeric flags: CLI name → option key. */
const NUMBER_FLAGS = {
  "kv-tokens": "kvTokens",
  "block-tokens": "blockTokens",
  "prefill-tps": "prefillTps",
  "prefill-chunk-tokens": "prefillChunkTokens",
  "cached-token-cost": "cachedTokenCost",
  "decode-tps": "decodeTps",
  "decode-batch-slowdown": "decodeBatchSlowdown",
  "max-seqs": "maxSeqs",
  "max-model-len": "maxModelLen",
  "chars-per-token": "charsPerToken",
  "default-max-tokens": "defaultMaxTokens",
  "time-scale": "timeScale",
  "fail-next": "failNext",
  "fail-status": "failStatus",
  "stall-ms": "stallMs",
  "stall-next": "stallNext",
  "close-after-chunks": "closeAfterChunks",
  "close-next": "closeNext",
  "startup-delay-ms": "startupDelayMs",
  parallel: "parallel",
  "cache-ram": "cacheRam",
  "cache-ram-bytes-per-token": "cacheRamBytesPerToken",
  "slot-prompt-similarity": "slotPromptSimilarity",
  "batch-size": "batchSize",
  "cache-ram-gbps": "cacheRamGbps",
  "keep-alive": "keepAlive",
} as const satisfies Record<string, keyof SimOptions>;

const HELP: Record<keyof typeof NUMBER_FLAGS, string> = {
  "kv-tokens": "KV pool size in tokens (3090: 122636; llamacpp, ollama: llama-server -c, all slots together)",
  "block-tokens": "Tokens per KV block; only full blocks are cached (16; hybrid attention/Mamba models use 400-1568)",
  "prefill-tps": "Prefill tokens/s of the card (3090: 4000)",
  "prefill-chunk-tokens":
    "With --prefill-order arrival: prompt tokens one engine step computes (vLLM --max-num-batched-tokens, 2048; SGLang --chunked-prefill-size, 4096); a decoding sequence waits for one such chunk per token while prefills run (vllm), a waiting request is looked up once the prefills ahead are down to one (sglang)",
  "cached-token-cost": "Cost of a cached prompt token relative to an uncached one (0.05)",
  "decode-tps": "Decode tokens/s of one sequence alone (3090: 40)",
  "decode-batch-slowdown": "Decode slowdown per extra running sequence (0.03)",
  "max-seqs": "Most sequences running at once (3090: 64)",
  "max-model-len": "Longest prompt + completion (default: the KV pool)",
  "chars-per-token": "Characters per token of the stand-in tokenizer (4)",
  "default-max-tokens": "Tokens generated when a request sets no max_tokens",
  "time-scale": "Multiplies every duration (0.01 = 100x faster than the modelled card)",
  "fail-next": "Fail the next N generation requests with --fail-status",
  "fail-status": "Status for --fail-next (503)",
  "stall-ms": "Real ms to wait before the first byte of each generation response",
  "stall-next": "Requests --stall-ms applies to (-1 = all)",
  "close-after-chunks": "Cut the next streaming response after K SSE events (-1 = off)",
  "close-next": "Streaming responses --close-after-chunks applies to (1; -1 = all)",
  "startup-delay-ms": "Real ms of 503 'loading' after start",
  parallel: "llamacpp, ollama: slots (llama-server --parallel; llamacpp -1 = auto: 4 slots sharing a unified KV; ollama 1, OLLAMA_NUM_PARALLEL)",
  "cache-ram": "llamacpp, ollama: host-RAM prompt cache in MiB (8192; -1 = no limit, 0 = off)",
  "cache-ram-bytes-per-token": "llamacpp, ollama: bytes a token's state takes in that cache (57344, Qwen2.5-7B f16)",
  "slot-prompt-similarity": "llamacpp, ollama: prompt similarity that picks a slot over the least recently used (0.10)",
  "batch-size": "llamacpp, ollama: prompt tokens per decode step, across slots (llamacpp 2048, ollama 512); new requests join between steps",
  "cache-ram-gbps": "llamacpp, ollama: GB/s of a RAM prompt-cache save or restore (10)",
  "keep-alive": "ollama: seconds its model stays loaded after the last request (OLLAMA_KEEP_ALIVE, 300; -1 = for ever); unloaded, its KV is gone",
};

const args = {
  port: { type: "string", description: "Port to listen on (0 = ephemeral)", default: "8001" },
  host: { type: "string", description: "Address to bind", default: "127.0.0.1" },
  name: { type: "string", description: "Replica name (single replica; a fleet is gpu0, gpu1, …)" },
  replicas: { type: "string", description: "Start a fleet of N replicas in this process", default: "1" },
  "base-port": { type: "string", description: "First port of a fleet (replica i on base-port + i; 0 = ephemeral)" },
  model: { type: "string", description: "Served model id", default: "sim-model" },
  profile: { type: "enum", options: Object.keys(PROFILES), description: "Calibrated profile", default: "3090" },
  engine: {
    type: "enum",
    options: [...ENGINE_PROFILES],
    description:
      "Engine to imitate: usage fields, stream chunks, metrics, capacity, restart signals and KV model (vllm = no --enable-prompt-tokens-details; vllm-details; sglang = --enable-cache-report --enable-metrics; llamacpp = --metrics --slots; ollama). llamacpp and ollama keep KV in llama-server's slots, the others in one shared block pool",
    default: DEFAULT_ENGINE,
  },
  template: {
    type: "enum",
    options: [...TEMPLATES],
    description:
      "Chat template: chatml, or one under which a continuation is not a prefix of the previous turn (mistral3-tools: tools before the last user message; deepseek-r1: earlier reasoning cut; qwen3-reasoning: reasoning only after the last query)",
    default: "chatml",
  },
  "prefill-order": {
    type: "enum",
    options: ["arrival", "shared"],
    description:
      "How prefills at once use the card: arrival = oldest first at the full rate (vllm, sglang: chunked prefill), shared = an equal share each (llamacpp, ollama slots). Default: the engine's",
  },
  "decode-while-prefilling": {
    type: "enum",
    options: ["chunk", "none"],
    description:
      "With --prefill-order arrival, what decoding sequences do while a prefill runs: chunk = one token per step with a prefill chunk (vllm), none = wait until no prefill is left (sglang without --enable-mixed-chunk). Default: the engine's",
  },
  "prefix-lookup": {
    type: "enum",
    options: ["scheduled", "batch", "arrival"],
    description:
      "With --prefill-order arrival, when a waiting request looks its prefix up: scheduled = once earlier prefills end, finding theirs (vllm), batch = once they have one --prefill-chunk-tokens chunk left, missing that chunk (sglang: its overlap scheduler forms the next batch before the last one is cached), arrival = as soon as it fits. Default: the engine's",
  },
  "kv-unified": { type: "boolean", description: "llamacpp, ollama: one KV of --kv-tokens shared by all slots (default with --parallel -1)", default: false },
  "cache-idle-slots": { type: "boolean", description: "llamacpp, ollama: save idle slots to the RAM cache when a task starts", negativeDescription: "llamacpp, ollama: do not save idle slots", default: true },
  "cache-prompt": { type: "boolean", description: "llamacpp, ollama: reuse cached prompts", negativeDescription: "llamacpp, ollama: reuse nothing (llama-server --no-cache-prompt; same as --no-prefix-cache)", default: true },
  ...(Object.fromEntries(
    Object.entries(HELP).map(([flag, description]) => [flag, { type: "string", description }]),
  ) as Record<keyof typeof NUMBER_FLAGS, { type: "string"; description: string }>),
  "prefix-cache": { type: "boolean", description: "Reuse cached prefixes", negativeDescription: "Never reuse a prefix: every cached_tokens is 0 (a card with caching off)", default: true },
  verbose: { type: "boolean", description: "Log one line per request on stderr", default: false },
} satisfies ArgsDef;

type ParsedArgs = Record<string, string | boolean | undefined>;

/** The options a command line asks for (pure; throws LlmrouteError "usage" on a bad number). */
export function simOptionsFromArgs(parsed: ParsedArgs): {
  options: Partial<SimOptions>;
  replicas: number;
  port: number;
  basePort: number | undefined;
  hostname: string;
} {
  const number = (flag: string, value: unknown): number => {
    const n = typeof value === "string" && value.trim() !== "" ? Number(value) : Number.NaN;
    if (!Number.isFinite(n)) throw new LlmrouteError("usage", `sim: --${flag} ${JSON.stringify(value)}: not a number`);
    return n;
  };
  const options: Partial<SimOptions> = {
    model: String(parsed.model ?? "sim-model"),
    profile: String(parsed.profile ?? "3090") as SimOptions["profile"],
    engine: String(parsed.engine ?? DEFAULT_ENGINE) as SimOptions["engine"],
    template: String(parsed.template ?? "chatml") as SimOptions["template"],
    prefixCache: parsed["prefix-cache"] !== false && parsed["cache-prompt"] !== false,
    kvUnified: parsed["kv-unified"] === true,
    cacheIdleSlots: parsed["cache-idle-slots"] !== false,
    verbose: parsed.verbose === true,
    ...(parsed["prefill-order"] === undefined ? {} : { prefillOrder: String(parsed["prefill-order"]) as SimOptions["prefillOrder"] }),
    ...(parsed["decode-while-prefilling"] === undefined
      ? {}
      : { decodeWhilePrefilling: String(parsed["decode-while-prefilling"]) as SimOptions["decodeWhilePrefilling"] }),
    ...(parsed["prefix-lookup"] === undefined ? {} : { prefixLookup: String(parsed["prefix-lookup"]) as SimOptions["prefixLookup"] }),
  };
  for (const [flag, key] of Object.entries(NUMBER_FLAGS)) {
    const value = parsed[flag];
    if (value !== undefined) (options as Record<string, unknown>)[key] = number(flag, value);
  }
  const replicas = number("replicas", parsed.replicas ?? "1");
  if (typeof parsed.name === "string") {
    if (replicas > 1) throw new LlmrouteError("usage", "sim: --name names a single replica; a fleet is named gpu0, gpu1, …");
    options.name = parsed.name;
  }
  const port = number("port", parsed.port ?? "8001");
  const basePort = parsed["base-port"] === undefined ? undefined : number("base-port", parsed["base-port"]);
  for (const [flag, p] of [["port", port], ["base-port", basePort]] as const) {
    if (p !== undefined && (!Number.isInteger(p) || p < 0 || p > 65535)) throw new LlmrouteError("usage", `sim: --${flag} ${p}: not a port`);
  }
  return { options, replicas, port, basePort, hostname: String(parsed.host ?? "127.0.0.1") };
}

export default defineCommand({
  meta: { name: "sim", description: "Run simulated OpenAI-compatible engine replicas (vLLM, SGLang, llama.cpp or Ollama) with a prefix cache" },
  args,
  async run({ args: parsed }) {
    const { options, replicas, port, basePort, hostname } = simOptionsFromArgs(parsed as ParsedArgs);
    let servers: SimServer[];
    try {
      servers =
        replicas === 1 && basePort === undefined
          ? [await startSim({ ...options, port, hostname })]
          : await startSimFleet({ ...options, replicas, basePort: basePort ?? port, hostname });
    } catch (error) {
      // startSim names the replica and its address; say it the way `serve` does, exit 2.
      const where = /^(sim \S+): cannot listen on (\S+):/.exec(error instanceof Error ? error.message : "");
      const hint = `choose another with ${basePort === undefined && replicas === 1 ? "--port" : "--base-port"} (0 picks a free one)`;
      throw (where && listenError((error as Error).cause, `${where[2]} (${where[1]})`, hint)) || error;
    }
    for (const s of servers) ui.ready(`sim ${s.name} listening on ${s.url}`);
    process.stdout.write(`# router.toml\n${routerTomlSnippet(servers)}\n`);
    await untilSignal();
    await Promise.all(servers.map((s) => s.stop()));
    return 0;
  },
});

function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals) => {
      process.off("SIGINT", on);
      process.off("SIGTERM", on);
      resolve(signal);
    };
    process.on("SIGINT", on);
    process.on("SIGTERM", on);
  });
}
