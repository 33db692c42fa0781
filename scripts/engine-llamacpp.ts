/**
 * `npm run engine:llamacpp`: makes the real engine the system suite runs against, from
 * the npm registry alone, and keeps it in a cache directory named by llama.cpp's commit.
 *
 * - llama-server: llama.cpp's source from the pinned `node-llama-cpp` tarball
 *   (`npm pack`, which runs no install scripts; its llama/gitRelease.bundle cloned with
 *   git), built for the CPU only: Release, static libraries, no web UI, nothing fetched
 *   from the network, then stripped. About 17 minutes on 2 cores.
 * - the model: a tiny random-weight llama with the real Qwen2 tokenizer and Qwen2.5's chat
 *   template, written with the same source tree's gguf-py (scripts/llamacpp-tiny-model.py).
 *
 * Work already done is skipped: a part in the cache, or named by LLMROUTE_LLAMA_SERVER /
 * LLMROUTE_LLAMA_MODEL, is left alone. `--seed-from DIR` copies a prebuilt pair instead of
 * building, after checking that the binary names the pinned commit (CI seeds from
 * ../shared/engines/ when that exists).
 */
import { chmodSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync, closeSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  BUILD_COMMAND,
  commitOfVersion,
  isPinnedCommit,
  LLAMACPP_SHORT_COMMIT,
  LLAMACPP_SOURCE,
  locateLlamacppEngine,
  MODEL_FILE,
  SERVER_FILE,
  type EnginePart,
} from "./_llamacpp-engine.ts";

const USAGE = `usage: ${BUILD_COMMAND} [-- [--seed-from DIR] [--jobs N] [--keep-work]]

Builds llama.cpp's llama-server (commit ${LLAMACPP_SHORT_COMMIT}, from ${LLAMACPP_SOURCE.package}@${LLAMACPP_SOURCE.version} on npm)
and a tiny random-weight model into the engine cache, skipping what is already there.

  --seed-from DIR   copy ${SERVER_FILE} and ${MODEL_FILE} from DIR instead of building
                    (the binary must report commit ${LLAMACPP_SHORT_COMMIT})
  --jobs N          parallel compile jobs (default: the number of CPUs)
  --keep-work       keep the source and build tree (deleted once both parts are made)

Environment: LLMROUTE_ENGINE_CACHE (cache root), LLMROUTE_LLAMA_SERVER and
LLMROUTE_LLAMA_MODEL (use these files; nothing is made for a part they name).`;

/**
 * What the build asks cmake for. Only the CPU backend; static libraries so the binary
 * needs nothing of ours beside it; GGML_NATIVE off so a binary seeded from another
 * machine of the same kind runs; and nothing that downloads: LLAMA_USE_PREBUILT_UI
 * defaults ON and fetches the web UI (tools/ui/CMakeLists.txt), LLAMA_OPENSSL would want
 * libssl for HTTPS model downloads that a test never makes.
 */
const CMAKE_FLAGS = [
  "-DCMAKE_BUILD_TYPE=Release",
  "-DGGML_NATIVE=OFF",
  "-DBUILD_SHARED_LIBS=OFF",
  "-DLLAMA_OPENSSL=OFF",
  "-DLLAMA_USE_PREBUILT_UI=OFF",
  "-DLLAMA_BUILD_UI=OFF",
  "-DLLAMA_BUILD_TESTS=OFF",
];

const MODEL_SCRIPT = new URL("./llamacpp-tiny-model.py", import.meta.url).pathname;
const LOG = "engine:llamacpp:";

/** A failure the user can act on: printed as one message; exit 1, or 2 for a bad command line. */
class EngineError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

interface Manifest {
  commit: string;
  source: string;
  parts: Record<string, Record<string, unknown>>;
}

interface Options {
  seedFrom: string | null;
  jobs: number;
  keepWork: boolean;
}

function parseOptions(argv: string[]): Options | "help" {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        "seed-from": { type: "string" },
        jobs: { type: "string" },
        "keep-work": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new EngineError(`${(error as Error).message}\n\n${USAGE}`, 2);
  }
  const { values } = parsed;
  if (values.help) return "help";
  const jobs = values.jobs === undefined ? availableParallelism() : Number(values.jobs);
  if (!Number.isInteger(jobs) || jobs < 1) throw new EngineError(`--jobs must be a whole number of at least 1, got ${JSON.stringify(values.jobs)}`, 2);
  return { seedFrom: values["seed-from"] ? resolve(values["seed-from"]) : null, jobs, keepWork: values["keep-work"] ?? false };
}

