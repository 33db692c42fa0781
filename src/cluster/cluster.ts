/**
 * Several router instances, one view: each instance keeps its own index as a mirror of the
 * cluster's and never waits on Redis to decide. What it learns (commits, corrections,
 * Responses ids) goes out after the decision, in batches, with one Lua call that appends the
 * batch to a Redis stream (the history a newcomer catches up from) and publishes it with its
 * stream id (how the others get it at once: pub/sub costs Redis and every instance about
 * half of what a blocked stream read costs per event). Load (in flight, queued prefill per
 * replica) and heartbeats go over pub/sub too: only the latest value matters. A periodic
 * snapshot of the index, taken by one instance at a time, plus the stream since it, is how a
 * new or restarted instance catches up before it serves.
 *
 * Redis away (down, slow, partitioned): the instance routes on its local view, keeps what
 * it learns in a bounded backlog, and sends it when Redis is back; on reconnecting it reads
 * the stream from the last id it applied, so the instances converge again. Redis restarted
 * empty: the backlog and a fresh snapshot refill it.
 *
 * Keys (prefix `<namespace>:v<identity version>:`): `log` (stream), `snapshot` (binary),
 * `snapshot:meta` (JSON), `snapshot:lock`, `epoch` (says whether Redis lost its data),
 * `response:<id>` (owner, for a follow-up that outruns the event); channels `events`, `load`.
 *
 * `Cluster` keeps each concern's state in a room of its own: what is learnt on its way to the
 * stream (./outbox.ts), the Responses ids' owner keys (./response-keys.ts), and below the
 * connection (`Link`), its place in the stream (`StreamPlace`), its own load reports
 * (`LoadReports`), the other instances (`Peers`) and the snapshot's schedule (`SnapshotSchedule`).
 */
import { RedisClient } from "bun";
import type { Fleet } from "../fleet/fleet.ts";
import type { Replica } from "../fleet/replica.ts";
import { clip, type Log } from "../log.ts";
import { IDENTITY_VERSION } from "../route/chain.ts";
import type { FleetView, Router, RouterSink } from "../route/router.ts";
import { BATCH_FORMAT, BatchFormatError, decodeBatch, decodeLoad, type ClusterEvent, type LoadMessage, type ReplicaLoad } from "./codec.ts";
import { mergeLoad, PeerTable } from "./load.ts";
import { Outbox } from "./outbox.ts";
import { ResponseKeys } from "./response-keys.ts";
import { decodeSnapshot, encodeSnapshot } from "./snapshot.ts";

export interface ClusterSettings {
  /** redis:// or rediss:// URL, credentials included (never logged). */
  redis: string;
  name: string;
  namespace: string;
  catchUpTimeoutMs: number;
  /** Responses API ids are kept in Redis this long (the index's TTL). */
  responseTtlMs: number;
  heartbeatMs?: number;
  snapshotMs?: number;
}

export interface ClusterDeps {
  router: Router;
  fleet: Fleet;
  log: Log;
  now?: () => number;
}

export type ClusterState = "connecting" | "up" | "down" | "stopped";

/** Instances that stop reporting for this many heartbeats are dropped with their load. */
const PEER_TTL_BEATS = 3;
/** A command unanswered this long marks Redis unreachable (a hung or partitioned server). */
const STALL_MS = 2_000;
const CONNECT_TIMEOUT_MS = 2_000;
const READ_COUNT = 1_000;
/** Stream entries kept at most, whatever the snapshots trim (a safety bound on memory). */
const MAX_STREAM_ENTRIES = 1_000_000;
/** Answers at least this slow write their decision's batch before the client sees their end. */
const SETTLE_MS = 5;
/** Load reports go out at most this often (plus every heartbeat). */
const LOAD_GAP_MS = 50;
/** A follow-up whose response id is not mirrored yet asks Redis, for at most this long. */
const LOOKUP_TIMEOUT_MS = 250;
/** The least the last look for a Responses id may take, once its wait is over. */
const LAST_LOOK_MS = 25;
/**
 * A published stream id further ahead of Redis's clock than this is not taken on trust (a
 * forged or damaged message): stored as the id applied up to, it would make every later
 * event look old. The stream is asked whether it holds it (an id ahead of a clock that was
 * set back is real: the stream keeps its ids growing).
 */
const MAX_ID_AHEAD_MS = 60_000;
/** Instances of another version named in /status at most (each is also logged once). */
const MAX_OTHER_VERSIONS = 16;

interface Session {
  cmd: RedisClient;
  sub: RedisClient;
  dead: boolean;
  failed: Promise<string>;
  fail(reason: string): void;
}

/** The connection to Redis: its state and since when, the last error, the live session, the reconnect loop and the periodic timers. */
class Link {
  state: ClusterState = "connecting";
  since: number;
  lastError: string | null = null;
  stopped = false;
  session?: Session;
  loop?: Promise<void>;
  timers: ReturnType<typeof setInterval>[] = [];
  /** Ends the wait before the next reconnect (stopping). */
  wake?: () => void;
  warnedConnecting = false;

  constructor(now: number) {
    this.since = now;
  }

  /** The session, while Redis is up and the session alive. */
  up(): Session | undefined {
    const s = this.session;
    return s && !s.dead && this.state === "up" ? s : undefined;
  }
}

