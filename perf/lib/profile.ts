/**
 * Where a CPU profile's samples go (the .cpuprofile that `bun --cpu-prof` writes: Chrome's
 * format, a call tree of nodes and a list of sampled leaf nodes). Samples are counted, not
 * weighted by their time deltas: a sample taken just after the process sat idle carries the
 * idle time in its delta, which puts seconds on whatever native call ran first (Bun's own
 * markdown summary shows `URL` as a fifth of the time that way).
 *
 * Three views: by category (what the router is doing: reading the body, hashing, relaying,
 * logging, …, decided by ordered rules over each sample's stack), by the nearest project
 * function (a native call's samples go to the project code that made it), and by
 * non-project leaf (native code, Bun's internal JS, node_modules) with its project caller.
 * Stacks after an `await` start at the root, so async callers are lost; the rules only
 * look at what the stack holds.
 */

export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  samples: number[];
  timeDeltas?: number[];
}

export interface Frame {
  name: string;
  /** Path relative to the project root for project files; "" for native code, Bun internals and node_modules. */
  file: string;
  line: number;
}

export interface Share {
  key: string;
  samples: number;
  share: number;
}

export interface ProfileSummary {
  samples: number;
  byCategory: Share[];
  byFunction: Share[];
  nativeLeaves: Share[];
}

type Rule = [category: string, test: (stack: readonly Frame[], project: Frame | undefined) => boolean];

const inFile = (re: RegExp) => (stack: readonly Frame[]) => stack.some((f) => re.test(f.file));
const leafIs = (re: RegExp, caller: RegExp) => (stack: readonly Frame[], project: Frame | undefined) =>
  stack[0]!.file === "" && re.test(stack[0]!.name) && project !== undefined && caller.test(project.name);

/** First match wins: the log line and telemetry run inside the relay's last pull, so they come first. */
export const CATEGORY_RULES: Rule[] = [
  ["log line (src/log.ts)", inFile(/^src\/log\.ts$/)],
  ["telemetry: metrics, recent requests (src/ops)", inFile(/^src\/ops\//)],
  ["response tap: usage from the body (tap.ts, sse.ts)", inFile(/^src\/(proxy\/tap|engines\/sse)\.ts$/)],
  ["routing: route, commit, feedback, index (src/route)", inFile(/^src\/route\/(router|prefix|policy|policies\/)/)],
  ["identity: shape and chain hashing", inFile(/^src\/route\/(shape|chain|hash)\.ts$/)],
  ["body read (readBody)", (s) => s.some((f) => f.name === "readBody")],
  ["JSON.parse of the request", leafIs(/^parse$/, /^forward$/)],
  ["upstream fetch() call", leafIs(/^fetch$/, /^(attempt|fetchFreshOnReset)$/)],
  ["headers copied (upstreamHeaders, response headers)", (s, p) => s.some((f) => f.name === "upstreamHeaders") || leafIs(/^(Headers|forEach|append|set|get)$/, /^(attempt|answer)$/)(s, p)],
  [
    "relay: ReadableStream wrap, pull, hand-off to the socket",
    (s) => s.some((f) => /^(onRS|onReadStream|readableStream|ReadableStream|getReader$|drain$|read$|pull$|start$|onNative)/.test(f.name) && (f.file === "" || f.file === "src/proxy/relay.ts")),
  ],
  ["request bookkeeping: abort listeners, in-flight, prefill (proxy.ts, src/fleet)", (s) => inFile(/^src\/fleet\//)(s) || s.some((f) => /^(addEventListener|removeEventListener|AbortController|finish)$/.test(f.name))],
  ["HTTP entry: server.ts, app.ts (URL, auth, routes)", inFile(/^src\/(proxy\/(server|app)|commands\/serve)\.ts$/)],
  ["other src/proxy code", inFile(/^src\/proxy\//)],
  ["other project code", (s) => s.some((f) => f.file.startsWith("src/"))],
  ["no project frame: Bun internals, GC, native", () => true],
];

/** Frames of each node, leaf first, with project paths made relative to `root`. */
export function stacksOf(profile: CpuProfile, root: string): Map<number, Frame[]> {
  const parent = new Map<number, number>();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stacks = new Map<number, Frame[]>();
  for (const n of profile.nodes) {
    const frames: Frame[] = [];
    for (let id: number | undefined = n.id; id !== undefined; id = parent.get(id)) {
      const f = byId.get(id)!.callFrame;
      if (f.functionName === "(root)") break;
      // Bun writes file:// URLs (or plain paths, in older versions) for user code.
      const path = f.url.startsWith("file://") ? decodeURIComponent(f.url.slice("file://".length)) : f.url;
      frames.push({ name: f.functionName || "(anonymous)", file: path.startsWith(root) && !path.startsWith(`${root}node_modules/`) ? path.slice(root.length) : "", line: f.lineNumber + 1 });
    }
    stacks.set(n.id, frames);
  }
  return stacks;
}

export function summarizeProfile(profile: CpuProfile, root: string, rules: Rule[] = CATEGORY_RULES): ProfileSummary {
  const stacks = stacksOf(profile, root.endsWith("/") ? root : `${root}/`);
  const category = new Map<string, number>();
  const fn = new Map<string, number>();
  const native = new Map<string, number>();
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  let total = 0;
  for (const id of profile.samples) {
    const stack = stacks.get(id) ?? [];
    if (stack.length === 0) continue; // the root itself: nothing was running
    total++;
    const project = stack.find((f) => f.file !== "");
    bump(category, rules.find(([, test]) => test(stack, project))![0]);
    bump(fn, project ? `${project.file} ${project.name}` : `(no project frame) ${stack[0]!.name}`);
    if (stack[0]!.file === "") bump(native, `${stack[0]!.name} ← ${project ? `${project.file} ${project.name}` : "(no project frame)"}`);
  }
  const list = (m: Map<string, number>): Share[] =>
    [...m].map(([key, samples]) => ({ key, samples, share: total > 0 ? samples / total : 0 })).sort((a, b) => b.samples - a.samples || a.key.localeCompare(b.key));
  return { samples: total, byCategory: list(category), byFunction: list(fn), nativeLeaves: list(native) };
}
