/**
 * The index of which replica holds which prompt prefix: (link hash, replica) → last use.
 *
 * Laid out in typed arrays (one slot per entry, ~55 bytes in all) so a million entries fit in
 * ~64 MB and no garbage is made per request. Each replica keeps its own LRU list, oldest
 * first, and its own budget in characters (its `kv_tokens` × characters per token): only
 * the newest run of a card's list that fits its budget is matched — when its remembered
 * prefixes outgrow what the card can hold, its least recently used ones stop counting as
 * cached first, as the engine's own eviction would. They stay remembered as demand, which
 * is what the capacity wall is measured from. A chain is always touched
 * deepest-first, so a parent link is never older than its children: every removal pops a
 * list's oldest entry, which is a leaf, and each replica's entries stay prefix-closed — a
 * lookup can binary-search the chain.
 *
 * The capacity figures (the working set of recently active conversations per replica and
 * for the fleet with shared prefixes once) are kept incrementally as entries enter and
 * leave the window, so reading them costs O(entries that left the window), not a scan.
 *
 * Each entry also keeps the tag of the commit that last recorded it (4 bytes), so a commit
 * the replica never computed is taken back by its identity, not by its time: two commits
 * in one millisecond, or a commit whose time was moved up to keep the list ordered (a
 * cluster peer's, applied after local ones), are told apart.
 */
import { chainChars, type PrefixChain } from "./chain.ts";
import { SnapshotReader, SnapshotWriter } from "./prefix-snapshot.ts";

export interface PrefixMatch {
  replica: string;
  /** Number of chain links matched (0 = nothing). */
  depth: number;
  /** Characters of prompt covered by the match. */
  chars: number;
  /** When this replica last served the matched prefix (ms); 0 when nothing matched. */
  lastUsed: number;
  /** The tag of the commit that last recorded the deepest matched link (0: none; see Router.commit). */
  commit: number;
}

/** Per-replica totals kept as entries come and go. */
export interface ReplicaIndexStats {
  /** Characters of distinct prefixes held (shared prefixes once). */
  chars: number;
  entries: number;
  /** Remembered prompt tips: conversations (their latest turn) and one-shots. */
  tips: number;
  /** Characters within the card's budget: what is matched (the rest is remembered as demand only). */
  heldChars: number;
}

export interface PrefixIndexOptions {
  maxEntries: number;
  ttlMs: number;
  /** The capacity window: entries used within it make up the active working set. */
  windowMs: number;
}

const NIL = -1;
// flags
const REUSED = 1; // recorded again after it was created: a later turn, a shared document
const CONTINUED = 2; // recorded by a continuation: part of a conversation
const PERSISTED = REUSED | CONTINUED;
const IN_WINDOW = 4; // used within the capacity window (at or after the window's start)
const COUNTED = 8; // IN_WINDOW and (REUSED or CONTINUED): part of the active working set
const LINKED = 16; // on its replica's LRU list
const LIVE = 32; // allocated (not on the free list)
const HELD = 64; // within its card's budget: believed still cached there

const MIN_CAPACITY = 1024;

export class PrefixIndex {
  private capacity = 0;
  private lo = new Uint32Array(0);
  private hi = new Uint32Array(0);
  private rid = new Uint16Array(0);
  private flags = new Uint8Array(0);
  private delta = new Uint32Array(0);
  /** Length of the last partial tail chunk recorded right after this link (completions continuation). */
  private tail = new Uint32Array(0);
  private last = new Float64Array(0);
  /** The tag of the commit that last recorded the entry (0: none, e.g. restored from a v1 snapshot). */
  private commit = new Uint32Array(0);
  private parent = new Int32Array(0);
  private children = new Int32Array(0);
  private prev = new Int32Array(0);
  private next = new Int32Array(0);
  /** Open addressing, linear probing: entry + 1, 0 = empty. Kept at ≤ 50 % load. */
  private slots = new Int32Array(0);
  private mask = 0;
  private freeList = NIL;
  private highWater = 0;
  private count = 0;

  private readonly byReplica = new ReplicaColumns();
  private windowSince = -Infinity;
  /** Distinct hashes counted in some replica's active working set (the fleet's view). */
  private readonly fleet = new HashCounts();
  private scratch = new Int32Array(64);

  constructor(public options: PrefixIndexOptions) {}

  get size(): number {
    return this.count;
  }

  /** Bytes held by the index's arrays (what one entry costs: memoryBytes / capacity). */
  memoryBytes(): number {
    const perEntry = 4 + 4 + 2 + 1 + 4 + 4 + 8 + 4 + 4 + 4 + 4 + 4;
    return this.capacity * perEntry + this.slots.byteLength + this.fleet.memoryBytes();
  }

  /** The longest prefix of `chain` that `replica` is known to hold. */
  match(chain: PrefixChain, replica: string): PrefixMatch {
    return this.longest(chain, replica, true);
  }

