/**
 * CPU accounting from /proc: a process's user + system time (its threads included, and its
 * children for nginx's master and worker), read before and after a run and divided by the
 * requests the run completed. Ticks are 1/CLK_TCK s (10 ms on Linux): a run must use a
 * second or so of CPU for the per-request figure to be good to a percent.
 */
import { readdirSync, readFileSync } from "node:fs";

export interface ProcStat {
  pid: number;
  ppid: number;
  /** utime + stime, in clock ticks. */
  ticks: number;
}

/** One /proc/<pid>/stat line. The command name sits in parentheses and may hold spaces or ")". */
export function parseProcStat(text: string): ProcStat {
  const close = text.lastIndexOf(")");
  if (close < 0) throw new Error(`not a /proc/<pid>/stat line: ${text.slice(0, 60)}`);
  const pid = Number(text.slice(0, text.indexOf("(")).trim());
  // After the name: state (field 3), ppid (4), … utime (14), stime (15).
  const rest = text.slice(close + 2).trim().split(/\s+/);
  const field = (n: number) => Number(rest[n - 3]);
  const stat = { pid, ppid: field(4), ticks: field(14) + field(15) };
  if (!Number.isInteger(stat.pid) || !Number.isFinite(stat.ticks)) throw new Error(`unreadable /proc/<pid>/stat line: ${text.slice(0, 60)}`);
  return stat;
}

/** CPU ticks of `root` and every process below it. */
export function treeTicks(root: number, stats: readonly ProcStat[]): number {
  const children = new Map<number, ProcStat[]>();
  for (const s of stats) children.set(s.ppid, [...(children.get(s.ppid) ?? []), s]);
  let ticks = 0;
  const seen = new Set<number>();
  const visit = (s: ProcStat) => {
    if (seen.has(s.pid)) return;
    seen.add(s.pid);
    ticks += s.ticks;
    for (const c of children.get(s.pid) ?? []) visit(c);
  };
  const top = stats.find((s) => s.pid === root);
  if (top) visit(top);
  return ticks;
}

/** Every process's stat (processes that vanish while being read are skipped). */
export function readProcStats(): ProcStat[] {
  const out: ProcStat[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      out.push(parseProcStat(readFileSync(`/proc/${name}/stat`, "utf8")));
    } catch {
      // gone between readdir and read
    }
  }
  return out;
}

/** Microseconds of CPU per request; NaN when no request completed. */
export function microsPerRequest(ticks: number, requests: number, hz: number): number {
  return requests > 0 ? (ticks / hz / requests) * 1e6 : NaN;
}

/** The machine's busy and total ticks from /proc/stat's first line (all CPUs). */
export function parseCpuTotals(procStat: string): { busy: number; total: number } {
  const line = procStat.split("\n").find((l) => l.startsWith("cpu "));
  if (!line) throw new Error("no cpu line in /proc/stat");
  // user nice system idle iowait irq softirq steal (guest time is already in user).
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.trim().split(/\s+/).slice(1, 9).map(Number) as number[];
  const idleAll = idle! + (iowait ?? 0);
  const busy = user! + nice! + system! + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0);
  return { busy, total: busy + idleAll };
}

/** Clock ticks per second (getconf CLK_TCK; 100 on every Linux this runs on). */
export function clockTicks(): number {
  const out = Bun.spawnSync(["getconf", "CLK_TCK"], { stdout: "pipe", stderr: "ignore" });
  const hz = Number(out.stdout.toString().trim());
  return hz > 0 ? hz : 100;
}
