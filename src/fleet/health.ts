/**
 * Health tells a blip from a death (Envoy's outlier detection and a circuit breaker's
 * half-open state, in small): a refused connection or a failed active check demotes a
 * replica at once; a 502/503/504, a reset or a timeout only after `failures` in a row (an
 * engine that says its KV or its queue is full is busy, not failing: no count). A replica
 * demoted by what an active check sees (a refused connection, a failing /health) is up again
 * at its next passing check: that check answers the question that demoted it, and a quiet
 * fleet must not wait for traffic to look healthy. A replica demoted by failed requests is
 * half-open when its check passes (its /health may have passed all along): one request goes
 * there, and its success brings the replica back. When every replica of a pool is down,
 * requests go to all of them anyway (panic mode) rather than to none. What a replica has
 * cached is declared lost only on evidence — it refused connections at an active check (no
 * process listens), or its engine reports a new process start time or counters that went
 * back — never because of a failed request. No timers here; the caller owns the schedule.
 */
import { clip, type Log } from "../log.ts";
import type { Failure } from "./failure.ts";
import type { Replica } from "./replica.ts";

/** up: routed to; half-open: one trial request may go there; down: not routed to (except in panic mode). */
export type HealthState = "up" | "half-open" | "down";

/** What health remembers of one replica besides its state (Replica.state). */
export class HealthRecord {
  /** At least one health check has completed (up or down). */
  checked = false;
  /** Failed requests since the last success (a 502/503/504, reset or timeout). */
  consecutiveFailures = 0;
  /** A half-open replica's one trial request is in flight. */
  trial = false;
  /** Its cache was declared lost in this down episode (so it is forgotten once, not at every check). */
  cacheLost = false;
  lastError?: { message: string; at: number };
  downSince?: number;
  /**
   * What took it out of routing: "check" — nothing listened or /health failed, which a
   * passing check settles; "requests" — failed requests, which only a request can settle.
   */
  demotedBy?: "check" | "requests";
}

export interface HealthOptions {
  log: Log;
  /** Consecutive failed requests (5xx, reset, timeout) that demote a replica (health.failures), read at each failure. */
  failures: () => number;
  /** Times shared with people and peers (lastError, downSince). */
  wallClock: () => number;
  /** Evidence that a replica's cache is gone (its engine restarted): forget what it held. */
  onCacheLost?: (replica: Replica, reason: string) => void;
  /** Health changed: pools may leave panic mode. */
  onChange: () => void;
}

/** The transitions of every replica's health: what requests and checks say of it. */
export class Health {
  constructor(private readonly options: HealthOptions) {}

  /** A request was sent to `replica`: on a half-open one, it is the trial. */
  dispatched(replica: Replica): void {
    if (replica.state === "half-open") replica.health.trial = true;
  }

  /** The replica answered (first byte, status < 500): failures reset; a trial brings it back up. */
  succeeded(replica: Replica): void {
    replica.health.consecutiveFailures = 0;
    if (replica.state === "half-open" && replica.health.trial) {
      replica.health.trial = false;
      this.up(replica, "replica up again: trial request succeeded");
    }
  }

  /** The request ended without a verdict on the replica (the client left first). */
  released(replica: Replica): void {
    replica.health.trial = false;
  }

  /**
   * A request to `replica` failed. Refused: nothing listens, demote at once. Otherwise it
   * counts; `failures` in a row demote, and a failed trial sends a half-open replica back
   * down at once.
   */
  failed(replica: Replica, failure: Failure): void {
    if (failure.kind === "full") {
      // It answered, and coherently: its KV was busy with other requests. No verdict on health.
      replica.stats.kvFull++;
      this.released(replica);
      return;
    }
    if (failure.kind === "busy") {
      replica.stats.busy++;
      this.released(replica);
      return;
    }
    // The router's own wait at its KV wall ran out: nothing was sent; its deadline counts the timeout.
    if (failure.kind === "wall") {
      this.released(replica);
      return;
    }
    const health = replica.health;
    replica.stats.errors++;
    health.lastError = { message: failure.reason, at: this.options.wallClock() };
    health.consecutiveFailures++;
    const trial = replica.state === "half-open" && health.trial;
    health.trial = false;
    if (failure.kind === "refused" || trial || health.consecutiveFailures >= this.options.failures()) {
      const why = trial
        ? `trial request failed: ${failure.reason}`
        : failure.kind === "refused" || health.consecutiveFailures === 1
          ? failure.reason
          : `${health.consecutiveFailures} failures in a row, the last: ${failure.reason}`;
      this.demote(replica, why, failure.kind === "refused" && !trial ? "check" : "requests");
    }
  }