/** Where this instance stands in the shared stream: the id applied up to and the lag, Redis's epoch and clock, ids in doubt, the batches held while the stream is read. */
class StreamPlace {
  /** Redis's data as last seen (`epoch` key): another value says Redis lost its data. */
  epoch?: string;
  /** The stream id applied up to: only ever one Redis gave (see Cluster.applyEntry). */
  lastId = "0-0";
  /** Redis's clock minus this one's (ms), measured at connect; undefined if Redis would not say. */
  redisOffset?: number;
  /** Published ids too far ahead to take on trust, until the stream says whether it holds them. */
  readonly doubted = new Set<string>();
  verifying = false;
  /** The id applied up to was found unusable: the next connect catches up from the snapshot. */
  resync = false;
  /** Published batches that arrive while the stream is being read (catching up): applied after it. */
  live?: string[];
  /** How old the newest event from another instance was when it was applied (ms). */
  lagMs = 0;
}

/** This instance's own load reports: whether one is due, when the last went out, and when the last came back on the subscription. */
class LoadReports {
  scheduled = false;
  lastAt = -Infinity;
  lastEcho = 0;
}

/** The other instances: their load, and those to warn about (one with this instance's name, one of another llmroute version). */
class Peers {
  /** Names another instance also reports (each warned once). */
  readonly sameName = new Set<string>();
  /** Instances (by incarnation) that write another batch format, while they report. */
  readonly otherVersions = new Map<string, { name: string; format: number; seenAt: number }>();

  constructor(readonly table: PeerTable) {}
}

/** The snapshot's schedule: how often one is tried, whether one is being taken or wanted at once, and the last taken or restored. */
class SnapshotSchedule {
  taking = false;
  /** Redis came back empty: a full snapshot is owed, taken on connecting until one is written. */
  wanted = false;
  info: { at: number; by: string; bytes: number } | null = null;

  constructor(readonly everyMs: number) {}
}

export interface InstanceStatus {
  name: string;
  self: boolean;
  /** ms since its last heartbeat arrived (0 for this instance). */
  last_heartbeat_ms: number;
  /** Its sync lag: how old the newest event it applied was when it applied it (ms). */
  lag_ms: number;
  inflight: number;
}

export interface ClusterStatus {
  name: string;
  redis: string;
  namespace: string;
  state: ClusterState;
  since: string;
  last_error: string | null;
  instances: InstanceStatus[];
  lag_ms: number;
  applied_id: string;
  backlog_events: number;
  /**
   * sent, applied: events; dropped: events lost while Redis was away; malformed: entries;
   * other_version: entries in another batch format (an instance of another llmroute version);
   * unencodable: events this instance could not encode (left unshared).
   */
  events: { sent: number; applied: number; dropped: number; malformed: number; other_version: number; unencodable: number };
  disconnects: number;
  snapshot: { at: string; by: string; bytes: number } | null;
  catch_up: { ms: number; restored_entries: number; replayed_events: number; complete: boolean } | null;
  warnings: string[];
}

export class Cluster {
  readonly incarnation = crypto.randomUUID().slice(0, 8);
  readonly counts = { sent: 0, applied: 0, dropped: 0, malformed: 0, other_version: 0, unencodable: 0, disconnects: 0 };
  catchUp: { ms: number; restoredEntries: number; replayedEvents: number; complete: boolean } | null = null;
  private caughtUp?: () => void;
  private firstEncodeError?: string;

  private readonly link: Link;
  private readonly place = new StreamPlace();
  private readonly outbox: Outbox;
  private readonly responses: ResponseKeys;
  private readonly reports = new LoadReports();
  private readonly peers: Peers;
  private readonly snapshots: SnapshotSchedule;
  private readonly keys: { log: string; snapshot: string; meta: string; lock: string; epoch: string; response: (id: string) => string; load: string; events: string };
  private readonly heartbeatMs: number;
  private readonly now: () => number;

  constructor(
    readonly settings: ClusterSettings,
    private readonly deps: ClusterDeps,
  ) {
    this.now = deps.now ?? Date.now;
    this.link = new Link(this.now());
    this.heartbeatMs = settings.heartbeatMs ?? 1_000;
    this.snapshots = new SnapshotSchedule(settings.snapshotMs ?? 30_000);
    this.peers = new Peers(new PeerTable(this.incarnation, this.heartbeatMs * PEER_TTL_BEATS));
    this.outbox = new Outbox(this.now, this.counts, () => this.drainOutbox());
    this.responses = new ResponseKeys(settings.responseTtlMs);
    const p = `${settings.namespace}:v${IDENTITY_VERSION}:`;
    this.keys = {
      log: `${p}log`,
      snapshot: `${p}snapshot`,
      meta: `${p}snapshot:meta`,
      lock: `${p}snapshot:lock`,
      epoch: `${p}epoch`,
      response: (id) => `${p}response:${id}`,
      load: `${p}load`,
      events: `${p}events`,
    };
  }

  /** Redis reachable ("up"), being reached, away, or this instance stopped. */
  get state(): ClusterState {
    return this.link.state;
  }

  /** How old the newest event from another instance was when this instance applied it (ms). */
  get lagMs(): number {
    return this.place.lagMs;
  }

  /** The last snapshot this instance took or restored. */
  get snapshotInfo(): { at: number; by: string; bytes: number } | null {
    return this.snapshots.info;
  }

