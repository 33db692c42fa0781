import { describe, expect, it } from "bun:test";
import type { Outcome } from "../../src/bench/client.ts";
import { parseConfig } from "../../src/config.ts";
import { claimRecord, oracleChoice, routerToml, simHealthIntervalMs, withIndexView, type IndexedRecord, type OracleCandidate, type ReplicaInfo } from "../../src/bench/targets.ts";

const c = (name: string, cachedTokens: number, busy = 0, promptTokens = 10_000): OracleCandidate => ({ name, promptTokens, cachedTokens, busy });

describe("oracleChoice", () => {
  it.each([
    ["an idle fleet: the replica holding the most of the prompt", [c("gpu0", 0), c("gpu1", 9_000)], "gpu1"],
    ["a long cached prefix outweighs a short queue", [c("gpu0", 9_600, 2), c("gpu1", 0, 0)], "gpu0"],
    ["a block of template and salt does not outweigh a queue", [c("gpu0", 16, 1), c("gpu1", 0, 0)], "gpu1"],
    ["equal caches: the less busy", [c("gpu0", 500, 3), c("gpu1", 500, 1)], "gpu1"],
  ] as const)("%s", (_what, candidates, expected) => {
    expect(oracleChoice(candidates, 0.05, 0)).toBe(expected);
  });

  it("complete ties rotate, so an idle fleet shares a cold burst", () => {
    const tied = [c("gpu0", 0), c("gpu1", 0)];
    expect([0, 1, 2, 3].map((k) => oracleChoice(tied, 0.05, k))).toEqual(["gpu0", "gpu1", "gpu0", "gpu1"]);
  });
});

describe("claimRecord: the router's record of a request the client just finished", () => {
  const record = (replica: string, cachedTokens: number, extra: Partial<IndexedRecord> = {}): IndexedRecord => ({
    endpoint: "chat",
    replica,
    route: "pin",
    status: 200,
    stream: true,
    outcome: "ok",
    promptTokens: 1_000,
    cachedTokens,
    completionTokens: 8,
    totalMs: 5,
    failovers: 0,
    ...extra,
  });
  const outcome = (replica: string, cachedTokens: number, extra: Partial<Outcome> = {}): Outcome => ({
    replica,
    route: "pin",
    status: 200,
    ttftMs: 1,
    totalMs: 2,
    text: "",
    promptTokens: 1_000,
    cachedTokens,
    cachedReported: true,
    completionTokens: 8,
    ...extra,
  });

  it("takes the record that matches replica, status and usage, whatever order the records came in", () => {
    const pending = [record("gpu0", 0, { availableTokens: 10 }), record("gpu1", 640, { availableTokens: 700, capturedTokens: 640 }), record("gpu0", 640, { availableTokens: 900 })];
    expect(claimRecord(pending, outcome("gpu1", 640))?.availableTokens).toBe(700);
    expect(claimRecord(pending, outcome("gpu0", 640))?.availableTokens).toBe(900);
    expect(claimRecord(pending, outcome("gpu0", 0))?.availableTokens).toBe(10);
    expect(pending).toEqual([]);
  });

  it("each record is claimed once: records alike are handed out one by one, so per-replica sums stay whole", () => {
    const pending = [record("gpu0", 640, { capturedTokens: 600 }), record("gpu0", 640, { capturedTokens: 640 })];
    const got = [claimRecord(pending, outcome("gpu0", 640)), claimRecord(pending, outcome("gpu0", 640)), claimRecord(pending, outcome("gpu0", 640))];
    expect(got.map((r) => r?.capturedTokens)).toEqual([600, 640, undefined]);
  });

  it("the claimed record's verdict goes with the outcome: the router's judgement of that response", () => {
    const pending = [record("gpu0", 0, { verdict: "miss", availableTokens: 900, capturedTokens: 900 }), record("gpu1", 640, { verdict: "template" })];
    expect(withIndexView(outcome("gpu0", 0), pending)).toMatchObject({ verdict: "miss", availableTokens: 900, capturedTokens: 900 });
    expect(withIndexView(outcome("gpu1", 640), pending).verdict).toBe("template");
    expect(withIndexView(outcome("gpu1", 640), pending).verdict).toBeUndefined();
  });

  it("a failed request or one with no record of its own claims nothing", () => {
    const pending = [record("gpu0", 640)];
    expect(claimRecord(pending, outcome("gpu0", 640, { error: "stream failed" }))).toBeUndefined();
    expect(claimRecord(pending, outcome("gpu1", 640))).toBeUndefined();
    expect(claimRecord(pending, outcome("gpu0", 640, { completionTokens: 9 }))).toBeUndefined();
    expect(pending.length).toBe(1);
  });
});

