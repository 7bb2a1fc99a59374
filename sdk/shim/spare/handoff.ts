/**
 * `start`'s side of the warm spare server: where a shim binary's spare waits for one
 * containerd, how `start` hands it a container, how the next spare is spawned, and the node-wide
 * counters (spares adopted, cold starts). The spare's own side is `./spare.ts`, which only the
 * spare process loads.
 *
 * A spare is keyed by the installed code (the launcher's text, which names the content-hashed
 * bundle and the V8 flags) and by containerd's address: a reinstalled shim never finds an older
 * spare, and two containerds on one node never share one. It is on for bundled launchers unless
 * `SKIFF_SPARE=0`; source launchers never use one (their code can change under the same text).
 *
 * The exchange on the spare's 0600 socket is JSON lines: the spare's hello (`{"pid":…,"codeId":…}`,
 * sent on accepting), `start`'s {@linkcode SpareHandoff} (sent on connecting, without waiting),
 * and the spare's answer (`{"ok":true,…}`) once it serves the container's socket. The
 * counters are kept by the servers themselves, off `start`'s path: an adopted spare counts
 * itself after answering, a cold server once it listens.
 *
 * @module
 */

import { sha256Hex } from "../boot/sha256.ts";
import { DEFAULT_SOCKET_DIR } from "../boot/socket_address.ts";
import { processStartTime } from "../../linux/proc_stat.ts";
import { mayRaisePriority, niceOf, setAutogroupNice } from "../../linux/nice.ts";

/** Where one shim binary's spare lives for one containerd, and how it behaves. */
export interface SpareConfig {
  /** The directory of this containerd's spares (0700). */
  dir: string;
  /** The spare's handoff socket. */
  socket: string;
  /** The lock a live (or loading) spare holds. */
  lock: string;
  /** The counters file of this launcher. */
  stats: string;
  /** The installed code's identity. */
  codeId: string;
  /** The launcher that runs this shim. */
  launcher: string;
  /** Seconds an unused spare waits before it exits. */
  idleSeconds: number;
}

/** What a spare must become: everything a server spawned by this `start` would have had. */
export interface SpareHandoff {
  /** The installed code's identity; a spare of other code refuses. */
  codeId: string;
  /** The server's flags (containerd's, plus the socket to serve). */
  flags: {
    namespace: string;
    id: string;
    address: string;
    publishBinary: string;
    debug: boolean;
    socket: string;
  };
  /** The working directory containerd gave `start` (the bundle). */
  bundle: string;
  /** `start`'s whole environment (containerd's `TTRPC_ADDRESS`, `GRPC_ADDRESS`, `NAMESPACE`, …). */
  env: Record<string, string>;
  /** runc options' `shim_cgroup`, when given. */
  shimCgroup?: string;
  /** The OOM score the server takes (containerd's plus one). */
  oomScore?: number;
  /** `start`'s nice value, which a cold server would have inherited. */
  nice?: number;
  /** containerd's process ({@linkcode containerdProcess}), for the next spare. */
  daemon?: string;
}

/** A spare's answer once it serves the container's socket. */
export interface Adopted {
  /** The spare's pid: the server's from now on. */
  pid: number;
  /** containerd's version as `[major, minor]`, when the spare asked its binary. */
  containerd?: [number, number];
}

/** coreutils' `nice`, which starts a spare at the lowest priority. */
const NICE = "/usr/bin/nice";

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Node-wide counters of one launcher under one containerd. */
export interface SpareStats {
  /** Starts that handed their container to a warm spare. */
  adopted: number;
  /** Starts that spawned a server and waited for it. */
  cold: number;
}

/** Default seconds an unused spare waits (`SKIFF_SPARE_IDLE_SECONDS`). */
export const DEFAULT_SPARE_IDLE_SECONDS = 600;

const OFF = /^(0|off|false|no)$/i;

/**
 * How long an unused spare waits: `SKIFF_SPARE_IDLE_SECONDS` when it is a positive number,
 * else {@linkcode DEFAULT_SPARE_IDLE_SECONDS}.
 *
 * @example Usage
 * ```ts
 * import { spareIdleSeconds } from "./handoff.ts";
 * console.assert(spareIdleSeconds(new Map([["SKIFF_SPARE_IDLE_SECONDS", "-1"]])) === 600);
 * ```
 */
