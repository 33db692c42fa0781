/**
 * The other instances' load, merged into what this instance's policies see. Each instance
 * reports its own absolute figures (never deltas, so a lost message heals with the next
 * one); a peer that stops reporting for `ttlMs` is dropped, so an instance that dies leaves
 * no stuck in-flight counts.
 */
import type { FleetView } from "../route/router.ts";
import type { LoadMessage, ReplicaLoad } from "./codec.ts";

export interface Peer {
  incarnation: string;
  name: string;
  /** Local clock (ms) when its last message arrived: expiry never depends on its clock. */
  seenAt: number;
  /** Its clock when it sent that message. */
  sentAt: number;
  applied: string;
  lag: number;
  load: Record<string, ReplicaLoad>;
}

export interface RemoteLoad {
  inflight: number;
  queuedTokens: number;
  pending: number;
  /** Oldest commit time of a request still prefilling on some other instance (undefined = none). */
  oldestCommit?: number;
}

export class PeerTable {
  private readonly peers = new Map<string, Peer>();

  constructor(
    /** This instance's incarnation: its own messages are not peers. */
    private readonly self: string,
    public ttlMs: number,
  ) {}

  /** Returns the peer it updated (undefined for its own or a goodbye). */
  update(m: LoadMessage, now: number): Peer | undefined {
    if (m.i === this.self) return undefined;
    if (m.bye) {
      this.peers.delete(m.i);
      return undefined;
    }
    const peer: Peer = { incarnation: m.i, name: m.n, seenAt: now, sentAt: m.at, applied: m.applied, lag: m.lag, load: m.r };
    this.peers.set(m.i, peer);
    return peer;
  }

  /** Drop peers silent for longer than the TTL; returns the names dropped. */
  expire(now: number): string[] {
    const dropped: string[] = [];
    for (const [id, p] of this.peers) {
      if (now - p.seenAt > this.ttlMs) {
        this.peers.delete(id);
        dropped.push(p.name);
      }
    }
    return dropped;
  }

  list(now: number): Peer[] {
    return [...this.peers.values()].filter((p) => now - p.seenAt <= this.ttlMs);
  }

  /** The live peers' figures for one replica, summed. */
  remote(replica: string, now: number): RemoteLoad | undefined {
    let total: RemoteLoad | undefined;
    for (const p of this.peers.values()) {
      const l = p.load[replica];
      if (!l || now - p.seenAt > this.ttlMs) continue;
      total ??= { inflight: 0, queuedTokens: 0, pending: 0 };
      total.inflight += l[0];
      total.queuedTokens += l[1];
      total.pending += l[2];
      if (l[3] > 0 && (total.oldestCommit === undefined || l[3] < total.oldestCommit)) total.oldestCommit = l[3];
    }
    return total;
  }
}

/** What this instance knows of a replica's queue, raw (before the engine's queue is priced in). */
export interface LocalLoad {
  queuedTokens: number;
  /** Requests this instance sent that have not reached their first byte. */
  pending: number;
  /** The engine's reported waiting requests (0 when not scraped). */
  engineWaiting: number;
}

/**
 * The fleet view with the other instances' requests added. The engine's own waiting count
 * (when scraped) already includes every instance's requests: the local view prices the ones
 * this instance did not send at its mean request size, so the other instances' pending
 * requests are taken out of that part before their queued tokens are added.
 */
export function mergeLoad(view: FleetView, local: LocalLoad, remote: RemoteLoad | undefined): FleetView {
  if (!remote) return view;
  const unseen = Math.max(0, local.engineWaiting - local.pending);
  const perUnseen = unseen > 0 ? Math.max(0, view.queuedTokens - local.queuedTokens) / unseen : 0;
  const stillUnseen = Math.max(0, unseen - remote.pending);
  const pendingSince =
    remote.oldestCommit === undefined ? view.pendingSince : view.pendingSince === undefined ? remote.oldestCommit : Math.min(view.pendingSince, remote.oldestCommit);
  return {
    ...view,
    inflight: view.inflight + remote.inflight,
    load: view.load + remote.inflight,
    queuedTokens: local.queuedTokens + remote.queuedTokens + stillUnseen * perUnseen,
    ...(pendingSince === undefined ? {} : { pendingSince }),
  };
}
