/**
 * A replica's KV wall as its own seam (src/fleet/kv-wall.ts KvWall.admit / release): prompt
 * tokens in flight are estimates (characters ÷ a learnt ratio), so their sum is a float that
 * add-and-subtract cycles leave slightly off; what counts for "nothing in flight" is the count
 * of requests, never that float. The waits themselves are tested at the edge
 * (test/proxy/kv-wall.test.ts).
 */
import { describe, expect, it } from "bun:test";
import type { ReplicaConfig } from "../../src/config.ts";
import { Replica } from "../../src/fleet/replica.ts";

const config: ReplicaConfig = { name: "gpu0", url: "http://127.0.0.1:1", kv_tokens: 0, models: ["m"] };
const never = new AbortController().signal;

describe("a card whose KV wall stands, after requests came and went", () => {
  // 0.1 + 0.2 − 0.1 − 0.2 is 2.8e-17 in floating point, not 0.
  const cycled = () => {
    const r = new Replica(config);
    const now = () => 1_000;
    // The engine turned a request of 100 tokens away as full: the wall is 100 tokens for a minute.
    expect(r.wall.admit(100, never, now)).toBe(true);
    expect(r.wall.turnedAwayFull(100, 1_000, 60_000)).toBe(100);
    r.wall.release(100);
    expect(r.wall.admit(0.1, never, now)).toBe(true);
    expect(r.wall.admit(0.2, never, now)).toBe(true);
    r.wall.release(0.1);
    r.wall.release(0.2);
    return { r, now };
  };

  it("a request alone is admitted at once, however close to the wall it comes", () => {
    const { r, now } = cycled();
    expect(r.wall.admit(95, never, now)).toBe(true);
  });

  it("reads as idle (0 tokens in flight) to the policy's wall rule", () => {
    const { r } = cycled();
    expect(r.view(1_000).inflightTokens).toBe(0);
  });
});

describe("what a unified KV's overflow purged unsaved (RunningCommits.overflowCleared)", () => {
  it("the requests that ended there, their prompts in their slots, since the last one was sent (no task started since to save those slots)", () => {
    const r = new Replica(config);
    r.running.sent(1);
    r.running.sent(2);
    r.running.ended(1, true);
    expect([...r.running.overflowCleared()]).toEqual([1]);
    r.running.sent(3); // its start saved 1's idle slot to the RAM cache
    expect([...r.running.overflowCleared()]).toEqual([]);
    r.running.ended(2, false); // failed: its slot holds nothing of it
    r.running.ended(3, true);
    expect([...r.running.overflowCleared()]).toEqual([3]);
  });
});
