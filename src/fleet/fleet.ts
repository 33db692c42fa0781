/**
 * The fleet: the replicas of router.toml, their pools by model, a reload's reconcile, and what
 * the policy sees of a pool for one routing attempt. Each replica's concerns live in rooms of
 * their own: health transitions and panic mode (health.ts), engine watching (watch.ts), the
 * KV wall (kv-wall.ts), calibration, residency, the prefill and slot queues.
 */
import type { ReplicaConfig } from "../config.ts";
import type { Log } from "../log.ts";
import type { FetchLike, ModelCard } from "../engines/discover.ts";
import type { FleetView } from "../route/router.ts";
import { pricedRates } from "./prefill.ts";
import { Health, PanicMode } from "./health.ts";
import { configCard, Replica } from "./replica.ts";
import { EngineWatcher } from "./watch.ts";

export interface FleetOptions {
  fetch?: FetchLike;
  log: Log;
  healthPath: string;
  healthTimeoutMs: number;
  /** Consecutive failed requests (5xx, reset, timeout) that demote a replica (health.failures). */
  failures: number;
  /** Times shared with people and peers (Date.now by default): last errors, down since, resident looks, scrapes. */
  wallClock?: () => number;
  /** Evidence that a replica's cache is gone (its engine restarted): forget what it held. */
  onCacheLost?: (replica: Replica, reason: string) => void;
  /** The engine's cache counters moved by this much since the last scrape (a window to compare with the index). */
  onCounters?: (replica: Replica, delta: { hits: number; queries: number }) => void;
}

export class Fleet {
  replicas: Replica[];
  /** Health transitions: what requests and checks say of a replica. */
  readonly health: Health;
  /** Pools whose every replica is down, routed to all of them. */
  readonly panic: PanicMode;
  /** Checks, discovery, scrapes and resident looks. */
  readonly watch: EngineWatcher;

  constructor(
    configs: ReplicaConfig[],
    private readonly options: FleetOptions,
  ) {
    this.replicas = configs.map((c) => new Replica(c));
    const wallClock = options.wallClock ?? Date.now;
    this.panic = new PanicMode(options.log, (name) => this.byName(name));
    this.health = new Health({ log: options.log, failures: () => this.options.failures, wallClock, onCacheLost: options.onCacheLost, onChange: () => this.panic.settle() });
    this.watch = new EngineWatcher({
      fetch: options.fetch ?? fetch,
      log: options.log,
      settings: () => this.options,
      wallClock,
      health: this.health,
      onCounters: options.onCounters,
    });
  }

  /** Health settings changed (config reload). */
  configure(settings: Pick<FleetOptions, "healthPath" | "healthTimeoutMs" | "failures">): void {
    Object.assign(this.options, settings);
  }

  byName(name: string): Replica | undefined {
    return this.replicas.find((r) => r.name === name);
  }

  /** A request was sent to `replica` (`panic`: its pool was in panic mode): on a half-open one, it is the trial. */
  dispatched(replica: Replica, panic: boolean): void {
    if (panic) this.panic.routes++;
    this.health.dispatched(replica);
  }

  /** Check every replica (or only those currently down) once, in parallel. */
  checkAll(onlyDown = false): Promise<void> {
    return this.watch.checkAll(this.replicas, onlyDown);
  }

  /**
   * Replicas serving `model` (all of them when the request names none), healthy or not: those
   * that list it, else those that answer any name (a single-model llama-server serves whatever
   * `model` says, so a client that works against it directly works through the router).
   */
  pool(model: string | undefined): Replica[] {
    if (model === undefined) return this.replicas;
    const listing = this.replicas.filter((r) => r.serves(model));
    return listing.length > 0 ? listing : this.replicas.filter((r) => r.anyModelName);
  }

  /** Every model id any replica serves, first card wins. */
  models(): ModelCard[] {
    const seen = new Map<string, ModelCard>();
    for (const r of this.replicas) for (const card of r.cards) if (!seen.has(card.id)) seen.set(card.id, card);
    return [...seen.values()];
  }

  /** Replace the replica list (config reload); state of replicas that stay is kept. */
  reconcile(configs: ReplicaConfig[]): { added: string[]; removed: string[]; replaced: string[] } {
    const old = new Map(this.replicas.map((r) => [r.name, r]));
    const replaced: string[] = [];
    const next = configs.map((c) => {
      const existing = old.get(c.name);
      if (!existing) return new Replica(c);
      old.delete(c.name);
      if (existing.config.url !== c.url) {
        replaced.push(c.name);
        return new Replica(c);
      }
      existing.config = c;
      if (c.models.length > 0) existing.cards = c.models.map((id) => existing.cards.find((card) => card.id === id) ?? configCard(id));
      return existing;
    });
    const added = next.filter((r) => !this.replicas.includes(r)).map((r) => r.name);
    for (const r of this.replicas) if (!next.includes(r)) r.removed = true;
    this.replicas = next;
    return { added, removed: [...old.keys()], replaced };
  }

  /**
   * What the policy sees of `pool` for one routing attempt: `exclude`d replicas (already
   * tried by this request) are never healthy; the others are healthy while routable, or
   * all of them when no replica of the pool is routable (panic mode: a fleet that is
   * wrongly all demoted still serves; a truly dead one fails fast with the reasons).
   */
  views(
    pool: readonly Replica[],
    exclude: ReadonlySet<string>,
    model?: string,
    view: (r: Replica) => FleetView = (r) => r.view(),
  ): { views: FleetView[]; panic: boolean } {
    const panic = this.panic.enter(pool, model);
    const views = pool.map((r) => {
      const v = view(r);
      v.healthy = !exclude.has(r.name) && (panic || r.routable);
      return v;
    });
    // Priced at rates shrunk towards the pool's (src/fleet/prefill.ts `pricedRates`).
    const rates = pricedRates(pool.map((r, i) => ({ ...r.prefill.measurement(), rate: views[i]!.prefillRate })));
    views.forEach((v, i) => (v.prefillRate = rates[i]!));
    return { views, panic };
  }
}