describe("routerToml: what the bench routers are told of the sims", () => {
  const sims: ReplicaInfo[] = [
    { name: "gpu0", url: "http://127.0.0.1:1", kvTokens: 122_636 },
    { name: "gpu1", url: "http://127.0.0.1:2", kvTokens: 122_636, healthPath: "/api/version", metrics: false },
  ];
  const parsed = (toml: string) => parseConfig(toml, "<bench>", { env: {} });

  it.each([
    ["none", { kind: "none" }, [0, 0]],
    ["true", { kind: "factor", factor: 1 }, [122_636, 122_636]],
    ["6x", { kind: "factor", factor: 6 }, [735_816, 735_816]],
  ] as const)("--kv-tokens %s: each replica's kv_tokens as the router reads it (0 = not configured)", (_flag, kvTokens, expected) => {
    const config = parsed(routerToml(sims, "hybrid", "sim-model", { kvTokens }));
    expect(config.replicas.map((r) => r.kv_tokens)).toEqual([...expected]);
  });

  it("without a setting, kv_tokens is the replicas' real KV (the oracle's single-replica routers, a caller that does not say)", () => {
    expect(parsed(routerToml(sims, "hybrid", "sim-model")).replicas.map((r) => r.kv_tokens)).toEqual([122_636, 122_636]);
  });

  it("an Ollama sim is checked on /api/version and never scraped, as `llmroute sim` prints it; the others on the defaults", () => {
    const config = parsed(routerToml(sims, "affinity", "sim-model"));
    expect(config.routing.policy).toBe("affinity");
    expect(config.replicas.map((r) => [r.health_path, r.metrics])).toEqual([
      [undefined, "/metrics"],
      ["/api/version", false],
    ]);
    expect(config.replicas.every((r) => r.models.length === 1 && r.models[0] === "sim-model")).toBe(true);
  });

  it("health checks (and scrapes) every 10 s of model time on sims, 60 s by default", () => {
    expect(simHealthIntervalMs(0.1)).toBe(1_000);
    expect(simHealthIntervalMs(1)).toBe(10_000);
    expect(simHealthIntervalMs(0.002)).toBe(100);
    expect(parsed(routerToml(sims, "hybrid", "m", { healthIntervalMs: 1_000 })).health.interval_ms).toBe(1_000);
    expect(parsed(routerToml(sims, "hybrid", "m")).health.interval_ms).toBe(60_000);
  });

  it("the router's windows are its defaults in model time: 5 minutes recent and an hour remembered, at time scale 0.1 30 s and 6 minutes", () => {
    const scaled = parsed(routerToml(sims, "hybrid", "m", { timeScale: 0.1 })).routing;
    expect([scaled.capacity_window_ms, scaled.index_ttl_ms]).toEqual([30_000, 360_000]);
    const real = parsed(routerToml(sims, "hybrid", "m")).routing;
    expect([real.capacity_window_ms, real.index_ttl_ms]).toEqual([300_000, 3_600_000]);
    expect(parsed(routerToml(sims, "hybrid", "m", { timeScale: 0.001 })).routing.capacity_window_ms).toBe(1_000);
  });
});
