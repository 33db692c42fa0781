/**
 * What a drain timeout and a crash leave behind: the drain timeout ends what is left
 * with the API's error; routing.state_file is saved periodically, survives a SIGKILL, and
 * a bad file means a cold start with a warning. A router process where a signal or an
 * exit code is the subject, in this process where only the file is; sims in this process.
 * The tests run concurrently (each starts its own fleet, stopped once at the end).
 */
import { afterAll, describe, expect, it } from "bun:test";
import OpenAI from "openai";
import { encodeState } from "../../src/ops/state-file.ts";
import { prefixChain } from "../../src/route/chain.ts";
import { createHasher } from "../../src/route/hash.ts";
import { PrefixIndex } from "../../src/route/prefix.ts";
import { logRecords, startRouterInProcess, startRouterProc, startSimInProcess, until } from "../helpers/fleet.ts";
import { conversation } from "../helpers/conversation.ts";
import { killAll } from "../helpers/proc.ts";
import type { StatusDocument } from "../../src/ops/telemetry.ts";
import { tempDir } from "../helpers/tmp.ts";

afterAll(killAll);

const status = async (url: string) => (await (await fetch(`${url}/status`)).json()) as StatusDocument;

/** Index entries in a state file (0 while there is none): the snapshot's count, after the JSON header. */
async function savedEntries(file: string): Promise<number> {
  const f = Bun.file(file);
  if (!(await f.exists())) return 0;
  const view = new DataView(await f.arrayBuffer());
  return view.byteLength < 12 ? 0 : view.getUint32(12 + view.getUint32(8, true) + 8, true);
}

describe.concurrent("server.drain_timeout", () => {
  it("SIGTERM with a short drain_timeout: what is left ends with the API's error (503 before the first byte, an error event in a stream), logged as drain_timeout", async () => {
    const gpu0 = await startSimInProcess("gpu0", { decodeTps: 20 });
    const router = await startRouterProc([gpu0], { toml: `[server]\ndrain_timeout = "1s"\n` });
    const client = router.client();
    const stream = await client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "long" }], max_tokens: 500, stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    await gpu0.faults({ stall_ms: 600_000, stall_next: 1 });
    const waiting = client.chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "waiting" }], max_tokens: 1 }).catch((e) => e);
    await until(async () => (await gpu0.state()).requests_total === 2, "the second request at the engine");

    router.proc.kill("SIGTERM");
    const streamError = await (async () => {
      for (let r = await iterator.next(); !r.done; r = await iterator.next());
    })().catch((e) => e);
    expect(streamError).toBeInstanceOf(OpenAI.APIError);
    expect(streamError.message).toContain("server.drain_timeout passed");
    const waited = await waiting;
    expect(waited.status).toBe(503);
    expect(waited.error.message).toContain("shutting down");
    expect(await router.exited).toBe(0);
    const outcomes = logRecords(router, "request").map((r) => [r.status, r.outcome]);
    expect(outcomes.sort()).toEqual([[200, "drain_timeout"], [503, "drain_timeout"]]);
    await until(async () => (await gpu0.state()).running === 0, "the engine to stop both");
  });
});

