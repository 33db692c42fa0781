/**
 * GET /v1/models through the router with `models = [...]` set in router.toml: the configured list decides which models a replica serves, and each model the
 * engine lists keeps the engine's card (vLLM's max_model_len, root, owned_by …), also after
 * a reload; a configured model the engine does not list gets a plain card. Real processes.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { routerToml, startRouterProc, startSimProc, until } from "../helpers/fleet.ts";
import { killAll } from "../helpers/proc.ts";

afterAll(killAll);

interface Card {
  id: string;
  [key: string]: unknown;
}

describe("/v1/models with models = [...] in router.toml", () => {
  it("keeps the engine's card for the models it lists, also after a reload", async () => {
    const gpu0 = await startSimProc("gpu0");
    const engineCard = ((await (await fetch(`${gpu0.url}/v1/models`)).json()) as { data: Card[] }).data.find((c) => c.id === "sim-model")!;
    expect(engineCard.max_model_len).toEqual(expect.any(Number));

    const replicas = [{ ...gpu0, extra: `models = ["sim-model", "not-listed"]\n` }];
    const router = await startRouterProc(replicas);
    const models = async () => ((await (await fetch(`${router.url}/v1/models`)).json()) as { data: Card[] }).data;
    const expected = [engineCard, { id: "not-listed", object: "model", owned_by: "llmroute" }];
    expect(await models()).toEqual(expected);

    const reloads = router.lines.filter((l) => l.includes("config reloaded")).length;
    await Bun.write(router.configPath, routerToml(replicas));
    router.proc.kill("SIGHUP");
    await until(() => router.lines.filter((l) => l.includes("config reloaded")).length > reloads, "the reload", 30_000);
    expect(await models()).toEqual(expected);
  }, 30_000);
});