  /** Where the router's learning goes: batched into the stream after the decision. */
  readonly sink: RouterSink = {
    commit: (chains, replica, at, tag, continued, session) =>
      this.emit({ kind: "commit", at, replica, commit: tag, continued, chains, ...(session === undefined ? {} : { session }) }),
    forget: (replica) => this.emit({ kind: "forget", at: this.now(), replica }),
    forgetUsedBy: (replica, usedBy) => this.emit({ kind: "forget-used-by", at: this.now(), replica, usedBy }),
    response: (id, replica) => {
      this.emit({ kind: "response", at: this.now(), replica, id });
      this.responses.learnt(id, replica, this.now());
    },
    retract: (chains, replica, tag, created) => this.emit({ kind: "retract", at: this.now(), replica, commit: tag, chains, created }),
  };

  /** Redis host and port, without credentials (for logs and /status). */
  get where(): string {
    try {
      const u = new URL(this.settings.redis);
      return `${u.protocol}//${u.host}`;
    } catch {
      return "redis";
    }
  }

  /**
   * Connect and catch up (snapshot, then the stream since it), at most catch_up_timeout;
   * then keep the mirror up to date in the background, reconnecting whenever Redis is away.
   */
  async start(): Promise<void> {
    const started = this.now();
    // Instances behind a round-robin balancer would otherwise all spread their first cold
    // requests to the same replica: each starts its spread counter somewhere else.
    this.deps.router.counter += Math.floor(Math.random() * 0x10000);
    const ready = new Promise<void>((resolve) => (this.caughtUp = resolve));
    this.link.loop = this.run();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const inTime = await Promise.race([ready.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), this.settings.catchUpTimeoutMs)))]);
    clearTimeout(timer);
    if (!inTime) {
      this.catchUp ??= { ms: this.now() - started, restoredEntries: 0, replayedEvents: 0, complete: false };
      this.deps.log.warn("cluster: not caught up within catch_up_timeout; serving on this instance's view while it catches up", {
        redis: this.where,
        timeout_ms: this.settings.catchUpTimeoutMs,
        error: this.link.lastError ?? undefined,
      });
    }
    this.link.timers = [setInterval(() => this.heartbeat(), this.heartbeatMs), setInterval(() => void this.maybeSnapshot(), this.snapshots.everyMs)];
  }

  /** Send what is pending (briefly), say goodbye so the others drop this instance's load, disconnect. */
  async stop(): Promise<void> {
    if (this.link.stopped) return;
    for (const t of this.link.timers) clearInterval(t);
    this.outbox.flushNow();
    const s = this.link.session;
    if (s && !s.dead && this.link.state === "up") {
      this.drainOutbox();
      await withTimeout(this.outbox.acked(), 1_000).catch(() => {});
      await withTimeout(s.cmd.publish(this.keys.load, JSON.stringify(this.loadMessage(true))), 500).catch(() => {});
    }
    this.link.stopped = true;
    this.link.state = "stopped";
    s?.fail("stopped");
    this.link.wake?.();
    await this.link.loop;
  }

  /** A replica's view with the other instances' in-flight requests and queued prefill added. */
  view(replica: Replica): FleetView {
    const view = replica.view();
    return mergeLoad(
      view,
      { queuedTokens: replica.prefill.queuedTokens, pending: replica.prefill.size, engineWaiting: replica.engineWaiting, rateMeasured: measured(replica) },
      this.peers.table.remote(replica.name, this.now()),
    );
  }

  /**
   * This instance's load changed: tell the others — at once when it has been quiet, else
   * once at the end of a short gap. A request changes the load three times (sent, first
   * byte, finished); one message each would cost every instance and Redis more CPU than
   * the decision itself, and a prefill queue changes on the scale of the prefill.
   */
  loadChanged(): void {
    if (this.reports.scheduled || this.link.state !== "up") return;
    this.reports.scheduled = true;
    const publish = () => {
      this.reports.scheduled = false;
      this.publishLoad();
    };
    const wait = this.reports.lastAt + LOAD_GAP_MS - this.now();
    if (wait <= 0) setImmediate(publish);
    else setTimeout(publish, wait);
  }

  /**
   * The answer to a decision committed at `committedAt` is about to reach its client, whose
   * next turn may go to another instance: if that decision is still waiting in the batch,
   * write the batch now. Not for answers faster than SETTLE_MS: no LLM generation is, and
   * writing once per such request would cost more than the request (they wait ≤ the gap).
   */
  answered(committedAt: number): void {
    this.loadChanged();
    if (!this.outbox.holds(committedAt) || this.now() - committedAt < SETTLE_MS) return;
    this.outbox.flushNow();
  }

  /**
   * The owner of a Responses API id this instance has not mirrored yet: a client can send the
   * follow-up to another instance before the stream brings it there. Asks Redis, briefly;
   * never when Redis is away. Not there yet either — the owner shares the id as its answer
   * ends, and the client may already have the answer (seen: a 2-token answer's follow-up, sent
   * at once to another instance, asked before the key was written, was spread and got the
   * engine's 404) — it waits, within the same bound, for the id's event from the stream
   * (written before the key), then asks once more.
   */
  async responseOwner(id: string): Promise<string | undefined> {
    const s = this.link.up();
    if (!s) return undefined;
    const started = this.now();
    const ask = async (ms: number): Promise<string | undefined> => {
      const owner = await withTimeout(s.cmd.get(this.keys.response(id)), ms);
      if (!owner || !this.deps.fleet.byName(owner)) return undefined;
      this.deps.router.rememberResponse(id, owner, false);
      return owner;
    };
    try {
      const owner = await ask(LOOKUP_TIMEOUT_MS);
      if (owner) return owner;
      const left = () => LOOKUP_TIMEOUT_MS - (this.now() - started);
      await this.responses.wait(id, left());
      // The last look: what is left of the bound, but a Redis round trip at least.
      return this.deps.router.responseOwner(id) ?? (await ask(Math.max(LAST_LOOK_MS, left())));
    } catch {
      // Slow or away: route as if it were unknown.
    }
    return undefined;
  }

  status(now: number = this.now()): ClusterStatus {
    const self: InstanceStatus = {
      name: this.settings.name,
      self: true,
      last_heartbeat_ms: 0,
      lag_ms: Math.round(this.place.lagMs * 10) / 10,
      inflight: this.deps.fleet.replicas.reduce((a, r) => a + r.inflight, 0),
    };
    const peers = this.peers.table.list(now).map(
      (p): InstanceStatus => ({
        name: p.name,
        self: false,
        last_heartbeat_ms: Math.max(0, now - p.seenAt),
        lag_ms: Math.round(p.lag * 10) / 10,
        inflight: Object.values(p.load).reduce((a, l) => a + l[0], 0),
      }),
    );
    const warnings: string[] = [];
    if (this.link.state !== "up") {
      warnings.push(
        `Redis ${this.where} unreachable since ${new Date(this.link.since).toISOString()}${this.link.lastError ? ` (${this.link.lastError})` : ""}: routing on this instance's own view; ${plural(this.backlogEvents(), "event")} waiting to be shared`,
      );
    }
    if (this.counts.dropped > 0) warnings.push(`${plural(this.counts.dropped, "event")} dropped while Redis was away (backlog full): instances may disagree until they re-learn`);
    for (const name of this.peers.sameName) warnings.push(`another instance is also named "${name}": give each instance its own cluster.name`);
    for (const o of this.peers.otherVersions.values()) {
      warnings.push(
        `instance ${o.name} runs another llmroute version (events in format ${o.format}, this one's in ${BATCH_FORMAT}): neither reads the other's routing knowledge; run one version on every instance`,
      );
    }
    if (this.counts.unencodable > 0) {
      warnings.push(`${plural(this.counts.unencodable, "event")} could not be encoded and ${this.counts.unencodable === 1 ? "was" : "were"} not shared (the first: ${this.firstEncodeError})`);
    }
    return {
      name: this.settings.name,
      redis: this.where,
      namespace: this.settings.namespace,
      state: this.link.state,
      since: new Date(this.link.since).toISOString(),
      last_error: this.link.lastError,
      instances: [self, ...peers.sort((a, b) => a.name.localeCompare(b.name))],
      lag_ms: self.lag_ms,
      applied_id: this.place.lastId,
      backlog_events: this.backlogEvents(),
      events: {
        sent: this.counts.sent,
        applied: this.counts.applied,
        dropped: this.counts.dropped,
        malformed: this.counts.malformed,
        other_version: this.counts.other_version,
        unencodable: this.counts.unencodable,
      },
      disconnects: this.counts.disconnects,
      snapshot: this.snapshots.info ? { at: new Date(this.snapshots.info.at).toISOString(), by: this.snapshots.info.by, bytes: this.snapshots.info.bytes } : null,
      catch_up: this.catchUp
        ? { ms: this.catchUp.ms, restored_entries: this.catchUp.restoredEntries, replayed_events: this.catchUp.replayedEvents, complete: this.catchUp.complete }
        : null,
      warnings,
    };
  }

  /** Instances seen alive, this one included. */
  instanceCount(now: number = this.now()): number {
    return 1 + this.peers.table.list(now).length;
  }

  /** Responses ids' owner keys waiting for Redis (bounded: ./response-keys.ts). */
  get pendingResponseKeys(): number {
    return this.responses.size;
  }

  backlogEvents(): number {
    return this.outbox.events();
  }

  // --- connection -------------------------------------------------------------------------

  private async run(): Promise<void> {
    let backoff = 100;
    while (!this.link.stopped) {
      let session: Session | undefined;
      let reason: string;
      try {
        session = await this.open();
        backoff = 100;
        reason = await session.failed;
      } catch (error) {
        reason = describe(error);
      }
      if (session) this.close(session);
      if (this.link.stopped) return;
      this.markDown(reason);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, backoff);
        this.link.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      backoff = Math.min(backoff * 2, 2_000);
    }
  }

  private async open(): Promise<Session> {
    const options = { autoReconnect: false, enableOfflineQueue: false, connectionTimeout: CONNECT_TIMEOUT_MS };
    const cmd = new RedisClient(this.settings.redis, options);
    let failNow: (reason: string) => void = () => {};
    const session: Session = {
      cmd,
      sub: cmd,
      dead: false,
      failed: new Promise<string>((resolve) => (failNow = resolve)),
      fail: (reason) => {
        if (session.dead) return;
        session.dead = true;
        failNow(reason);
      },
    };
    const watch = (c: RedisClient) => {
      c.onclose = (error) => session.fail(`connection closed${error?.message ? `: ${error.message}` : ""}`);
    };
    try {
      await withTimeout(cmd.connect(), CONNECT_TIMEOUT_MS, "connect");
      watch(cmd);
      session.sub = await withTimeout(cmd.duplicate(), CONNECT_TIMEOUT_MS, "connect");
      watch(session.sub);

      const started = this.now();
      this.place.redisOffset = await this.redisClock(cmd);
      if (!this.plausible(this.place.lastId)) this.restart(`the stream id this instance applied up to (${this.place.lastId}) is ahead of Redis's clock`);
      await withTimeout(cmd.send("SET", [this.keys.epoch, crypto.randomUUID(), "NX"]), STALL_MS);
      const epoch = (await withTimeout(cmd.get(this.keys.epoch), STALL_MS)) ?? "";
      const meta = parseMeta(await withTimeout(cmd.get(this.keys.meta), STALL_MS));
      let restored = 0;
      if (this.place.epoch === undefined) {
        // First connection of this process: the snapshot, then the stream since it.
        if (meta) restored = await this.restoreSnapshot(cmd);
      } else if (epoch !== this.place.epoch) {
        // Redis lost its data (restarted without persistence, or flushed): read the new
        // stream from its start, and put a full snapshot back for instances yet to come.
        this.place.lastId = "0-0";
        this.snapshots.wanted = true;
        this.deps.log.warn("cluster: Redis lost the shared state (restarted empty?); re-sharing this instance's view", { redis: this.where });
      } else if (this.place.resync || (meta?.trimmed !== undefined && compareIds(this.place.lastId, meta.trimmed) < 0)) {
        // Away long enough that what it missed was trimmed, or its place in the stream was
        // unusable: the snapshot has it.
        if (meta) restored = await this.restoreSnapshot(cmd);
      }
      this.place.resync = false;
      this.place.epoch = epoch;
      // Subscribe first, then read the stream: what is published meanwhile waits, and is
      // applied after what the stream held (both carry stream ids; none is applied twice).
      this.place.live = [];
      await withTimeout(session.sub.subscribe(this.keys.load, (message) => this.onLoad(message)), STALL_MS);
      await withTimeout(session.sub.subscribe(this.keys.events, (message) => this.onEvents(message)), STALL_MS);
      const replayed = await this.drain(session);
      const waiting = this.place.live;
      this.place.live = undefined;
      for (const message of waiting) this.onEvents(message);
      if (!this.catchUp) this.catchUp = { ms: this.now() - started, restoredEntries: restored, replayedEvents: replayed, complete: true };
      else if (!this.catchUp.complete) Object.assign(this.catchUp, { complete: true, restoredEntries: restored, replayedEvents: replayed });
    } catch (error) {
      session.fail(describe(error));
      this.close(session);
      throw error;
    }

    const wasDown = this.link.state === "down";
    this.link.session = session;
    this.link.state = "up";
    this.link.since = this.now();
    this.reports.lastEcho = this.now();
    if (wasDown) this.deps.log.info("cluster: Redis reachable again; sharing the backlog", { redis: this.where, backlog_events: this.backlogEvents() });
    else this.deps.log.info("cluster: joined", { redis: this.where, name: this.settings.name, applied: this.place.lastId });
    this.caughtUp?.();
    this.drainOutbox();
    this.publishLoad();
    if (this.snapshots.wanted) void this.maybeSnapshot();
    return session;
  }

  private close(s: Session): void {
    s.fail("closed");
    for (const c of new Set([s.cmd, s.sub])) {
      c.onclose = null;
      try {
        c.close();
      } catch {
        // already closed
      }
    }
    if (this.link.session === s) this.link.session = undefined;
    this.outbox.requeue();
  }

  private markDown(reason: string): void {
    this.link.lastError = reason;
    if (this.link.state === "up") {
      this.counts.disconnects++;
      this.link.since = this.now();
      this.deps.log.warn("cluster: Redis unreachable; routing on this instance's own view", { redis: this.where, reason });
    } else if (this.link.state === "connecting" && !this.link.warnedConnecting) {
      this.link.warnedConnecting = true;
      this.deps.log.warn("cluster: cannot reach Redis; routing on this instance's own view until it can", { redis: this.where, reason });
    }
    if (this.link.state !== "stopped") this.link.state = this.link.state === "connecting" ? "connecting" : "down";
  }

  // --- the stream -------------------------------------------------------------------------

  /** Read what the stream holds past `lastId` (catching up); returns events applied. */
  private async drain(s: Session): Promise<number> {
    let applied = 0;
    for (;;) {
      let reply: unknown;
      try {
        reply = await withTimeout(s.cmd.send("XREAD", ["COUNT", String(READ_COUNT), "STREAMS", this.keys.log, this.place.lastId]), STALL_MS * 5);
      } catch (error) {
        // Never expected (only Redis's own ids are kept), but fatal if it happened: every
        // reconnect would fail the same way while Redis answers everything else.
        if (/invalid stream id/i.test(describe(error))) this.restart(`Redis refused the stream id this instance applied up to (${this.place.lastId})`);
        throw error;
      }
      const entries = streamEntries(reply, this.keys.log);
      for (const [id, fields] of entries) {
        let from = "";
        let payload = "";
        for (let i = 0; i + 1 < fields.length; i += 2) {
          if (fields[i] === "i") from = fields[i + 1]!;
          else if (fields[i] === "p") payload = fields[i + 1]!;
        }
        applied += this.applyEntry(id, from, payload);
      }
      if (entries.length < READ_COUNT) return applied;
    }
  }

  /**
   * A batch as it was published: "<stream id> <incarnation> <payload>". Anything can be
   * published on the channel: an id that is not Redis's is dropped, and one too far ahead
   * of Redis's clock is checked against the stream first.
   */
  private onEvents(message: string): void {
    if (this.place.live) {
      this.place.live.push(message);
      return;
    }
    const a = message.indexOf(" ");
    const b = message.indexOf(" ", a + 1);
    if (a < 0 || b < 0) return this.malformed("not <id> <instance> <batch>", message.slice(0, 40));
    const id = message.slice(0, a);
    if (!isStreamId(id)) return this.malformed("not a stream id", id.slice(0, 40));
    if (!this.plausible(id)) return this.doubt(id);
    this.applyEntry(id, message.slice(a + 1, b), message.slice(b + 1));
  }

  private malformed(error: string, id: string): void {
    this.counts.malformed++;
    if (this.counts.malformed === 1) this.deps.log.warn("cluster: dropped a malformed stream entry", { id, error });
  }

  /** Is `id` one Redis could have given by now? */
  private plausible(id: string): boolean {
    if (!isStreamId(id)) return false;
    return this.place.redisOffset === undefined || idMs(id) <= this.now() + this.place.redisOffset + MAX_ID_AHEAD_MS;
  }

  /** Redis's clock minus this one's (TIME), or undefined when it does not say. */
  private async redisClock(cmd: RedisClient): Promise<number | undefined> {
    const before = this.now();
    const reply = await withTimeout(cmd.send("TIME", []), STALL_MS).catch(() => undefined);
    const after = this.now();
    if (!Array.isArray(reply)) return undefined;
    const ms = Number(reply[0]) * 1000 + Number(reply[1]) / 1000;
    return Number.isFinite(ms) ? ms - (before + after) / 2 : undefined;
  }

  /**
   * A published id far ahead of Redis's clock: not applied on its word. The stream is read
   * (buffering what is published meanwhile, as when catching up): a real entry is applied
   * from there; one the stream does not hold is dropped and counted.
   */
  private doubt(id: string): void {
    this.place.doubted.add(id);
    if (this.place.verifying) return;
    this.place.verifying = true;
    const s = this.link.session;
    const buffer: string[] = [];
    if (s && !s.dead) this.place.live = buffer;
    const read = s && !s.dead ? this.drain(s) : Promise.resolve(0);
    void read
      .catch((error) => s?.fail(`stream read: ${describe(error)}`))
      .finally(() => {
        for (const doubted of this.place.doubted) this.malformed("a stream id the stream does not hold, ahead of Redis's clock", doubted);
        this.place.doubted.clear();
        this.place.verifying = false;
        if (this.place.live !== buffer) return;
        this.place.live = undefined;
        for (const message of buffer) this.onEvents(message);
      });
  }

  /** The id applied up to is unusable: start again from the snapshot and the stream since it. */
  private restart(reason: string): void {
    this.deps.log.warn("cluster: catching up again from the snapshot", { reason });
    this.place.lastId = "0-0";
    this.place.resync = true;
  }

  /** One stream entry, once: entries at or before `lastId` were applied already. */
  private applyEntry(id: string, from: string, payload: string): number {
    if (compareIds(id, this.place.lastId) <= 0) return 0;
    this.place.doubted.delete(id);
    this.place.lastId = id;
    if (from === this.incarnation) return 0;
    let sentAt: number;
    let batch: ClusterEvent[];
    try {
      ({ sentAt, events: batch } = decodeBatch(Buffer.from(payload, "base64")));
    } catch (error) {
      if (error instanceof BatchFormatError) {
        this.counts.other_version++;
        this.noteOtherVersion(from, error.format);
        return 0;
      }
      this.malformed(describe(error), id);
      return 0;
    }
    const now = this.now();
    // The sender's times become this clock's: as long ago as they were when it sent them.
    // Its clock may be off by an hour; taken as they are, its commits would stand an hour in
    // the future and hold every later entry there (a list is kept in time order), out of
    // the TTL's reach. (Time in transit, usually milliseconds, is not counted.)
    const local = (at: number) => now - Math.max(0, sentAt - at);
    for (const event of batch) {
      this.apply(event, local);
      if (event.kind === "commit") this.peers.table.noteCommit(from, event.replica, event.at, now);
      this.place.lagMs = Math.max(0, now - event.at);
    }
    this.counts.applied += batch.length;
    return batch.length;
  }

  private apply(event: ClusterEvent, local: (at: number) => number): void {
    const { router, fleet } = this.deps;
    // Replicas this instance does not serve (configs may differ during a rollout) are not mirrored.
    if (!fleet.byName(event.replica)) return;
    switch (event.kind) {
      case "commit":
        router.applyCommit(event.chains, event.replica, local(event.at), event.commit, event.continued, event.session);
        break;
      case "forget":
        router.forget(event.replica, false);
        break;
      case "forget-used-by":
        router.index.forgetUsedBy(event.replica, local(event.usedBy));
        break;
      case "response":
        router.rememberResponse(event.id, event.replica, false);
        this.responses.arrived(event.id);
        break;
      case "retract":
        router.applyRetract(event.chains, event.replica, event.commit, event.created);
        break;
    }
  }

  /** An event learnt here goes to the outbox, to be written to the stream after the decision. */
  private emit(event: ClusterEvent): void {
    if (this.link.stopped) return;
    try {
      this.outbox.add(event);
    } catch (error) {
      // Sharing must never fail the request it learned from (this runs inside Router.commit):
      // the event is left out whole (the writer took it back), counted, and the first logged.
      this.counts.unencodable++;
      if (this.counts.unencodable === 1) {
        this.firstEncodeError = describe(error);
        this.deps.log.warn("cluster: an event could not be encoded; it is not shared (counted in /status)", { kind: event.kind, replica: event.replica, error: this.firstEncodeError });
      }
    }
  }

  /** Redis up: the outbox's batches go to the stream, and the Responses ids' owner keys are written. */
  private drainOutbox(): void {
    const s = this.link.up();
    if (!s) return;
    this.outbox.send(
      (payload) => s.cmd.send("EVAL", [APPEND_AND_PUBLISH, "1", this.keys.log, this.keys.events, String(MAX_STREAM_ENTRIES), this.incarnation, payload]),
      (error) => s.fail(`stream write: ${describe(error)}`),
    );
    this.responses.take(this.now(), (id, replica, ttlMs) => {
      s.cmd.send("SET", [this.keys.response(id), replica, "PX", String(ttlMs)]).catch(() => {});
    });
  }

  // --- load and heartbeats ----------------------------------------------------------------

  private loadMessage(bye = false): LoadMessage {
    const r: Record<string, ReplicaLoad> = {};
    for (const x of this.deps.fleet.replicas) {
      r[x.name] = [x.inflight, Math.round(x.prefill.queuedTokens), x.prefill.size, x.prefill.oldestCommit() ?? 0, measured(x) ? Math.round(x.prefill.rate) : 0];
    }
    return { v: 1, i: this.incarnation, n: this.settings.name, f: BATCH_FORMAT, at: this.now(), applied: this.place.lastId, lag: this.place.lagMs, r, ...(bye ? { bye: true as const } : {}) };
  }

  private publishLoad(): void {
    const s = this.link.up();
    if (!s) return;
    this.reports.lastAt = this.now();
    s.cmd.publish(this.keys.load, JSON.stringify(this.loadMessage())).catch((error) => s.fail(`publish: ${describe(error)}`));
  }

  private onLoad(text: string): void {
    const m = decodeLoad(text);
    if (!m) {
      this.counts.malformed++;
      return;
    }
    const now = this.now();
    if (m.i === this.incarnation) {
      this.reports.lastEcho = now;
      return;
    }
    if (m.n === this.settings.name && !this.peers.sameName.has(m.n)) {
      this.peers.sameName.add(m.n);
      this.deps.log.warn("cluster: another instance has this instance's name; give each its own cluster.name", { name: m.n });
    }
    const known = this.peers.table.list(now).some((p) => p.incarnation === m.i);
    this.peers.table.update(m, now);
    // Instances before batch format 2 sent no format: they write (and read) format 1.
    if (!m.bye && (m.f ?? 1) !== BATCH_FORMAT) this.noteOtherVersion(m.i, m.f ?? 1, m.n);
    if (m.bye) this.peers.otherVersions.delete(m.i);
    if (!known && !m.bye) this.deps.log.info("cluster: instance seen", { instance: m.n });
    if (m.bye) this.deps.log.info("cluster: instance left", { instance: m.n });
  }

  /**
   * Another instance writes a batch format this one cannot read (nor it this one's): a
   * rolling upgrade, or a forgotten instance. Said once per instance in the log, and in
   * /status while it keeps reporting.
   */
  private noteOtherVersion(incarnation: string, format: number, name?: string): void {
    const now = this.now();
    const known = this.peers.otherVersions.get(incarnation);
    // Anything can be published: a flood of made-up instances is not remembered without bound.
    if (!known && this.peers.otherVersions.size >= MAX_OTHER_VERSIONS) return;
    const label = clip(name ?? known?.name ?? this.peers.table.list(now).find((p) => p.incarnation === incarnation)?.name ?? `incarnation ${incarnation}`)!;
    this.peers.otherVersions.set(incarnation, { name: label, format, seenAt: now });
    if (known) return;
    this.deps.log.warn("cluster: an instance runs another llmroute version; neither reads the other's routing knowledge: run one version on every instance", {
      instance: label,
      its_format: format,
      this_format: BATCH_FORMAT,
    });
  }

  private heartbeat(): void {
    const now = this.now();
    // Every message comes through Redis: when this instance's own heartbeats stopped coming
    // back too (or Redis is known to be away), a silent peer says nothing about that peer.
    const redisAway = this.link.state !== "up" || now - this.reports.lastEcho > this.heartbeatMs * 1.5;
    for (const name of this.peers.table.expire(now)) {
      if (redisAway) this.deps.log.info("cluster: no word from an instance while Redis is away; its in-flight counts are dropped until it reports again", { instance: name });
      else this.deps.log.warn("cluster: instance stopped reporting; its in-flight counts are dropped", { instance: name });
    }
    for (const [incarnation, o] of this.peers.otherVersions) if (now - o.seenAt > this.heartbeatMs * PEER_TTL_BEATS) this.peers.otherVersions.delete(incarnation);
    const s = this.link.up();
    if (!s) return;
    // Our own heartbeats come back on the subscription; when they stop, it is dead. A write
    // unanswered for long: Redis is hung or cut off (no reset ever comes).
    if (now - this.reports.lastEcho > this.heartbeatMs * PEER_TTL_BEATS) return s.fail("no heartbeat came back on the subscription");
    const oldest = this.outbox.oldestSentAt();
    if (oldest !== undefined && now - oldest > STALL_MS) return s.fail(`a stream write was not answered within ${STALL_MS} ms`);
    this.publishLoad();
  }

  // --- snapshots --------------------------------------------------------------------------

  /** One instance at a time (a lock) writes the index and the Responses ids, then trims the stream. */
  private async maybeSnapshot(): Promise<void> {
    const s = this.link.up();
    if (!s || this.snapshots.taking) return;
    this.snapshots.taking = true;
    try {
      const won = await withTimeout(s.cmd.send("SET", [this.keys.lock, this.incarnation, "NX", "PX", String(Math.max(1_000, Math.floor(this.snapshots.everyMs * 0.9)))]), STALL_MS);
      if (won !== "OK") return;
      const previous = parseMeta(await withTimeout(s.cmd.get(this.keys.meta), STALL_MS));
      const id = this.place.lastId;
      const at = this.now();
      const blob = encodeSnapshot({ id, at, by: this.settings.name, responses: this.deps.router.savedResponses() }, this.deps.router.index.snapshot());
      await withTimeout(s.cmd.set(this.keys.snapshot, blob), STALL_MS * 5);
      // Keep one snapshot interval of stream behind the new snapshot, so an instance a little
      // behind never misses what it has not read yet; older entries are in the snapshot.
      const trimmed = previous && compareIds(previous.id, id) < 0 ? previous.id : undefined;
      await withTimeout(s.cmd.set(this.keys.meta, JSON.stringify({ id, at, by: this.settings.name, bytes: blob.byteLength, ...(trimmed ? { trimmed } : {}) })), STALL_MS);
      if (trimmed) await withTimeout(s.cmd.send("XTRIM", [this.keys.log, "MINID", trimmed]), STALL_MS);
      this.snapshots.info = { at, by: this.settings.name, bytes: blob.byteLength };
      this.snapshots.wanted = false;
    } catch (error) {
      this.deps.log.warn("cluster: snapshot failed", { error: describe(error) });
    } finally {
      this.snapshots.taking = false;
    }
  }

  private async restoreSnapshot(cmd: RedisClient): Promise<number> {
    const blob = await withTimeout(cmd.getBuffer(this.keys.snapshot), STALL_MS * 5);
    if (!blob) return 0;
    try {
      const { header, index } = decodeSnapshot(blob);
      const keep = (name: string) => this.deps.fleet.byName(name) !== undefined;
      // Its entries as old as they were when it was taken, by whichever clock took it.
      const { restored } = this.deps.router.index.restore(index, keep, { now: this.now(), takenAt: header.at });
      for (const [id, replica] of header.responses) if (keep(replica)) this.deps.router.rememberResponse(id, replica, false);
      if (this.plausible(header.id)) this.place.lastId = header.id;
      else this.deps.log.warn("cluster: the shared snapshot's stream id is ahead of Redis's clock; reading the whole stream after it", { id: header.id.slice(0, 40) });
      this.snapshots.info = { at: header.at, by: header.by, bytes: blob.byteLength };
      return restored;
    } catch (error) {
      this.deps.log.warn("cluster: the shared snapshot is unreadable; catching up from the stream alone", { error: describe(error) });
      return 0;
    }
  }
}