  /** Does `replica` hold the link with this hash (remembered, and within its card's budget)? */
  holds(lo: number, hi: number, replica: string): boolean {
    const r = this.byReplica.ids.get(replica);
    return r !== undefined && this.isHeld(this.find(lo >>> 0, hi >>> 0, r));
  }

  /** The length of the tail chunk last recorded right after link `depth - 1` of `chain` on `replica` (0 = none). */
  tailAfter(chain: PrefixChain, depth: number, replica: string): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined || depth < 1 || depth > chain.length) return 0;
    const e = this.find(chain.lo[depth - 1]!, chain.hi[depth - 1]!, r);
    return e === NIL ? 0 : this.tail[e]!;
  }

  /**
   * Remember that `replica` now holds every prefix in `chain` (sent by a continuation or
   * not), recorded by the commit tagged `commit` (non-zero to be taken back by `retract`).
   * Returns how many links it created.
   */
  record(chain: PrefixChain, replica: string, now: number, continued = false, commit = 0): number {
    const n = chain.length;
    if (n === 0) return 0;
    const r = this.byReplica.idOf(replica);
    // Lists stay ordered by time even if the clock steps back.
    const newest = this.byReplica.newest[r]!;
    if (newest !== NIL && now < this.last[newest]!) now = this.last[newest]!;
    if (this.scratch.length < n) this.scratch = new Int32Array(Math.max(n, this.scratch.length * 2));
    const chainEntries = this.scratch;

    // Shallow to deep: find or create each link with its parent.
    let parent = NIL;
    let created = 0;
    for (let i = 0; i < n; i++) {
      let e = this.find(chain.lo[i]!, chain.hi[i]!, r);
      if (e === NIL) {
        e = this.create(chain.lo[i]!, chain.hi[i]!, r, chain.ends[i]! - (i === 0 ? 0 : chain.ends[i - 1]!), parent);
        created++;
      }
      chainEntries[i] = e;
      parent = e;
    }
    if (n >= 2) this.tail[chainEntries[n - 2]!] = this.delta[chainEntries[n - 1]!]!;

    // Deep to shallow: each link becomes the newest, so parents stay newer than children.
    const add = continued ? CONTINUED : 0;
    for (let i = n - 1; i >= 0; i--) {
      const e = chainEntries[i]!;
      const f = this.flags[e]!;
      if (f & LINKED) {
        this.flags[e] = f | REUSED | add;
        this.unlink(e);
      } else {
        this.flags[e] = f | add;
      }
      this.last[e] = now;
      this.commit[e] = commit;
      this.append(e);
      this.enterWindow(e);
    }
    this.enforceBounds(r);
    return created;
  }

  /**
   * Take back what the record tagged `commit` created, when the replica turned out never to
   * compute the prompt (it refused it, or answered an error): its `created` deepest links,
   * each while it is still a leaf last recorded by that commit (a later commit of the same
   * prompt, even within the same millisecond, keeps them). Links the record only touched
   * stay: the replica held them anyway.
   */
  retract(chain: PrefixChain, replica: string, created: number, commit: number): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined || commit === 0) return 0;
    let removed = 0;
    for (let i = chain.length - 1; i >= chain.length - created; i--) {
      const e = this.find(chain.lo[i]!, chain.hi[i]!, r);
      if (e === NIL || this.children[e] !== 0 || this.commit[e] !== commit) break;
      this.remove(e);
      removed++;
    }
    if (removed > 0) this.enforceBounds(r);
    return removed;
  }

  /** Drop entries idle longer than the TTL; returns how many were dropped. */
  evict(now: number): number {
    const { names, head } = this.byReplica;
    let dropped = 0;
    for (let r = 0; r < names.length; r++) {
      for (let e = head[r]!; e !== NIL && now - this.last[e]! > this.options.ttlMs; e = head[r]!) {
        this.remove(e);
        dropped++;
      }
    }
    return dropped;
  }

  /** Forget everything a replica held (it restarted, or left the fleet). */
  forget(replica: string): void {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined) return;
    for (let e = this.byReplica.head[r]!; e !== NIL; e = this.byReplica.head[r]!) this.remove(e);
  }

  /**
   * Drop a replica's entries last recorded by one of `commits` (their tags): the engine
   * dropped what those requests' slots held. Oldest first, so a link goes after what was
   * recorded below it; a link another commit extended stays (that one's prompt holds it).
   * Returns how many were dropped.
   */
  forgetCommits(replica: string, commits: ReadonlySet<number>): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined || commits.size === 0) return 0;
    let dropped = 0;
    for (let e = this.byReplica.head[r]!; e !== NIL; ) {
      const next = this.next[e]!;
      if (this.commit[e] !== 0 && commits.has(this.commit[e]!) && this.children[e] === 0) {
        this.remove(e);
        dropped++;
      }
      e = next;
    }
    if (dropped > 0) this.enforceBounds(r);
    return dropped;
  }

  /**
   * Drop a replica's entries last used at or before `at`: the engine evicted a prefix last
   * used then, and an LRU cache evicts everything older first.
   */
  forgetUsedBy(replica: string, at: number): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined) return 0;
    let dropped = 0;
    for (let e = this.byReplica.head[r]!; e !== NIL && this.last[e]! <= at; e = this.byReplica.head[r]!) {
      this.remove(e);
      dropped++;
    }
    return dropped;
  }

  /**
   * What a replica was sent between two moments: the characters of distinct prefixes last
   * used after `after` and before `before` (an LRU cache's reuse distance of a prefix last
   * used at `after`, as of a request committed at `before`), and how many of them are prompt
   * tips (conversations and one-shots: a slot each on an engine that keeps one prompt per
   * slot). Walks the replica's list from its newest end and stops past `limitChars`.
   */
  distance(replica: string, after: number, before: number, limitChars = Infinity): { chars: number; tips: number; capped: boolean } {
    const r = this.byReplica.ids.get(replica);
    let chars = 0;
    let tips = 0;
    if (r === undefined) return { chars, tips, capped: false };
    for (let e = this.byReplica.newest[r]!; e !== NIL && this.last[e]! > after; e = this.prev[e]!) {
      if (this.last[e]! >= before) continue;
      chars += this.delta[e]!;
      if (this.children[e] === 0) tips++;
      if (chars > limitChars) return { chars, tips, capped: true };
    }
    return { chars, tips, capped: false };
  }

  /**
   * The characters of other prefixes `replica` was sent after `after` (ms): `distance` without
   * the links of `chains` themselves (a shared system prompt touched by another conversation is
   * still this one's). What competes with those chains for an LRU cache until their next use.
   * Stops counting past `limitChars` (a busy replica's walk is cut short).
   */
  sentSince(replica: string, after: number, chains: readonly PrefixChain[], limitChars = Infinity): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined) return 0;
    let own = 0;
    for (const e of this.chainEntries(r, chains)) if (this.last[e]! > after) own += this.delta[e]!;
    return this.distance(replica, after, Infinity, limitChars + own).chars - own;
  }

  /**
   * A replica's card as the index believes it: its budget (characters of KV) and what
   * occupies it — its budget once it was sent more than that within the window, else what
   * the index holds of it. Undefined for a KV not known.
   */
  private occupancy(r: number | undefined): { occupied: number; budget: number } | undefined {
    const { budgetOf, heldOf, recentOf } = this.byReplica;
    const budget = r === undefined ? Infinity : budgetOf[r]!;
    if (r === undefined || !Number.isFinite(budget)) return undefined;
    return { occupied: Math.min(budget, Math.max(heldOf[r]!, recentOf[r]!)), budget };
  }

  /**
   * A replica's full card as its LRU cache evicts (`occupancy`): the oldest goes first — the
   * entry the budget cut through, for the part of it still there, then the oldest held. The
   * links of `chains` held there are skipped: the request itself touches them. `visit` gets
   * each entry and how much of it is resident, until it returns false; nothing for a KV not
   * known.
   */
  private lruWalk(r: number, occupied: number, chains: readonly PrefixChain[], visit: (e: number, resident: number) => boolean): void {
    const { newest, heldStart, heldOf } = this.byReplica;
    const held = heldOf[r]!;
    const own = new Set(this.chainEntries(r, chains));
    const start = heldStart[r]!;
    const cut = start === NIL ? newest[r]! : this.prev[start]!;
    if (cut !== NIL && occupied > held && !own.has(cut) && !visit(cut, Math.min(this.delta[cut]!, occupied - held))) return;
    for (let e = start; e !== NIL; e = this.next[e]!) if (!own.has(e) && !visit(e, this.delta[e]!)) break;
  }

  /** What `chars` new characters would push out of a replica's full card (`lruWalk`'s order); `visit` gets each entry and how much of it goes. */
  private evictions(replica: string, chars: number, chains: readonly PrefixChain[], visit: (e: number, lost: number) => void): void {
    const r = this.byReplica.ids.get(replica);
    const card = this.occupancy(r);
    if (!card) return;
    let over = card.occupied + chars - card.budget;
    if (over <= 0) return;
    this.lruWalk(r!, card.occupied, chains, (e, resident) => {
      const lost = Math.min(resident, over);
      over -= lost;
      visit(e, lost);
      return over > 0;
    });
  }

  /**
   * How far back one LRU cache holding all of `replicas`' KV would reach to make room for
   * `chars` new characters: the last use (ms) of the newest entry it would push out, taking
   * the fleet's entries oldest first across cards; -Infinity when it has room (or a card's KV
   * is not known: the pool's room is not either).
   */
  pooledReach(replicas: readonly string[], chars: number, chains: readonly PrefixChain[]): number {
    const cards: { r: number; occupied: number }[] = [];
    let over = chars;
    for (const name of replicas) {
      const r = this.byReplica.ids.get(name);
      const card = this.occupancy(r);
      if (!card) return -Infinity;
      cards.push({ r: r!, occupied: card.occupied });
      over += card.occupied - card.budget;
    }
    if (over <= 0) return -Infinity;
    // No card gives up more than `over`: each one's oldest that much, merged by last use.
    const oldest: { last: number; resident: number }[] = [];
    for (const { r, occupied } of cards) {
      let taken = 0;
      this.lruWalk(r, occupied, chains, (e, resident) => {
        oldest.push({ last: this.last[e]!, resident });
        return (taken += resident) < over;
      });
    }
    oldest.sort((a, b) => a.last - b.last);
    let left = over;
    for (const { last, resident } of oldest) if ((left -= resident) <= 0) return last;
    return oldest.at(-1)?.last ?? -Infinity;
  }

  /**
   * The characters `chars` new characters would push out of a replica's full card that were
   * used after `keepSince` (ms): what one cache of every card's KV would still keep when it
   * reaches no further back than `keepSince` (`pooledReach`; see Router's `displaces`).
   */
  displaces(replica: string, chars: number, chains: readonly PrefixChain[], keepSince = -Infinity): number {
    let kept = 0;
    this.evictions(replica, chars, chains, (e, lost) => {
      if (this.last[e]! > keepSince) kept += lost;
    });
    return kept;
  }

  /** The entries replica `r` has of `chains`' links, each chain's from its first link until one is missing. */
  private chainEntries(r: number, chains: readonly PrefixChain[]): number[] {
    const out: number[] = [];
    for (const chain of chains) {
      for (let i = 0; i < chain.length; i++) {
        const e = this.find(chain.lo[i]!, chain.hi[i]!, r);
        if (e === NIL) break;
        out.push(e);
      }
    }
    return out;
  }

  /**
   * The longest prefix of `chain` that `replica` is remembered to have been sent, held within
   * its budget or not: what an engine that kept more than the budget says could deliver.
   */
  matchRemembered(chain: PrefixChain, replica: string): PrefixMatch {
    return this.longest(chain, replica, false);
  }

  /** The longest prefix of `chain` with an entry for `replica`: held within its budget (`heldOnly`) or only remembered. */
  private longest(chain: PrefixChain, replica: string, heldOnly: boolean): PrefixMatch {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined || this.byReplica.entriesOf[r] === 0) return { replica, depth: 0, chars: 0, lastUsed: 0, commit: 0 };
    // Entries are prefix-closed per replica (held ones too): links [0, lo) have one, links [hi, n) do not.
    let lo = 0;
    let hi = chain.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const e = this.find(chain.lo[mid]!, chain.hi[mid]!, r);
      if (heldOnly ? this.isHeld(e) : e !== NIL) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0) return { replica, depth: 0, chars: 0, lastUsed: 0, commit: 0 };
    const deepest = this.find(chain.lo[lo - 1]!, chain.hi[lo - 1]!, r);
    return { replica, depth: lo, chars: chain.ends[lo - 1]!, lastUsed: this.last[deepest]!, commit: this.commit[deepest]! };
  }

  /** A replica's budget in characters (its KV), or undefined for none (only the global bound). */
  setBudget(replica: string, chars: number | undefined): void {
    const r = this.byReplica.idOf(replica);
    this.byReplica.budgetOf[r] = chars === undefined || !(chars > 0) ? Infinity : chars;
    this.enforceBounds(r);
  }

  /** Apply changed options (config reload): bounds now, a changed window on the next read. */
  configure(options: PrefixIndexOptions): void {
    const windowChanged = options.windowMs !== this.options.windowMs;
    this.options = { ...options };
    if (windowChanged) this.windowSince = Infinity; // forces a rebuild on the next read
    for (let r = 0; r < this.byReplica.names.length; r++) this.enforceBounds(r);
  }

  /** Characters of distinct prefixes a replica is believed to hold (within its budget; shared prefixes once). */
  workingSetChars(replica: string): number {
    const r = this.byReplica.ids.get(replica);
    return r === undefined ? 0 : this.byReplica.heldOf[r]!;
  }

  replicaStats(replica: string): ReplicaIndexStats {
    const { ids, charsOf, entriesOf, tipsOf, heldOf } = this.byReplica;
    const r = ids.get(replica);
    if (r === undefined) return { chars: 0, entries: 0, tips: 0, heldChars: 0 };
    return { chars: charsOf[r]!, entries: entriesOf[r]!, tips: tipsOf[r]!, heldChars: heldOf[r]! };
  }

  /**
   * The active working set in characters: distinct prefixes used within the window that
   * belong to a conversation or were reused — per replica, and for the whole fleet with a
   * prefix held on several replicas counted once. A one-shot's own text, never sent again,
   * occupies the cache only until evicted and is not what makes a card thrash.
   */
  activeWorkingSet(now: number): { perReplica: Map<string, number>; fleet: number } {
    const { names, activeOf } = this.byReplica;
    this.advance(now);
    const perReplica = new Map<string, number>();
    for (let r = 0; r < names.length; r++) if (activeOf[r]! > 0) perReplica.set(names[r]!, activeOf[r]!);
    return { perReplica, fleet: this.fleet.total };
  }

  /** Move the capacity window to end at `now` (cheap: only entries that left it are visited). */
  advance(now: number): void {
    const since = now - this.options.windowMs;
    if (since < this.windowSince) this.rebuildWindow(since);
    else this.advanceWindow(since);
  }

  /** Prompt tips (conversations and one-shots) a replica used within the window, as of the last `advance`: walks the window. */
  windowTips(replica: string): number {
    const r = this.byReplica.ids.get(replica);
    if (r === undefined) return 0;
    let tips = 0;
    for (let e = this.byReplica.windowStart[r]!; e !== NIL; e = this.next[e]!) if (this.children[e] === 0) tips++;
    return tips;
  }

  /** Characters a replica has used within the window, as of the last `advance`. */
  recentChars(replica: string): number {
    const r = this.byReplica.ids.get(replica);
    return r === undefined ? 0 : this.byReplica.recentOf[r]!;
  }

  // --- snapshots (routing.state_file, a cluster's catch-up; the format: ./prefix-snapshot.ts) --

  /** Every entry, each replica's oldest first, so `restore` rebuilds the same LRU order. */
  snapshot(): Uint8Array {
    const { names, head } = this.byReplica;
    const out = new SnapshotWriter(names, this.count);
    const position = new Int32Array(this.highWater).fill(NIL);
    let p = 0;
    for (let r = 0; r < names.length; r++) for (let e = head[r]!; e !== NIL; e = this.next[e]!) position[e] = p++;
    for (let r = 0; r < names.length; r++) {
      for (let e = head[r]!; e !== NIL; e = this.next[e]!) {
        const parent = this.parent[e] === NIL ? NIL : position[this.parent[e]!]!;
        out.add(this.lo[e]!, this.hi[e]!, r, this.flags[e]! & PERSISTED, this.delta[e]!, this.tail[e]!, this.last[e]!, parent, this.commit[e]!);
      }
    }
    return out.bytes();
  }

  /**
   * Load a snapshot's entries for the replicas `keep` accepts. Every record is checked; one
   * that is malformed, or whose parent is missing, newer-ordered or dropped, is skipped and
   * counted (with its descendants), so what is loaded stays prefix-closed.
   *
   * `clock`: this index's time now, and when the snapshot was taken by the clock that wrote
   * it (another instance's). Each entry is then as old here as it was there, and never
   * newer than now: a snapshot from a clock ahead cannot pin entries in the future, where
   * `evict` would never reach them.
   */
  restore(bytes: Uint8Array, keep: (replica: string) => boolean, clock?: { now: number; takenAt?: number }): { restored: number; skipped: number } {
    const snap = new SnapshotReader(bytes);
    const localTime = (last: number) => {
      if (!clock) return last;
      const t = clock.takenAt === undefined ? last : clock.now - Math.max(0, clock.takenAt - last);
      return Math.min(t, clock.now);
    };
    const records = snap.records;
    const { load, dropped } = snap.wellFormed(keep, PERSISTED);
    let skipped = snap.missing + dropped;

    let restored = 0;
    // One allocation for all of them: doubling step by step would leave every smaller
    // generation of the arrays behind as garbage the process keeps (RSS).
    if (this.highWater + records > this.capacity) this.grow(this.highWater + records);
    const created = new Int32Array(records).fill(NIL);
    // Entries this index already had (restoring onto a live index: the cluster's catch-up).
    const existed = new Uint8Array(records);
    for (let i = 0; i < records; i++) {
      if (!load[i]) continue;
      const r = this.byReplica.idOf(snap.names[snap.replica(i)]!);
      const lo = snap.lo(i);
      const hi = snap.hi(i);
      const newest = this.byReplica.newest[r]!;
      const at = Math.max(localTime(snap.last(i)), newest === NIL ? 0 : this.last[newest]!);
      const commit = snap.commit(i);
      const found = this.find(lo, hi, r);
      if (found !== NIL) {
        // Known already: it takes the record's place in the order, so the restored children
        // hang from it and stay older than their parent (what eviction and match rely on).
        skipped++;
        existed[i] = 1;
        this.flags[found]! |= snap.flags(i);
        this.unlink(found);
        this.last[found] = at;
        this.commit[found] = commit;
        this.append(found);
        created[i] = found;
        continue;
      }
      const e = this.create(lo, hi, r, snap.delta(i), NIL);
      this.flags[e]! |= snap.flags(i);
      this.tail[e] = snap.tail(i);
      this.last[e] = at;
      this.commit[e] = commit;
      this.append(e);
      created[i] = e;
      restored++;
    }
    // Parents come after their children: link them once all exist.
    for (let i = 0; i < records; i++) {
      const e = created[i]!;
      if (e === NIL || existed[i]) continue;
      const parentAt = snap.parent(i);
      const p = parentAt === NIL ? NIL : created[parentAt]!;
      if (p === NIL) continue;
      this.parent[e] = p;
      if (this.children[p]!++ === 0) this.byReplica.tipsOf[this.rid[p]!]!--;
    }
    this.windowSince = Infinity;
    for (let r = 0; r < this.byReplica.names.length; r++) this.enforceBounds(r);
    return { restored, skipped };
  }

  // --- internals --------------------------------------------------------------------------

  private isHeld(e: number): boolean {
    return e !== NIL && (this.flags[e]! & HELD) !== 0;
  }

  private slotOf(lo: number, r: number): number {
    return (lo ^ Math.imul(r + 1, 0x9e3779b1)) & this.mask;
  }

  private find(lo: number, hi: number, r: number): number {
    if (this.count === 0) return NIL;
    for (let s = this.slotOf(lo, r); ; s = (s + 1) & this.mask) {
      const e = this.slots[s]! - 1;
      if (e < 0) return NIL;
      if (this.lo[e] === lo && this.hi[e] === hi && this.rid[e] === r) return e;
    }
  }

  private create(lo: number, hi: number, r: number, delta: number, parent: number): number {
    const { charsOf, entriesOf, tipsOf } = this.byReplica;
    if (this.freeList === NIL && this.highWater === this.capacity) this.grow();
    let e: number;
    if (this.freeList !== NIL) {
      e = this.freeList;
      this.freeList = this.next[e]!;
    } else e = this.highWater++;
    this.lo[e] = lo;
    this.hi[e] = hi;
    this.rid[e] = r;
    this.flags[e] = LIVE;
    this.delta[e] = delta;
    this.tail[e] = 0;
    this.last[e] = 0;
    this.commit[e] = 0;
    this.parent[e] = parent;
    this.children[e] = 0;
    this.prev[e] = NIL;
    this.next[e] = NIL;
    let s = this.slotOf(lo, r);
    while (this.slots[s] !== 0) s = (s + 1) & this.mask;
    this.slots[s] = e + 1;
    this.count++;
    charsOf[r]! += delta;
    entriesOf[r]!++;
    tipsOf[r]!++;
    if (parent !== NIL && this.children[parent]!++ === 0) tipsOf[r]!--;
    return e;
  }

  private remove(e: number): void {
    const { charsOf, entriesOf, tipsOf, heldStart, heldOf, windowStart, recentOf } = this.byReplica;
    const r = this.rid[e]!;
    if (this.flags[e]! & COUNTED) this.uncount(e);
    if (this.flags[e]! & IN_WINDOW) recentOf[r]! -= this.delta[e]!;
    if (this.flags[e]! & HELD) heldOf[r]! -= this.delta[e]!;
    if (heldStart[r] === e) heldStart[r] = this.next[e]!;
    if (windowStart[r] === e) windowStart[r] = this.next[e]!;
    if (this.flags[e]! & LINKED) this.unlink(e);
    this.deleteSlot(e);
    this.count--;
    charsOf[r]! -= this.delta[e]!;
    entriesOf[r]!--;
    if (this.children[e] === 0) tipsOf[r]!--;
    const p = this.parent[e]!;
    if (p !== NIL && --this.children[p]! === 0) tipsOf[r]!++;
    this.flags[e] = 0;
    this.next[e] = this.freeList;
    this.freeList = e;
  }

  private deleteSlot(e: number): void {
    let i = this.slotOf(this.lo[e]!, this.rid[e]!);
    while (this.slots[i] !== e + 1) i = (i + 1) & this.mask;
    this.slots[i] = 0;
    // Backward-shift deletion: pull later members of the probe run into the hole.
    for (let j = (i + 1) & this.mask; this.slots[j] !== 0; j = (j + 1) & this.mask) {
      const x = this.slots[j]! - 1;
      const k = this.slotOf(this.lo[x]!, this.rid[x]!);
      const between = i <= j ? i < k && k <= j : i < k || k <= j;
      if (between) continue;
      this.slots[i] = this.slots[j]!;
      this.slots[j] = 0;
      i = j;
    }
  }

  private append(e: number): void {
    const { head, newest, heldStart, heldOf } = this.byReplica;
    const r = this.rid[e]!;
    const tail = newest[r]!;
    this.prev[e] = tail;
    this.next[e] = NIL;
    if (tail === NIL) head[r] = e;
    else this.next[tail] = e;
    newest[r] = e;
    this.flags[e]! |= LINKED;
    if (!(this.flags[e]! & HELD)) {
      this.flags[e]! |= HELD;
      heldOf[r]! += this.delta[e]!;
      if (heldStart[r] === NIL) heldStart[r] = e;
    }
  }

  private unlink(e: number): void {
    const { head, newest, heldStart, windowStart } = this.byReplica;
    const r = this.rid[e]!;
    if (windowStart[r] === e) windowStart[r] = this.next[e] === NIL ? e : this.next[e]!;
    if (heldStart[r] === e) heldStart[r] = this.next[e] === NIL ? e : this.next[e]!;
    const p = this.prev[e]!;
    const n = this.next[e]!;
    if (p === NIL) head[r] = n;
    else this.next[p] = n;
    if (n === NIL) newest[r] = p;
    else this.prev[n] = p;
    this.flags[e]! &= ~LINKED;
  }

  /** `e` was just made the newest entry of its replica: it is inside the window. */
  private enterWindow(e: number): void {
    const { windowStart, recentOf } = this.byReplica;
    const r = this.rid[e]!;
    if (windowStart[r] === NIL) windowStart[r] = e;
    if (!(this.flags[e]! & IN_WINDOW)) recentOf[r]! += this.delta[e]!;
    const f = (this.flags[e]! |= IN_WINDOW);
    if (f & PERSISTED && !(f & COUNTED)) this.count1(e);
  }

  private count1(e: number): void {
    this.flags[e]! |= COUNTED;
    this.byReplica.activeOf[this.rid[e]!]! += this.delta[e]!;
    this.fleet.add(this.lo[e]!, this.hi[e]!, this.delta[e]!);
  }

  private uncount(e: number): void {
    this.flags[e]! &= ~COUNTED;
    this.byReplica.activeOf[this.rid[e]!]! -= this.delta[e]!;
    this.fleet.remove(this.lo[e]!, this.hi[e]!, this.delta[e]!);
  }

  private advanceWindow(since: number): void {
    const { names, windowStart, recentOf } = this.byReplica;
    this.windowSince = since;
    for (let r = 0; r < names.length; r++) {
      let e = windowStart[r]!;
      for (; e !== NIL && this.last[e]! < since; e = this.next[e]!) {
        if (this.flags[e]! & COUNTED) this.uncount(e);
        this.flags[e]! &= ~IN_WINDOW;
        recentOf[r]! -= this.delta[e]!;
      }
      windowStart[r] = e;
    }
  }

  private rebuildWindow(since: number): void {
    const { names, head, windowStart, activeOf, recentOf } = this.byReplica;
    this.windowSince = since;
    this.fleet.clear();
    for (let r = 0; r < names.length; r++) {
      activeOf[r] = 0;
      recentOf[r] = 0;
      windowStart[r] = NIL;
      for (let e = head[r]!; e !== NIL; e = this.next[e]!) {
        this.flags[e]! &= ~(IN_WINDOW | COUNTED);
        if (this.last[e]! < since) continue;
        if (windowStart[r] === NIL) windowStart[r] = e;
        this.flags[e]! |= IN_WINDOW;
        recentOf[r]! += this.delta[e]!;
        if (this.flags[e]! & PERSISTED) this.count1(e);
      }
    }
  }

  /**
   * What the card holds is the newest run of its list that fits its budget: older entries
   * are remembered (they are still demand, which the capacity figures need) but no longer
   * matched. A larger budget takes older entries back in.
   */
  private enforceBounds(r: number): void {
    const { names, head, newest, budgetOf, heldStart, heldOf } = this.byReplica;
    const budget = budgetOf[r]!;
    for (let e = heldStart[r]!; heldOf[r]! > budget && e !== NIL; e = this.next[e]!) {
      this.flags[e]! &= ~HELD;
      heldOf[r]! -= this.delta[e]!;
      heldStart[r] = this.next[e]!;
    }
    for (let e = heldStart[r] === NIL ? newest[r]! : this.prev[heldStart[r]!]!; e !== NIL; e = this.prev[e]!) {
      if (heldOf[r]! + this.delta[e]! > budget) break;
      this.flags[e]! |= HELD;
      heldOf[r]! += this.delta[e]!;
      heldStart[r] = e;
    }
    while (this.count > this.options.maxEntries) {
      let oldest = NIL;
      for (let q = 0; q < names.length; q++) {
        const h = head[q]!;
        if (h !== NIL && (oldest === NIL || this.last[h]! < this.last[oldest]!)) oldest = h;
      }
      if (oldest === NIL) break;
      this.remove(oldest);
    }
  }

  private grow(atLeast = 0): void {
    let capacity = Math.max(MIN_CAPACITY, this.capacity * 2);
    while (capacity < atLeast) capacity *= 2;
    const copy = <T extends Uint8Array | Uint16Array | Uint32Array | Int32Array | Float64Array>(from: T, make: (n: number) => T): T => {
      const to = make(capacity);
      to.set(from);
      return to;
    };
    this.lo = copy(this.lo, (n) => new Uint32Array(n));
    this.hi = copy(this.hi, (n) => new Uint32Array(n));
    this.rid = copy(this.rid, (n) => new Uint16Array(n));
    this.flags = copy(this.flags, (n) => new Uint8Array(n));
    this.delta = copy(this.delta, (n) => new Uint32Array(n));
    this.tail = copy(this.tail, (n) => new Uint32Array(n));
    this.last = copy(this.last, (n) => new Float64Array(n));
    this.commit = copy(this.commit, (n) => new Uint32Array(n));
    this.parent = copy(this.parent, (n) => new Int32Array(n));
    this.children = copy(this.children, (n) => new Int32Array(n));
    this.prev = copy(this.prev, (n) => new Int32Array(n));
    this.next = copy(this.next, (n) => new Int32Array(n));
    this.capacity = capacity;
    this.slots = new Int32Array(capacity * 2);
    this.mask = capacity * 2 - 1;
    // Every allocated entry, listed or not (a chain being recorded is not listed yet).
    for (let e = 0; e < this.highWater; e++) {
      if (!(this.flags[e]! & LIVE)) continue;
      let s = this.slotOf(this.lo[e]!, this.rid[e]!);
      while (this.slots[s] !== 0) s = (s + 1) & this.mask;
      this.slots[s] = e + 1;
    }
  }
}

