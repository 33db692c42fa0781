/**
 * `llmroute check --probe`, as an operator runs it before `serve`: per replica, the engine it
 * found, where its health will be checked, whether responses carry cached tokens, and what is
 * missing with the flag that adds it. Sims of three engine profiles on loopback ports; the CLI
 * in its own process.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { startSimInProcess } from "../helpers/fleet.ts";
import { killAll, runCli } from "../helpers/proc.ts";
import { tempDir } from "../helpers/tmp.ts";

afterAll(killAll);

/** One replica's block of the report: its name line and the indented lines under it. */
function block(stdout: string, name: string): string[] {
  const lines = stdout.split("\n");
  const start = lines.findIndex((l) => l.startsWith(`${name}  `));
  expect(start).toBeGreaterThanOrEqual(0);
  const rest = lines.slice(start + 1);
  const end = rest.findIndex((l) => !l.startsWith("  "));
  return [lines[start]!, ...(end < 0 ? rest : rest.slice(0, end))];
}

describe("llmroute check --probe", () => {
  it("vLLM with and without prompt-token details, Ollama with nothing set, a health_path that 404s: each says what it is and what it lacks", async () => {
    const [details, plain, ollama, wrong] = await Promise.all([
      startSimInProcess("details", { engine: "vllm-details" }),
      startSimInProcess("plain", { engine: "vllm" }),
      startSimInProcess("ollama", { engine: "ollama" }),
      startSimInProcess("wrong", { engine: "vllm-details" }),
    ]);
    const dir = await tempDir("llmroute-check-probe-");
    const replicas = [details, plain, ollama].map((s) => `[[replica]]\nname = "${s.name}"\nurl = "${s.url}"\n`).join("\n");
    await Bun.write(`${dir}/router.toml`, `${replicas}\n[[replica]]\nname = "wrong"\nurl = "${wrong.url}"\nhealth_path = "/healthz"\n`);
    const { code, stdout, stderr } = await runCli(["check", "--probe", "--config", `${dir}/router.toml`]);
    expect({ code, stderr: stderr.includes("asking 4 replica(s)") }).toEqual({ code: 0, stderr: true });

    const d = block(stdout, "details");
    expect(d).toContainEqual(expect.stringMatching(/^ {2}engine {5}vLLM .*\(from \/metrics \(vllm:\*\)\)$/));
    expect(d).toContain("  health     /health: HTTP 200");
    expect(d).toContainEqual(expect.stringMatching(/^ {2}cached {5}usage\.prompt_tokens_details\.cached_tokens = \d+ on a repeated \d+-token prompt$/));
    expect(d.filter((l) => l.startsWith("  missing"))).toEqual([]);

    const p = block(stdout, "plain");
    expect(p).toContainEqual(expect.stringMatching(/^ {2}cached {5}no cached tokens on a repeated prompt/));
    expect(p.join("\n")).toContain("--enable-prompt-tokens-details");

    const o = block(stdout, "ollama");
    expect(o).toContainEqual(expect.stringMatching(/^ {2}engine {5}Ollama \d+\.\d+\.\d+ \(from /));
    expect(o).toContain("  health     /api/version: HTTP 200 (/health answered 404: Ollama has none, so the router checks /api/version)");
    // Its context is listed once the probe's request has loaded the model (tiny: 4,096).
    expect(o).toContain("  KV         4,096 tokens (/api/ps context_length), blocks of 1: one request's context; a longer chat is cut (raise OLLAMA_CONTEXT_LENGTH, or the model's num_ctx)");
    expect(o.filter((l) => l.startsWith("  missing"))).toEqual([
      "  missing    Ollama reports no cached tokens",
      "  missing    KV capacity unknown: /api/ps context_length gives one request's context (4,096), no bound on the card's KV",
    ]);

    const w = block(stdout, "wrong");
    expect(w).toContain("  health     /healthz: HTTP 404: the router keeps this replica down until it answers 200 (health_path sets the path)");
  });
});