  /**
   * Take a replica out of routing now. `by` "check": a refused connection or a failed active
   * check, which its next passing check settles (up); "requests": failed requests, after
   * which a passing check makes it half-open, for one trial request.
   */
  demote(replica: Replica, reason: string, by: "check" | "requests"): void {
    const health = replica.health;
    health.lastError = { message: reason, at: this.options.wallClock() };
    // Evidence from requests outweighs a check's: a replica that fails requests while its
    // /health answers stays on trial until a request succeeds.
    if (by === "requests" || replica.state !== "down") health.demotedBy = by;
    if (replica.state === "down") return;
    replica.state = "down";
    health.trial = false;
    health.downSince = this.options.wallClock();
    this.options.log.warn("replica down", { replica: replica.name, reason });
  }

  /** An active check failed (`refused`: nothing listens on its port). */
  checkFailed(replica: Replica, failure: string, refused: boolean): void {
    const health = replica.health;
    const first = !health.checked;
    health.checked = true;
    // Nothing listens on its port: the engine process is gone, and its cache with it. (At
    // the first check this only clears pins a state file restored; "replica down" says why.)
    if (refused) this.loseCache(replica, "connection refused at an active check", true, !first);
    if (!first) return this.demote(replica, failure, "check");
    health.lastError = { message: failure, at: this.options.wallClock() };
    health.downSince = this.options.wallClock();
    health.demotedBy = "check";
    this.options.log.warn("replica down", { replica: replica.name, reason: failure });
  }

  /** An active check passed: up, or half-open after failed requests. */
  checkPassed(replica: Replica): void {
    const first = !replica.health.checked;
    replica.health.checked = true;
    if (first) this.up(replica, "replica up");
    else if (replica.state === "down" && replica.health.demotedBy !== "requests") this.up(replica, "replica up again: health check passed");
    else if (replica.state === "down") {
      replica.state = "half-open";
      replica.health.trial = false;
      this.options.log.info("replica half-open: health check passed; the next request is a trial", { replica: replica.name });
    }
    this.options.onChange();
  }

  private up(replica: Replica, msg: string): void {
    replica.state = "up";
    Object.assign(replica.health, { trial: false, downSince: undefined, demotedBy: undefined, cacheLost: false, consecutiveFailures: 0 });
    this.options.log.info(msg, { replica: replica.name, models: replica.cards.map((c) => c.id).join(",") });
  }

  /**
   * Evidence that the replica's cache is gone: forget what it held. Once per down episode
   * (a replica that stays down is re-checked every few seconds); `episode` false for
   * evidence from a live engine, which marks no episode.
   */
  loseCache(replica: Replica, reason: string, episode = true, announce = true): void {
    if (replica.health.cacheLost) return;
    if (episode) replica.health.cacheLost = true;
    replica.stats.cacheLosses++;
    if (announce) this.options.log.warn("replica cache lost: forgetting its prefixes", { replica: replica.name, reason });
    this.options.onCacheLost?.(replica, reason);
  }
}

/**
 * Pools in panic mode (every replica of the pool down: requests go to all of them rather
 * than to none), logged when it starts and ends, by their replicas' names (never by the model
 * a client named: any name reaches a replica whose model list is unknown, and 200 names would
 * be 200 pools). Settled whenever health changes.
 */
export class PanicMode {
  /** Requests routed while every replica of their pool was down. */
  routes = 0;
  readonly pools = new Map<string, { replicas: string[]; model?: string }>();

  constructor(
    private readonly log: Log,
    private readonly byName: (name: string) => Replica | undefined,
  ) {}

  /** Is `pool` in panic mode now (none of it routable)? Starts it (logged) when so. */
  enter(pool: readonly Replica[], model: string | undefined): boolean {
    const panic = pool.length > 0 && !pool.some((r) => r.routable);
    this.settle();
    const names = pool.map((r) => r.name);
    const key = names.join(",");
    if (panic && !this.pools.has(key)) {
      this.pools.set(key, { replicas: names, ...(model === undefined ? {} : { model }) });
      this.log.warn("panic mode: every replica is down; routing to all of them", { model: clip(model), replicas: key });
    }
    return panic;
  }

  /** Is some pool in panic mode now (every replica of it down)? From current health, not from the last request. */
  active(): boolean {
    this.settle();
    return this.pools.size > 0;
  }

  /** Pools whose replicas are routable again (or were reloaded away) leave panic mode. */
  settle(): void {
    for (const [key, p] of this.pools) {
      const now = p.replicas.map((name) => this.byName(name));
      if (now.some((r) => r === undefined) || now.some((r) => r!.routable)) {
        this.pools.delete(key);
        this.log.info("panic mode over: a replica is up", { model: clip(p.model), replicas: key });
      }
    }
  }
}