function say(message: string): void {
  console.log(`${LOG} ${message}`);
}

/** Run a command; `quiet` captures its output and shows it only if it fails. */
async function run(cmd: string[], options: { cwd?: string; env?: Record<string, string>; quiet?: boolean } = {}): Promise<string> {
  const proc = Bun.spawn(cmd, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env },
    stdin: "ignore",
    stdout: options.quiet ? "pipe" : "inherit",
    stderr: options.quiet ? "pipe" : "inherit",
  });
  const [stdout, stderr, code] = await Promise.all([
    options.quiet ? new Response(proc.stdout as ReadableStream).text() : "",
    options.quiet ? new Response(proc.stderr as ReadableStream).text() : "",
    proc.exited,
  ]);
  if (code !== 0) {
    const output = `${stdout}${stderr}`.trim();
    throw new EngineError(`\`${cmd.join(" ")}\` failed (exit ${code})${output ? `:\n${output}` : "; its output is above"}`);
  }
  return stdout;
}

/** `--version` output (llama-server prints it on stderr), or an error saying the binary does not run. */
async function versionOf(server: string): Promise<string> {
  const proc = Bun.spawn([server, "--version"], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  const output = `${stdout}${stderr}`.trim();
  if (code !== 0) throw new EngineError(`\`${server} --version\` failed (exit ${code}): ${output || "no output"}`);
  return output;
}

async function requirePinnedVersion(server: string): Promise<string> {
  const version = await versionOf(server);
  const commit = commitOfVersion(version);
  if (!isPinnedCommit(commit)) {
    throw new EngineError(
      `${server} is llama.cpp ${commit ? `commit ${commit}` : "of an unknown commit"}, not ${LLAMACPP_SHORT_COMMIT} (${LLAMACPP_SOURCE.package}@${LLAMACPP_SOURCE.version}); its --version says:\n${version}`,
    );
  }
  return version.split("\n")[0]!;
}

/** Every tool the work needs that is missing, checked before anything starts, with the Debian package to install. */
async function requireTools(needServer: boolean, needModel: boolean): Promise<void> {
  const missing: { what: string; apt: string }[] = [];
  const need = (command: string, apt: string, alternatives: string[] = []) => {
    if (![command, ...alternatives].some((c) => Bun.which(c))) missing.push({ what: command, apt });
  };
  need("git", "git");
  need("tar", "tar");
  need("npm", "npm");
  if (needServer) {
    need("cmake", "cmake");
    if (!process.env.CXX) need("g++", "g++", ["c++", "clang++"]);
    if (!process.env.CC) need("gcc", "gcc", ["cc", "clang"]);
    need("make", "make");
    need("strip", "binutils");
  }
  if (needModel) {
    if (!Bun.which("python3")) missing.push({ what: "python3", apt: "python3" });
    else {
      const probe = Bun.spawnSync(["python3", "-c", "import numpy"], { stdout: "ignore", stderr: "ignore" });
      if (probe.exitCode !== 0) missing.push({ what: "numpy (python3 cannot import it)", apt: "python3-numpy" });
    }
  }
  if (missing.length > 0) {
    throw new EngineError(
      `missing ${missing.map((m) => m.what).join(", ")}. Install with \`apt-get install -y ${[...new Set(missing.map((m) => m.apt))].join(" ")}\` (Debian), then run \`${BUILD_COMMAND}\` again.`,
    );
  }
}

/**
 * One build per cache directory at a time: two would write the same work tree. A lock
 * left by a process that died is taken over.
 */
function lock(dir: string): () => void {
  const path = join(dir, ".lock");
  for (;;) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => rmSync(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const pid = Number(readFileSync(path, "utf8"));
      if (Number.isInteger(pid) && pid > 0 && alive(pid)) {
        throw new EngineError(`another ${BUILD_COMMAND} (pid ${pid}) is working in ${dir}; wait for it to finish, or remove ${path} if it is gone`);
      }
      rmSync(path, { force: true });
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function readManifest(dir: string): Manifest {
  const path = join(dir, "manifest.json");
  const fresh: Manifest = { commit: LLAMACPP_SOURCE.commit, source: `${LLAMACPP_SOURCE.package}@${LLAMACPP_SOURCE.version}`, parts: {} };
  if (!existsSync(path)) return fresh;
  try {
    return { ...fresh, ...(JSON.parse(readFileSync(path, "utf8")) as Manifest) };
  } catch {
    return fresh;
  }
}

function writeManifest(dir: string, manifest: Manifest): void {
  writeFileSync(join(dir, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
}

async function sha256(path: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  hasher.update(await Bun.file(path).arrayBuffer());
  return hasher.digest("hex");
}

/** Put a finished file in place in one step, so a cache entry is whole or absent. */
function install(partial: string, target: string, mode: number): void {
  chmodSync(partial, mode);
  renameSync(partial, target);
}

/** The git HEAD of `dir`, or null when it is not a finished clone. */
async function headOf(dir: string): Promise<string | null> {
  if (!existsSync(join(dir, ".git"))) return null;
  const proc = Bun.spawn(["git", "-C", dir, "rev-parse", "HEAD"], { stdout: "pipe", stderr: "ignore" });
  const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
  return code === 0 ? out.trim() : null;
}

/** llama.cpp's source tree at the pinned commit, from the npm tarball (reused when already cloned). */
async function fetchSource(work: string): Promise<string> {
  const src = join(work, "llama.cpp");
  if ((await headOf(src)) === LLAMACPP_SOURCE.commit) {
    say(`source: reusing ${src}`);
    return src;
  }
  rmSync(src, { recursive: true, force: true });
  const pack = join(work, "npm");
  rmSync(pack, { recursive: true, force: true });
  mkdirSync(pack, { recursive: true });
  const spec = `${LLAMACPP_SOURCE.package}@${LLAMACPP_SOURCE.version}`;
  say(`source: npm pack ${spec} (no install, no scripts)`);
  const packed = JSON.parse(await run(["npm", "pack", spec, "--pack-destination", pack, "--ignore-scripts", "--json"], { quiet: true, cwd: pack })) as {
    filename: string;
    integrity: string;
  }[];
  const tarball = join(pack, packed[0]!.filename);
  // npm checks the download against the registry's metadata; this checks the registry
  // still serves the tarball the pin was made from.
  const hasher = new Bun.CryptoHasher("sha512");
  hasher.update(await Bun.file(tarball).arrayBuffer());
  const integrity = `sha512-${hasher.digest("base64")}`;
  if (integrity !== LLAMACPP_SOURCE.integrity) {
    throw new EngineError(`${spec} from the registry has integrity ${integrity}, not the pinned ${LLAMACPP_SOURCE.integrity} (scripts/_llamacpp-engine.ts)`);
  }
  await run(["tar", "-xzf", tarball, "-C", pack, LLAMACPP_SOURCE.bundle], { quiet: true });
  say(`source: git clone ${LLAMACPP_SOURCE.bundle}`);
  await run(["git", "clone", "--quiet", join(pack, LLAMACPP_SOURCE.bundle), src], { quiet: true });
  const head = await headOf(src);
  if (head !== LLAMACPP_SOURCE.commit) {
    throw new EngineError(`the bundle in ${spec} checks out ${head}, not the pinned ${LLAMACPP_SOURCE.commit} (scripts/_llamacpp-engine.ts)`);
  }
  rmSync(pack, { recursive: true, force: true });
  return src;
}

async function makeModel(src: string, target: string, manifest: Manifest): Promise<void> {
  say(`model: writing ${MODEL_FILE} with ${join(src, "gguf-py")}`);
  const partial = `${target}.partial`;
  await run(["python3", MODEL_SCRIPT, "--llama-cpp", src, "--out", partial], {
    env: { PYTHONPATH: join(src, "gguf-py"), PYTHONDONTWRITEBYTECODE: "1" },
    quiet: true,
  });
  install(partial, target, 0o644);
  manifest.parts[MODEL_FILE] = { made: "written", script: "scripts/llamacpp-tiny-model.py", sha256: await sha256(target), bytes: statSync(target).size, at: new Date().toISOString() };
}

async function buildServer(src: string, work: string, target: string, jobs: number, manifest: Manifest): Promise<number> {
  const build = join(work, "build");
  const started = performance.now();
  say(`llama-server: cmake ${CMAKE_FLAGS.join(" ")}`);
  await run(["cmake", "-S", src, "-B", build, ...CMAKE_FLAGS]);
  say(`llama-server: building with ${jobs} job${jobs === 1 ? "" : "s"} (about 17 minutes on 2 cores)`);
  await run(["cmake", "--build", build, "--target", "llama-server", "-j", String(jobs)]);
  const partial = `${target}.partial`;
  copyFileSync(join(build, "bin", SERVER_FILE), partial);
  await run(["strip", partial], { quiet: true });
  chmodSync(partial, 0o755);
  const version = await requirePinnedVersion(partial);
  const seconds = Math.round((performance.now() - started) / 1000);
  install(partial, target, 0o755);
  manifest.parts[SERVER_FILE] = {
    made: "built",
    version,
    cmake: CMAKE_FLAGS,
    jobs,
    seconds,
    sha256: await sha256(target),
    bytes: statSync(target).size,
    at: new Date().toISOString(),
  };
  return seconds;
}

/** A prebuilt part in `dir`, checked: the binary must name the pinned commit, the model must be GGUF. */
async function checkSeed(dir: string, file: string): Promise<{ from: string; version?: string }> {
  const from = join(dir, file);
  if (!existsSync(from)) throw new EngineError(`--seed-from ${dir}: no ${file} there`);
  if (file === SERVER_FILE) return { from, version: await requirePinnedVersion(from) };
  const magic = Buffer.from(await Bun.file(from).slice(0, 4).arrayBuffer()).toString("latin1");
  if (magic !== "GGUF") throw new EngineError(`--seed-from ${dir}: ${file} is not a GGUF file`);
  return { from };
}

/** Copy the parts that are missing from `dir`, after checking all of them: a bad pair seeds nothing. */
async function seed(dir: string, parts: { part: EnginePart; file: string }[], manifest: Manifest): Promise<void> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new EngineError(`--seed-from ${dir}: no such directory`);
  const checked = [];
  for (const { part, file } of parts) checked.push({ part, file, ...(await checkSeed(dir, file)) });
  for (const { part, file, from, version } of checked) {
    const partial = `${part.path}.partial`;
    copyFileSync(from, partial);
    install(partial, part.path, file === SERVER_FILE ? 0o755 : 0o644);
    manifest.parts[file] = {
      made: "seeded",
      from,
      ...(version ? { version } : {}),
      sha256: await sha256(part.path),
      bytes: statSync(part.path).size,
      at: new Date().toISOString(),
    };
    say(`${file}: seeded from ${from}`);
  }
}

function describe(part: EnginePart, note: string): string {
  return `${part.path}  (${part.from === "env" ? `from ${part.variable}` : note})`;
}

async function main(argv: string[]): Promise<number> {
  const options = parseOptions(argv);
  if (options === "help") {
    console.log(USAGE);
    return 0;
  }
  const location = locateLlamacppEngine();
  for (const part of [location.server, location.model]) {
    if (part.from === "env" && !part.exists) {
      throw new EngineError(`${part.variable}=${part.path}: no such file. Point it at an existing file, or unset it to use the cache (${location.cacheDir}).`);
    }
  }
  const notes = new Map<EnginePart, string>([
    [location.server, "cached"],
    [location.model, "cached"],
  ]);
  const needServer = !location.server.exists;
  const needModel = !location.model.exists;

  if (needServer || needModel) {
    mkdirSync(location.cacheDir, { recursive: true });
    const unlock = lock(location.cacheDir);
    try {
      const manifest = readManifest(location.cacheDir);
      if (options.seedFrom) {
        const parts = [
          ...(needServer ? [{ part: location.server, file: SERVER_FILE }] : []),
          ...(needModel ? [{ part: location.model, file: MODEL_FILE }] : []),
        ];
        await seed(options.seedFrom, parts, manifest);
        if (needServer) notes.set(location.server, `seeded from ${options.seedFrom}`);
        if (needModel) notes.set(location.model, `seeded from ${options.seedFrom}`);
      } else {
        await requireTools(needServer, needModel);
        const work = join(location.cacheDir, "work");
        mkdirSync(work, { recursive: true });
        const src = await fetchSource(work);
        // The model first: it takes seconds, so a build that fails later still leaves it made.
        if (needModel) {
          await makeModel(src, location.model.path, manifest);
          writeManifest(location.cacheDir, manifest);
          notes.set(location.model, "written");
        }
        if (needServer) {
          const seconds = await buildServer(src, work, location.server.path, options.jobs, manifest);
          notes.set(location.server, `built in ${seconds} s`);
        }
        if (!options.keepWork) rmSync(work, { recursive: true, force: true });
      }
      writeManifest(location.cacheDir, manifest);
    } finally {
      unlock();
    }
  }

  say(`llama.cpp ${LLAMACPP_SHORT_COMMIT} (${LLAMACPP_SOURCE.package}@${LLAMACPP_SOURCE.version})`);
  console.log(`  ${SERVER_FILE}  ${describe(location.server, notes.get(location.server)!)}`);
  console.log(`  model         ${describe(location.model, notes.get(location.model)!)}`);
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  if (!(error instanceof EngineError)) throw error;
  console.error(`${LOG} error: ${error.message}`);
  process.exitCode = error.exitCode;
}
