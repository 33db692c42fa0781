/**
 * Where a measurement ran: date, CPU model, cores, load average, and the tools' versions,
 * so a figure is never quoted without its machine. The parsers are pure; `readMachine`
 * reads /proc and asks the tools.
 */
import { cpus, release } from "node:os";
import { readFileSync } from "node:fs";

export interface Machine {
  /** ISO time the run started. */
  date: string;
  cpu: string;
  cores: number;
  /** 1, 5 and 15 minute load averages. */
  load: [number, number, number];
  kernel: string;
  bun: string;
}

export function parseCpuModel(cpuinfo: string): string {
  return /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1]?.trim() ?? "unknown CPU";
}

export function parseLoadavg(text: string): [number, number, number] {
  const [a, b, c] = text.trim().split(/\s+/).map(Number);
  return [a ?? NaN, b ?? NaN, c ?? NaN];
}

export function readLoadavg(): [number, number, number] {
  return parseLoadavg(readFileSync("/proc/loadavg", "utf8"));
}

export function readMachine(now = new Date()): Machine {
  let cpu = "unknown CPU";
  try {
    cpu = parseCpuModel(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    cpu = cpus()[0]?.model ?? cpu;
  }
  return { date: now.toISOString(), cpu, cores: cpus().length, load: readLoadavg(), kernel: release(), bun: Bun.version };
}

/** "AMD EPYC, 2 cores, load 4.16 / 6.78 / 6.14 (1 / 5 / 15 min)" */
export function describeMachine(m: Pick<Machine, "cpu" | "cores" | "load">): string {
  return `${m.cpu}, ${m.cores} cores, load ${m.load.map((x) => x.toFixed(2)).join(" / ")} (1 / 5 / 15 min)`;
}

/** The first line of a tool's version output (`nginx -v` writes to stderr), or undefined. */
export function toolVersion(cmd: string[]): string | undefined {
  try {
    const out = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
    const text = `${out.stdout.toString()}\n${out.stderr.toString()}`.trim();
    return text.split("\n").find((l) => l.trim())?.trim();
  } catch {
    return undefined;
  }
}
