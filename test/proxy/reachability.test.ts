/**
 * The TCP reachability check behind routing.connect_timeout, against real sockets: a
 * listening port, a closed one, and one that drops SYNs; concurrent checks share a probe.
 */
import { describe, expect, it } from "bun:test";
import { createReachability, tcpProbe, type Probe } from "../../src/proxy/reachability.ts";
import { blackhole } from "../helpers/blackhole.ts";

// The budget only bounds a probe that gets no answer: ample for a listening or closed port
// on a loaded machine (they answer at once), short for the blackhole (it never answers).
const AMPLE_MS = 10_000;

describe("reachability", () => {
  it("tells a listening port, a closed one and a blackholed one apart, within the budget", async () => {
    const open = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const closedPort = closed.port!;
    await closed.stop(true);
    const hole = await blackhole();
    try {
      expect(await tcpProbe("127.0.0.1", open.port!, AMPLE_MS)).toBe("ok");
      expect(await tcpProbe("127.0.0.1", closedPort, AMPLE_MS)).toBe("refused");
      expect(await tcpProbe("127.0.0.1", hole.port, 200)).toBe("timeout");
    } finally {
      hole.close();
      await open.stop(true);
    }
  });

  it("shares one probe among concurrent checks of a replica, and a success for freshMs; a failure is not kept", async () => {
    const open = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    let probes = 0;
    const counting: Probe = (host, port, budget) => {
      probes++;
      return tcpProbe(host, port, budget);
    };
    let clock = 0;
    const reach = createReachability({ freshMs: 1_000, probe: counting, now: () => clock });
    try {
      const url = `http://127.0.0.1:${open.port}`;
      expect(await Promise.all([reach.check(url, AMPLE_MS), reach.check(`${url}/other`, AMPLE_MS), reach.check(url, AMPLE_MS)])).toEqual(["ok", "ok", "ok"]);
      expect(probes).toBe(1);
      clock = 999;
      await reach.check(url, AMPLE_MS);
      expect(probes).toBe(1);
      clock = 1_000;
      await reach.check(url, AMPLE_MS);
      expect(probes).toBe(2);
      await open.stop(true);
      clock = 5_000;
      expect(await reach.check(url, AMPLE_MS)).toBe("refused");
      expect(await reach.check(url, AMPLE_MS)).toBe("refused");
      expect(probes).toBe(4);
    } finally {
      await open.stop(true);
    }
  });
});