export function spareIdleSeconds(
  env: { get(key: string): string | undefined } = Deno.env,
): number {
  const idle = Number(env.get("SKIFF_SPARE_IDLE_SECONDS") ?? DEFAULT_SPARE_IDLE_SECONDS);
  return Number.isFinite(idle) && idle > 0 ? idle : DEFAULT_SPARE_IDLE_SECONDS;
}

/** The launcher line that states its code identity (installShims writes it). */
const CODE_LINE = /^SKIFF_SHIM_CODE=([0-9a-f]{64})$/m;

/**
 * The code identity of an installed launcher, from its text: the `SKIFF_SHIM_CODE=` line that
 * `installShims` writes (the SHA-256 of the rest of the text, so that `start` reads it from its
 * environment instead of hashing the file), else the SHA-256 of the whole text.
 *
 * @example Usage
 * ```ts
 * import { launcherCodeId } from "./handoff.ts";
 * const id = "ab".repeat(32);
 * console.assert(launcherCodeId(new TextEncoder().encode(`#!/bin/sh\nSKIFF_SHIM_CODE=${id}\n`)) === id);
 * ```
 */
export function launcherCodeId(text: Uint8Array): string {
  const m = CODE_LINE.exec(new TextDecoder().decode(text));
  return m ? m[1] : sha256Hex(text);
}

/**
 * The code identity of an installed launcher file ({@linkcode launcherCodeId}).
 *
 * @example Usage
 * ```ts ignore
 * const id = spareCodeId(Deno.env.get("SKIFF_SHIM_LAUNCHER")!);
 * ```
 */
export function spareCodeId(launcher: string): string {
  return launcherCodeId(Deno.readFileSync(launcher));
}

/**
 * The spare of this shim binary for containerd at `address`, or undefined when spares are off:
 * `SKIFF_SPARE=0`, no launcher (a shim run by hand), or a source launcher.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @param env the environment to read the settings from
 * @example Usage
 * ```ts
 * import { spareConfig } from "./handoff.ts";
 * console.assert(spareConfig("/run/containerd/containerd.sock", "/run/containerd/s", new Map()) === undefined);
 * ```
 */
export function spareConfig(
  address: string,
  socketDir: string,
  env: { get(key: string): string | undefined } = Deno.env,
  knownCodeId?: string,
): SpareConfig | undefined {
  const launcher = spareLauncher(env);
  if (!launcher) return undefined;
  let codeId: string;
  try {
    codeId = knownCodeId ?? spareCodeId(launcher);
  } catch {
    return undefined; // the launcher is gone: nothing to key a spare on
  }
  const dir = spareDir(address, socketDir);
  const code = codeId.slice(0, 16);
  return {
    dir,
    socket: `${dir}/spare-${code}.sock`,
    lock: `${dir}/spare-${code}.lock`,
    stats: `${dir}/stats-${sha256Hex(launcher).slice(0, 16)}.json`,
    codeId,
    launcher,
    idleSeconds: spareIdleSeconds(env),
  };
}

/**
 * The directory of one containerd's spares and counters: `<socket dir>/skiff-<sha256(address)[:12]>`.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @example Usage
 * ```ts
 * import { spareDir } from "./handoff.ts";
 * console.assert(spareDir("/run/containerd/containerd.sock").startsWith("/run/containerd/s/skiff-"));
 * ```
 */
export function spareDir(address: string, socketDir: string = DEFAULT_SOCKET_DIR): string {
  return `${socketDir}/skiff-${sha256Hex(address).slice(0, 12)}`;
}

/** The launcher a spare is keyed on, or undefined when spares are off. */
function spareLauncher(env: { get(key: string): string | undefined }): string | undefined {
  const launcher = env.get("SKIFF_SHIM_LAUNCHER");
  if (!launcher || !env.get("SKIFF_SHIM_BUNDLE") || OFF.test(env.get("SKIFF_SPARE") ?? "")) {
    return undefined;
  }
  return launcher;
}

