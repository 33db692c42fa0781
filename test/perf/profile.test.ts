import { describe, expect, it } from "bun:test";
import { summarizeProfile, type CpuProfile } from "../../perf/lib/profile.ts";

const ROOT = "/repo/";
type Node = CpuProfile["nodes"][number];
const node = (id: number, functionName: string, url: string, children: number[] = []): Node => ({ id, callFrame: { functionName, url, lineNumber: 0 }, children });

// (root)
// ├─ forward (proxy.ts) ─ parse [native]            JSON.parse of the request
// │   └─ readBody (proxy.ts) ─ next [native]        body read
// ├─ pull (proxy.ts) ─ finish (proxy.ts) ─ emit (log.ts) ─ write [native]   the log line, inside the relay
// ├─ onRSDefaultControllerStartFulfilled [native]   the relay, no project frame
// ├─ (anonymous) [native]                           nothing known
// └─ chainOf (node_modules/x/index.js)              node_modules is not project code
const profile: CpuProfile = {
  nodes: [
    node(1, "(root)", "", [2, 5, 9, 10, 11]),
    node(2, "forward", "file:///repo/src/proxy/proxy.ts", [3, 4]),
    node(3, "parse", ""),
    node(4, "readBody", "file:///repo/src/proxy/proxy.ts", [12]),
    node(12, "next", ""),
    node(5, "pull", "file:///repo/src/proxy/proxy.ts", [6]),
    node(6, "finish", "file:///repo/src/proxy/proxy.ts", [7]),
    node(7, "emit", "file:///repo/src/log.ts", [8]),
    node(8, "write", ""),
    node(9, "onRSDefaultControllerStartFulfilled", ""),
    node(10, "", ""),
    node(11, "chainOf", "file:///repo/node_modules/x/index.js"),
  ],
  samples: [3, 3, 12, 8, 8, 8, 9, 9, 10, 11, 1],
};

describe("summarizeProfile", () => {
  const s = summarizeProfile(profile, ROOT);

  it("counts samples (the root alone is nothing running), not time deltas", () => {
    expect(s.samples).toBe(10);
  });

  it("sorts samples into categories; the log line wins over the relay it runs inside", () => {
    expect(Object.fromEntries(s.byCategory.map((c) => [c.key, c.samples]))).toEqual({
      "log line (src/log.ts)": 3,
      "JSON.parse of the request": 2,
      "relay: ReadableStream wrap, pull, hand-off to the socket": 2,
      "no project frame: Bun internals, GC, native": 2,
      "body read (readBody)": 1,
    });
    expect(s.byCategory[0]!.share).toBeCloseTo(0.3, 9);
  });

  it("charges a native call to the project function that made it", () => {
    expect(s.byFunction.find((f) => f.key === "src/log.ts emit")!.samples).toBe(3);
    expect(s.byFunction.find((f) => f.key === "src/proxy/proxy.ts forward")!.samples).toBe(2);
    expect(s.byFunction.find((f) => f.key === "(no project frame) chainOf")!.samples).toBe(1);
  });

  it("lists non-project leaves with their project caller", () => {
    expect(s.nativeLeaves.slice(0, 2).map((l) => [l.key, l.samples])).toEqual([
      ["write ← src/log.ts emit", 3],
      ["onRSDefaultControllerStartFulfilled ← (no project frame)", 2],
    ]);
  });

  it("reads plain paths as well as file:// URLs", () => {
    const plain = { ...profile, nodes: profile.nodes.map((n) => ({ ...n, callFrame: { ...n.callFrame, url: n.callFrame.url.replace("file://", "") } })) };
    expect(summarizeProfile(plain, "/repo").byCategory).toEqual(s.byCategory);
  });
});
