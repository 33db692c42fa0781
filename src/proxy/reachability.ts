/**
 * routing.connect_timeout for a fetch that has none. Bun's fetch cannot time out a TCP
 * connect on its own (its `timeout` option is an idle timer that does not run while
 * connecting: a fetch to a port that drops SYNs, with `timeout: 2000`, was still pending
 * after 20 s), and a request sent on a pooled connection to a host that vanished waits
 * for TCP's retransmission limit. So a request whose response headers are late has the
 * replica's port probed with a fresh TCP connect: if the port accepts, the replica is
 * reachable and only the first-byte deadline applies; if the probe does not connect by the
 * connect deadline, the request is abandoned and fails over. Probes are shared: one per
 * replica at a time, and a success vouches for `freshMs`.
 */
import { connect } from "node:net";

export type Reach = "ok" | "refused" | "timeout" | "error";

export type Probe = (host: string, port: number, budgetMs: number) => Promise<Reach>;

export interface Reachability {
  /** Can a TCP connection to `url`'s host and port be opened within `budgetMs`? */
  check(url: string, budgetMs: number): Promise<Reach>;
}

export function createReachability(options: { freshMs: number; probe?: Probe; now?: () => number }): Reachability {
  const probe = options.probe ?? tcpProbe;
  const now = options.now ?? (() => performance.now());
  const shared = new Map<string, { at: number; result: Promise<Reach> }>();
  return {
    check(url, budgetMs) {
      const { hostname, port, protocol } = new URL(url);
      const key = `${hostname}:${port}`;
      const recent = shared.get(key);
      let result: Promise<Reach>;
      if (recent && now() - recent.at < options.freshMs) result = recent.result;
      else {
        const host = hostname.replace(/^\[|\]$/g, "");
        result = probe(host, Number(port) || (protocol === "https:" ? 443 : 80), budgetMs);
        const entry = { at: now(), result };
        shared.set(key, entry);
        // Only a success is worth sharing beyond the probe's own life.
        result.then((r) => {
          if (r !== "ok" && shared.get(key) === entry) shared.delete(key);
        });
      }
      return race(result, budgetMs);
    },
  };
}

function race(result: Promise<Reach>, budgetMs: number): Promise<Reach> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([result, new Promise<Reach>((resolve) => (timer = setTimeout(() => resolve("timeout"), budgetMs)))]).finally(() => clearTimeout(timer));
}

/** Open a TCP connection and close it at once. */
export const tcpProbe: Probe = (host, port, budgetMs) =>
  new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (reach: Reach) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reach);
    };
    const timer = setTimeout(() => done("timeout"), budgetMs);
    socket.once("connect", () => done("ok"));
    socket.once("error", (error: NodeJS.ErrnoException) => done(error.code === "ECONNREFUSED" ? "refused" : "error"));
  });