/**
 * {@linkcode spareConfig} where time counts (`start`, a server that has just begun to serve):
 * the launcher's hash comes from WebCrypto (native: 0.5 ms here, against 2.5 ms for the
 * TypeScript SHA-256 of a launcher in V8's lite mode).
 *
 * @example Usage
 * ```ts ignore
 * const spare = await loadSpareConfig(flags.address, socketDir);
 * ```
 */
export async function loadSpareConfig(
  address: string,
  socketDir: string,
  env: { get(key: string): string | undefined } = Deno.env,
): Promise<SpareConfig | undefined> {
  const launcher = spareLauncher(env);
  if (!launcher) return undefined;
  // The launcher states it (and exported it): no file to read, nothing to hash.
  const stated = env.get("SKIFF_SHIM_CODE");
  if (stated && /^[0-9a-f]{64}$/.test(stated)) return spareConfig(address, socketDir, env, stated);
  let text: Uint8Array<ArrayBuffer>;
  try {
    text = Deno.readFileSync(launcher);
  } catch {
    return undefined;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", text));
  const codeId = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  return spareConfig(address, socketDir, env, codeId);
}

/** Reads `\n`-terminated JSON lines (each at most 1 MiB) from a connection, keeping what follows. */
export class JsonLines {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);

  /** Reads from `conn`. */
  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** The next line, parsed; throws when the connection ends first or the line is too long. */
  async next(): Promise<unknown> {
    for (;;) {
      const nl = this.#buf.indexOf(10);
      if (nl !== -1) {
        const line = this.#buf.subarray(0, nl);
        this.#buf = this.#buf.slice(nl + 1);
        return JSON.parse(new TextDecoder().decode(line));
      }
      if (this.#buf.length > 1 << 20) throw new Error("line longer than 1 MiB");
      const chunk = new Uint8Array(64 * 1024);
      const n = await this.#conn.read(chunk);
      if (n === null) throw new Error("connection closed before a full line");
      const next = new Uint8Array(this.#buf.length + n);
      next.set(this.#buf);
      next.set(chunk.subarray(0, n), this.#buf.length);
      this.#buf = next;
    }
  }
}

/** Writes one JSON line. */
export async function writeJsonLine(conn: Deno.Conn, value: unknown): Promise<void> {
  const data = new TextEncoder().encode(JSON.stringify(value) + "\n");
  for (let off = 0; off < data.length;) off += await conn.write(data.subarray(off));
}

/**
 * Hands a container to the waiting spare. Resolves with its answer (its pid) once it serves
 * `handoff.flags.socket`, or undefined when there is no usable spare (none, dead, other code,
 * or it failed): the caller then starts a server cold. A spare that took the handoff and does
 * not serve within {@linkcode SPARE_ADOPTION_MS} exits by itself; its socket is then removed.
 *
 * @example Usage
 * ```ts ignore
 * const pid = await handOff(cfg, handoff);
 * if (pid === undefined) await spawnServerCold();
 * ```
 */
export async function handOff(
  cfg: SpareConfig,
  handoff: SpareHandoff,
): Promise<Adopted | undefined> {
  const conn = await connectSpare(cfg);
  if (!conn) return undefined;
  // No timer here: Deno sets up its timers on their first use, ~4 ms of start's path. The spare
  // bounds itself instead: it serves within SPARE_ADOPTION_MS of accepting, or exits.
  let pid: number | undefined;
  try {
    await writeJsonLine(conn, handoff);
    const lines = new JsonLines(conn);
    const hello = await lines.next() as { pid?: number; codeId?: string };
    if (hello.codeId !== cfg.codeId || !Number.isInteger(hello.pid)) return undefined;
    pid = hello.pid;
    const answer = await lines.next() as Partial<Adopted> & { ok?: boolean };
    if (answer.ok === true) {
      const v = answer.containerd;
      const known = Array.isArray(v) && v.length === 2 && v.every(Number.isInteger);
      return { pid: pid!, ...(known ? { containerd: v } : {}) };
    }
    return undefined; // it refused (other code, or it could not become the server); it exits
  } catch {
    // Reset before its hello (another start took the spare first), or it died or gave up after
    // it: a spare that said hello may have bound the container's socket before it went.
    if (pid !== undefined) await Deno.remove(handoff.flags.socket).catch(() => {});
    return undefined;
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
  }
}

/** How long a spare may take from accepting a `start` to serving its container. */
export const SPARE_ADOPTION_MS = 10_000;

/** How long a `start` waits for a spare that is still loading (a cold start takes longer). */
const LOADING_WAIT_MS = 2_000;

async function tryConnect(path: string): Promise<Deno.Conn | undefined> {
  try {
    return await Deno.connect({ transport: "unix", path });
  } catch {
    return undefined;
  }
}

/** True while some process holds the lock file `path` (a spare loading or waiting). */
function held(path: string): boolean {
  let file: Deno.FsFile;
  try {
    file = Deno.openSync(path, { read: true, write: true });
  } catch {
    return false;
  }
  try {
    if (!file.tryLockSync(true)) return true;
    file.unlockSync();
    return false;
  } finally {
    file.close();
  }
}

/**
 * Connects to the spare. A spare that is still loading (it holds the lock but does not listen
 * yet) is further along than a cold server would be, so one `start` (the one that takes the
 * claim lock) waits for it; the others, and every `start` when no spare loads, go cold at once.
 */
async function connectSpare(cfg: SpareConfig): Promise<Deno.Conn | undefined> {
  const now = await tryConnect(cfg.socket);
  if (now || !held(cfg.lock)) return now;
  let claim: Deno.FsFile;
  try {
    claim = await Deno.open(cfg.lock.replace(/\.lock$/, ".claim"), {
      read: true,
      write: true,
      create: true,
      mode: 0o600,
    });
  } catch {
    return undefined;
  }
  try {
    if (!(await claim.tryLock(true))) return undefined; // another start waits for this one
    const until = Date.now() + LOADING_WAIT_MS;
    while (Date.now() < until) {
      await new Promise((r) => setTimeout(r, 5));
      const conn = await tryConnect(cfg.socket);
      if (conn) return conn;
      if (!held(cfg.lock)) return undefined; // it died while loading
    }
    return undefined;
  } finally {
    claim.close(); // the handoff itself needs no claim: the spare takes one container only
  }
}

/**
 * Spawns the next spare unless one is alive or loading (it holds the lock). A server calls it
 * once it serves (off `start`'s path); the spare inherits its environment (`start`'s), and takes
 * the cgroups, OOM score and priority of the `start` that adopts it.
 *
 * @param cfg the spare's place
 * @param address containerd's address
 * @param publishBinary containerd's binary
 * @example Usage
 * ```ts ignore
 * spawnSpare(cfg, flags.address, flags.publishBinary, daemon);
 * ```
 */
export function spawnSpare(
  cfg: SpareConfig,
  address: string,
  publishBinary: string,
  daemon: string,
  spawn: (cmd: Deno.Command) => Deno.ChildProcess = (cmd) => cmd.spawn(),
): void {
  // Sync calls: this runs on start's path, and each async file call is a thread-pool hop.
  try {
    // A spare leaves once its containerd's socket is gone: none is worth loading without one.
    Deno.statSync(address.replace(/^unix:\/\//, ""));
  } catch {
    return;
  }
  Deno.mkdirSync(cfg.dir, { recursive: true, mode: 0o700 });
  const lock = Deno.openSync(cfg.lock, { read: true, write: true, create: true, mode: 0o600 });
  try {
    if (!lock.tryLockSync(true)) return; // a spare holds it
    lock.unlockSync();
  } finally {
    lock.close();
  }
  // Loading at the lowest priority takes CPU from idle time, not from the container being
  // started; only where the spare may raise its priority back once adopted.
  const args = [
    "-spare",
    "-address",
    address,
    "-publish-binary",
    publishBinary,
    "-socket",
    cfg.socket,
  ];
  const nice = mayRaisePriority() && isFile(NICE) ? [NICE, "-n", "19"] : [];
  const child = spawn(
    new Deno.Command(nice[0] ?? cfg.launcher, {
      args: [...nice.slice(1), ...(nice.length ? [cfg.launcher] : []), ...args],
      // The priority to return to as soon as a start connects (the handoff then says start's).
      env: { SKIFF_SPARE_DAEMON: daemon, SKIFF_SPARE_NICE: String(niceOf("self")) },
      cwd: "/",
      stdin: "null",
      stdout: "null",
      stderr: "null",
      detached: true,
    }),
  );
  // Its new session is its own autogroup, which would weigh as much as the container's.
  if (nice.length) setAutogroupNice(child.pid, 19);
  child.unref();
}

/**
 * containerd's process as `<pid>:<start time>`, from `start` (whose parent it is): a spare
 * leaves once that process is gone, even SIGKILLed with its socket file left behind; the start
 * time tells it from a later process with the same pid.
 *
 * @example Usage
 * ```ts ignore
 * const daemon = containerdProcess();
 * ```
 */
export function containerdProcess(): string {
  return `${Deno.ppid}:${processStartTime(Deno.ppid) ?? ""}`;
}

/**
 * Counts one start (under the file's lock: parallel starts lose no count).
 *
 * @example Usage
 * ```ts ignore
 * await recordStart(cfg.stats, "spare");
 * ```
 */
export async function recordStart(path: string, origin: "spare" | "cold"): Promise<void> {
  const file = await Deno.open(path, { read: true, write: true, create: true, mode: 0o600 });
  try {
    await file.lock(true);
    const buf = new Uint8Array(4096);
    let len = 0;
    for (let n; len < buf.length && (n = await file.read(buf.subarray(len))) !== null;) len += n;
    const text = new TextDecoder().decode(buf.subarray(0, len)).trim();
    const stats = parseSpareStats(text); // a torn or foreign file restarts the count
    if (origin === "spare") stats.adopted++;
    else stats.cold++;
    const next = new TextEncoder().encode(JSON.stringify(stats) + "\n");
    await file.truncate(0);
    await file.seek(0, Deno.SeekMode.Start);
    for (let off = 0; off < next.length;) off += await file.write(next.subarray(off));
  } finally {
    file.close();
  }
}

/**
 * Reads a counters file synchronously (the operations endpoint reads it at scrape time); a
 * missing or unreadable one counts nothing.
 *
 * @example Usage
 * ```ts
 * import { readSpareStatsSync } from "./handoff.ts";
 * console.assert(readSpareStatsSync("/nonexistent/stats.json").adopted === 0);
 * ```
 */
export function readSpareStatsSync(path: string): SpareStats {
  try {
    return parseSpareStats(Deno.readTextFileSync(path));
  } catch {
    return { adopted: 0, cold: 0 };
  }
}

/** A counters file's text as counts; anything unreadable counts nothing. */
function parseSpareStats(text: string): SpareStats {
  try {
    const v = JSON.parse(text || "{}") as Partial<SpareStats>;
    return { adopted: Number(v.adopted) || 0, cold: Number(v.cold) || 0 };
  } catch {
    return { adopted: 0, cold: 0 };
  }
}

/**
 * The counters file of the server serving `socket` for containerd at `address`, or undefined
 * when spares are off for it (then nothing is counted).
 *
 * @param address containerd's address
 * @param socket the socket the server serves (its directory holds the spares' directory)
 * @example Usage
 * ```ts
 * import { spareStatsPath } from "./handoff.ts";
 * // A shim run by hand (no launcher in its environment) keeps no counters.
 * console.assert(spareStatsPath("/run/containerd/containerd.sock", "/run/containerd/s/x", new Map()) === undefined);
 * ```
 */
export function spareStatsPath(
  address: string,
  socket: string,
  env: { get(key: string): string | undefined } = Deno.env,
): string | undefined {
  return spareConfig(address, socket.slice(0, socket.lastIndexOf("/")) || "/", env)?.stats;
}

/**
 * Counts a server's start in its launcher's counters file: a cold server calls it once it
 * listens, an adopted spare once it has answered its `start`.
 *
 * @param stats the counters file ({@linkcode spareStatsPath})
 * @param origin how the server came to run
 * @example Usage
 * ```ts ignore
 * const stats = spareStatsPath(flags.address, path);
 * if (stats) await countServerStart(stats, "cold");
 * ```
 */
export async function countServerStart(stats: string, origin: "spare" | "cold"): Promise<void> {
  await Deno.mkdir(stats.slice(0, stats.lastIndexOf("/")), { recursive: true, mode: 0o700 });
  await recordStart(stats, origin);
}