/**
 * One round trip per batch: append to the stream (the history a newcomer catches up from)
 * and publish it with its stream id (how the others get it at once). Atomic, so the
 * published order is the stream's order.
 */
const APPEND_AND_PUBLISH = `local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'i', ARGV[3], 'p', ARGV[4])
redis.call('PUBLISH', ARGV[1], id .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return id`;

/** Whether this instance has measured the replica's prefill rate. */
function measured(replica: Replica): boolean {
  return replica.prefill.measured;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

const STREAM_ID = /^(\d{1,20})-(\d{1,20})$/;
const U64_MAX = 0xffff_ffff_ffff_ffffn;

/** A stream id as Redis writes them: "<ms>-<seq>", each an unsigned 64-bit number. */
export function isStreamId(id: string): boolean {
  const m = STREAM_ID.exec(id);
  return m !== null && BigInt(m[1]!) <= U64_MAX && BigInt(m[2]!) <= U64_MAX;
}

function idMs(id: string): number {
  return Number(STREAM_ID.exec(id)?.[1] ?? Number.NaN);
}

/** Stream ids "ms-seq" compared as numbers (exactly: they are 64-bit); anything else sorts first. */
export function compareIds(a: string, b: string): number {
  const parts = (id: string): [bigint, bigint] => {
    const m = STREAM_ID.exec(id);
    return m ? [BigInt(m[1]!), BigInt(m[2]!)] : [-1n, -1n];
  };
  const [am, as] = parts(a);
  const [bm, bs] = parts(b);
  const d = am !== bm ? am - bm : as - bs;
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

/** XREAD's reply for one stream as [id, fields] pairs: a RESP3 map or a RESP2 array. */
export function streamEntries(reply: unknown, key: string): [string, string[]][] {
  if (!reply) return [];
  let entries: unknown;
  if (Array.isArray(reply)) entries = (reply.find((x) => Array.isArray(x) && x[0] === key) as unknown[] | undefined)?.[1];
  else if (typeof reply === "object") entries = (reply as Record<string, unknown>)[key];
  if (!Array.isArray(entries)) return [];
  return entries.filter((e): e is [string, string[]] => Array.isArray(e) && typeof e[0] === "string" && Array.isArray(e[1]));
}

interface Meta {
  id: string;
  at: number;
  by: string;
  trimmed?: string;
}

function parseMeta(text: string | null): Meta | undefined {
  if (!text) return undefined;
  try {
    const m = JSON.parse(text) as Meta;
    return typeof m.id === "string" ? m : undefined;
  } catch {
    return undefined;
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, what = "Redis"): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: string }).code;
    return code && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
