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
  /** Prefill rates the other instances measured for this replica (tokens/s). */
  rates: number[];
}

export class PeerTable {
  private readonly peers = new Map<string, Peer>();
  /**
   * Commits applied from a peer after its last load report: requests it sent that its
   * figures do not show yet (per incarnation → replica → oldest commit time, and when noted).
   */
  private readonly unreported = new Map<string, Map<string, { at: number; notedAt: number }>>();

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
    // Its report now covers what it committed up to when it sent it.
    const pending = this.unreported.get(m.i);
    if (pending) {
      for (const [replica, c] of pending) if (c.at <= m.at) pending.delete(replica);
      if (pending.size === 0) this.unreported.delete(m.i);
    }
    return peer;
  }

  /**
   * A peer committed a request to `replica` at `at` (its clock). Until a report of its sent
   * after that arrives, the request counts as still prefilling there: a prediction built on
   * it is not judged (the engine may not hold that prefix yet), so no instance "corrects"
   * the index from a miss that was only a race.
   */
  noteCommit(incarnation: string, replica: string, at: number, now: number): void {
    if (incarnation === this.self) return;
    const peer = this.peers.get(incarnation);
    if (peer && peer.sentAt >= at) return;
    let pending = this.unreported.get(incarnation);
    if (!pending) this.unreported.set(incarnation, (pending = new Map()));
    const c = pending.get(replica);
    if (!c || at < c.at) pending.set(replica, { at, notedAt: now });
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
    for (const [id, pending] of this.unreported) {
      for (const [replica, c] of pending) if (now - c.notedAt > this.ttlMs) pending.delete(replica);
      if (pending.size === 0) this.unreported.delete(id);
    }
    return dropped;
  }

  list(now: number): Peer[] {
    return [...this.peers.values()].filter((p) => now - p.seenAt <= this.ttlMs);
  }

  /** The live peers' figures for one replica, summed. */
  remote(replica: string, now: number): RemoteLoad | undefined {
    let total: RemoteLoad | undefined;
    const oldest = (t: RemoteLoad, at: number) => {
      if (at > 0 && (t.oldestCommit === undefined || at < t.oldestCommit)) t.oldestCommit = at;
    };
    for (const p of this.peers.values()) {
      const l = p.load[replica];
      if (!l || now - p.seenAt > this.ttlMs) continue;
      total ??= { inflight: 0, queuedTokens: 0, pending: 0, rates: [] };
      total.inflight += l[0];
      total.queuedTokens += l[1];
      total.pending += l[2];
      oldest(total, l[3]);
      if (l[4] > 0) total.rates.push(l[4]);
    }
    for (const pending of this.unreported.values()) {
      const c = pending.get(replica);
      if (!c || now - c.notedAt > this.ttlMs) continue;
      total ??= { inflight: 0, queuedTokens: 0, pending: 0, rates: [] };
      total.pending++;
      oldest(total, c.at);
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
  /** This instance has measured the replica's prefill rate (else the view's is the default). */
  rateMeasured: boolean;
}

/**
 * The fleet view with the other instances' requests added. The engine's own waiting count
 * (when scraped) already includes every instance's requests: the local view prices the ones
 * this instance did not send at its mean request size, so the other instances' pending
 * requests are taken out of that part before their queued tokens are added. The prefill rate
 * is the mean of every instance's measurement: an instance that never sent to a replica
 * would otherwise price it at the default rate, and never send there to learn better.
 */
export function mergeLoad(view: FleetView, local: LocalLoad, remote: RemoteLoad | undefined): FleetView {
  if (!remote) return view;
  const unseen = Math.max(0, local.engineWaiting - local.pending);
  const perUnseen = unseen > 0 ? Math.max(0, view.queuedTokens - local.queuedTokens) / unseen : 0;
  const stillUnseen = Math.max(0, unseen - remote.pending);
  const pendingSince =
    remote.oldestCommit === undefined ? view.pendingSince : view.pendingSince === undefined ? remote.oldestCommit : Math.min(view.pendingSince, remote.oldestCommit);
  const rates = local.rateMeasured ? [view.prefillRate, ...remote.rates] : remote.rates;
  return {
    ...view,
    ...(rates.length > 0 ? { prefillRate: rates.reduce((a, b) => a + b, 0) / rates.length } : {}),
    inflight: view.inflight + remote.inflight,
    load: view.load + remote.inflight,
    queuedTokens: local.queuedTokens + remote.queuedTokens + stillUnseen * perUnseen,
    ...(pendingSince === undefined ? {} : { pendingSince }),
  };
}