/** Each replica's columns, indexed by its id (an entry's `rid`): its LRU list's ends, its totals, its budget, where its held run and its part of the window start. */
class ReplicaColumns {
  readonly ids = new Map<string, number>();
  readonly names: string[] = [];
  /** Its LRU list's oldest and newest entries. */
  readonly head: number[] = [];
  readonly newest: number[] = [];
  readonly charsOf: number[] = [];
  readonly entriesOf: number[] = [];
  readonly tipsOf: number[] = [];
  readonly budgetOf: number[] = [];
  /** The oldest entry still within its card's budget, and the characters from it to the newest. */
  readonly heldStart: number[] = [];
  readonly heldOf: number[] = [];
  /** The oldest entry inside the capacity window. */
  readonly windowStart: number[] = [];
  readonly activeOf: number[] = [];
  /** Characters of entries inside the window, persisted or not (what a card is busy holding). */
  readonly recentOf: number[] = [];

  /** The replica's id, given (with empty columns and no budget) the first time it is named. */
  idOf(replica: string): number {
    let r = this.ids.get(replica);
    if (r !== undefined) return r;
    r = this.names.length;
    if (r >= 0xffff) throw new RangeError("more than 65,535 replica names");
    this.ids.set(replica, r);
    this.names.push(replica);
    this.head.push(NIL);
    this.newest.push(NIL);
    this.charsOf.push(0);
    this.entriesOf.push(0);
    this.tipsOf.push(0);
    this.budgetOf.push(Infinity);
    this.heldStart.push(NIL);
    this.heldOf.push(0);
    this.windowStart.push(NIL);
    this.activeOf.push(0);
    this.recentOf.push(0);
    return r;
  }
}