describe.concurrent("routing.state_file survives a crash and bad input", () => {
  const stateToml = (path: string, extra = "") => `[routing]\nstate_file = "${path}"\n${extra}`;
  
  it("saved every state_interval (temp file, fsync, rename): a SIGKILLed router's successor keeps the pins", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const file = `${await tempDir("llmroute-state-")}/index.json`;
    const toml = stateToml(file, `state_interval = "1s"\n`);
    const first = await startRouterProc([gpu0, gpu1], { toml });
    await first.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    const convo = conversation("survive a crash");
    expect((await convo.turn(first.client())).replica).toBe("gpu1");
    // the periodic save has both requests in it
    await until(async () => (await savedEntries(file)) >= 2, "a periodic save");
    await first.kill("SIGKILL");
    const dir = await import("node:fs/promises").then((fs) => fs.readdir(file.replace(/\/index\.json$/, "")));
    expect(dir).toEqual(["index.json"]);

    const second = await startRouterInProcess([gpu0, gpu1], { toml });
    expect(logRecords(second, "restored routing state")[0]!.entries).toBeGreaterThan(0);
    expect(await convo.turn(second.client())).toMatchObject({ replica: "gpu1", route: "pin" });
  });

  it("a replica whose URL changed while the router was down is another engine: its pins and Responses ids are dropped, and the log counts them", async () => {
    const [gpu0, gpu1, moved] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1"), startSimInProcess("gpu0-elsewhere")]);
    const file = `${await tempDir("llmroute-state-")}/index.json`;
    const first = await startRouterInProcess([gpu0, gpu1], { toml: stateToml(file) });
    const client = first.client();
    const { response } = await client.responses.create({ model: "sim-model", input: "remember me" }).withResponse();
    expect(response.headers.get("x-llmroute-replica")).toBe("gpu0"); // the counter's first pick
    for (const label of ["one", "two", "three"]) await conversation(label).turn(client);
    const before = Object.fromEntries((await status(first.url)).replicas.map((r) => [r.name, r.index_entries]));
    expect(before.gpu0).toBeGreaterThan(0);
    expect(before.gpu1).toBeGreaterThan(0);
    await first.stop(); // saves on stop

    const second = await startRouterInProcess([{ name: "gpu0", url: moved.url }, gpu1], { toml: stateToml(file) });
    expect(logRecords(second, "restored routing state")[0]).toMatchObject({
      entries: before.gpu1,
      responses: 0,
      dropped_entries: before.gpu0,
      dropped_responses: 1,
      url_changed: "gpu0",
    });
    const after = Object.fromEntries((await status(second.url)).replicas.map((r) => [r.name, r.index_entries]));
    expect(after).toEqual({ gpu0: 0, gpu1: before.gpu1! });
  });

  const withFormat = (n: number) => {
    const [head, json, index] = encodeState([], new Uint8Array(0));
    new DataView(head!.buffer).setUint32(4, n, true);
    return Buffer.concat([head!, json!, index!]);
  };
  it.each([
    ["not a state file", "{not json", /^not an llmroute state file/],
    ["another format", withFormat(1), /^state file format 1, this router reads 2/],
    ["a truncated header", Buffer.concat(encodeState([], new Uint8Array(0))).subarray(0, 20), /^truncated header/],
    ["another identity version", Buffer.concat(encodeState([], new Uint8Array(0), { identity: 1 })), /prefix identity v1, this router computes v2/],
    ["another routing.chunk_chars", Buffer.concat(encodeState([], new Uint8Array(0), { chunk_chars: 512 })), /chunk_chars = 512, this router cuts 1024/],
    ["JSON null", "null", /^not an llmroute state file/],
    ["replica URLs that are not a map", Buffer.concat(encodeState([], new Uint8Array(0), { replicas: ["gpu0"] as unknown as Record<string, string> })), /replica URLs are not a name → URL map/],
  ])("%s: a warning and a cold start, never a refusal to start", async (_name, content, reason) => {
    const gpu0 = await startSimInProcess("gpu0");
    const file = `${await tempDir("llmroute-state-")}/index.json`;
    await Bun.write(file, content);
    const router = await startRouterInProcess([gpu0], { toml: stateToml(file) });
    const warned = logRecords(router, "routing state not restored; starting cold");
    expect(warned).toHaveLength(1);
    expect(warned[0]!.level).toBe("warn");
    expect(warned[0]!.reason).toMatch(reason);
    expect((await router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 })).choices).toHaveLength(1);
  });

  it("a directory where the file should be: cold start with a warning, and the save at stop fails with an error line, exit 0", async () => {
    const gpu0 = await startSimInProcess("gpu0");
    const file = await tempDir("llmroute-state-");
    const router = await startRouterProc([gpu0], { toml: stateToml(file) });
    expect(logRecords(router, "routing state not restored; starting cold")[0]!.reason).toMatch(/^cannot read it/);
    await router.client().chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "x" }], max_tokens: 1 });
    router.proc.kill("SIGTERM");
    expect(await router.exited).toBe(0);
    expect(logRecords(router, "could not save routing state")[0]).toMatchObject({ level: "error", file });
  });

  it("every record is checked: malformed ones are skipped and counted, good ones restored", async () => {
    const [gpu0, gpu1] = await Promise.all([startSimInProcess("gpu0"), startSimInProcess("gpu1")]);
    const file = `${await tempDir("llmroute-state-")}/index.json`;
    // An index of three one-link prompts on gpu0 and one on a replica that is gone; the
    // second record's last-use time is corrupted (NaN).
    const index = new PrefixIndex({ maxEntries: 100, ttlMs: 3_600_000, windowMs: 300_000 });
    const one = (text: string) => prefixChain({ tenant: "", model: "sim-model", segments: [["user\u001e", text]] }, createHasher(), 1024);
    for (const [i, text] of ["a", "b", "c"].entries()) index.record(one(text), "gpu0", 1000 + i);
    index.record(one("d"), "gpu9", 2000);
    const snapshot = index.snapshot();
    const record = 36; // bytes per entry in an index snapshot (version 2)
    const records = snapshot.length - 4 * record;
    new DataView(snapshot.buffer).setFloat64(records + record + 20, Number.NaN, true);
    const responses = [["resp_kept", "gpu1"], null, ["resp_bad", 5], ["", "gpu0"], ["resp_gone", "gpu9"], "resp_x"] as unknown as [string, string][];
    // No replica URLs in the header, as the previous build wrote it: kept by name.
    await Bun.write(file, Buffer.concat(encodeState(responses, snapshot)));
    const router = await startRouterInProcess([gpu0, gpu1], { toml: stateToml(file) });
    expect(logRecords(router, "restored routing state")[0]).toMatchObject({ entries: 2, skipped_entries: 2, responses: 1, skipped_responses: 4 });
    // the restored id still routes to its owner
    const res = await fetch(`${router.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-model", input: "and then?", previous_response_id: "resp_kept" }),
    });
    expect([res.headers.get("x-llmroute-replica"), res.headers.get("x-llmroute-route")]).toEqual(["gpu1", "sticky"]);
  });
});