/** A multiset of 64-bit hashes with the characters each stands for: the fleet's distinct total. */
class HashCounts {
  private keysLo = new Uint32Array(0);
  private keysHi = new Uint32Array(0);
  /** How many replicas count the hash (at most one per replica: replica ids are 16-bit). */
  private counts = new Uint16Array(0);
  private mask = -1;
  private size = 0;
  total = 0;

  memoryBytes(): number {
    return this.counts.length * 10;
  }

  add(lo: number, hi: number, chars: number): void {
    if ((this.size + 1) * 2 > this.counts.length) this.resize(Math.max(1024, this.counts.length * 2));
    let s = lo & this.mask;
    while (this.counts[s] !== 0) {
      if (this.keysLo[s] === lo && this.keysHi[s] === hi) {
        this.counts[s]!++;
        return;
      }
      s = (s + 1) & this.mask;
    }
    this.keysLo[s] = lo;
    this.keysHi[s] = hi;
    this.counts[s] = 1;
    this.size++;
    this.total += chars;
  }

  remove(lo: number, hi: number, chars: number): void {
    if (this.size === 0) return;
    let i = lo & this.mask;
    while (this.counts[i] !== 0 && (this.keysLo[i] !== lo || this.keysHi[i] !== hi)) i = (i + 1) & this.mask;
    if (this.counts[i] === 0) return;
    if (--this.counts[i]! > 0) return;
    this.size--;
    this.total -= chars;
    for (let j = (i + 1) & this.mask; this.counts[j] !== 0; j = (j + 1) & this.mask) {
      const k = this.keysLo[j]! & this.mask;
      const between = i <= j ? i < k && k <= j : i < k || k <= j;
      if (between) continue;
      this.keysLo[i] = this.keysLo[j]!;
      this.keysHi[i] = this.keysHi[j]!;
      this.counts[i] = this.counts[j]!;
      this.counts[j] = 0;
      i = j;
    }
  }

  clear(): void {
    this.counts.fill(0);
    this.size = 0;
    this.total = 0;
  }

  private resize(capacity: number): void {
    const { keysLo, keysHi, counts } = this;
    this.keysLo = new Uint32Array(capacity);
    this.keysHi = new Uint32Array(capacity);
    this.counts = new Uint16Array(capacity);
    this.mask = capacity - 1;
    for (let i = 0; i < counts.length; i++) {
      if (counts[i] === 0) continue;
      let s = keysLo[i]! & this.mask;
      while (this.counts[s] !== 0) s = (s + 1) & this.mask;
      this.keysLo[s] = keysLo[i]!;
      this.keysHi[s] = keysHi[i]!;
      this.counts[s] = counts[i]!;
    }
  }
}

export { chainChars };
