/**
 * The handoff: what `start` and a waiting spare (or a shared server) say to each other, and
 * `start`'s side of it towards the spare. This is all `start` loads of the warm spare (with
 * `./config.ts` and `./join.ts`); the spare's own side is `./spare.ts`, which only the spare
 * process loads.
 *
 * The exchange on the spare's 0600 socket is JSON lines: the spare's hello (`{"pid":…,"codeId":…}`,
 * sent on accepting), `start`'s {@linkcode SpareHandoff} (sent on connecting, without waiting),
 * and the spare's answer (`{"ok":true,…}`) once it serves the container's socket.
 *
 * @module
 */

import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import { LOADING_WAIT_MS, type SpareConfig } from "./config.ts";
import { processStartTime } from "../../linux/proc_stat.ts";
import type { ShimFlags } from "../contract/flags.ts";

/**
 * The environment variable that names containerd's process (`<pid>:<start time>`,
 * {@linkcode containerdProcess}) to a server or spare: `start` sets it for the server it spawns,
 * an adopted spare for the server it becomes, and the spare extension takes it out again before
 * any runtime process could inherit it.
 */
export const SPARE_DAEMON_ENV: typeof LAUNCHER_ENV.spareDaemon = LAUNCHER_ENV.spareDaemon;

/** The environment variable that tells a spare the priority to return to once a start connects. */
export const SPARE_NICE_ENV: typeof LAUNCHER_ENV.spareNice = LAUNCHER_ENV.spareNice;

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

/**
 * The server flags a handoff gives the process that takes it (a spare, or a shared server for a
 * joining pod): what a server spawned by that `start` would have been run with.
 *
 * @param handoff the start's handoff
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { handoffServerFlags } from "./handoff.ts";
 * const flags = handoffServerFlags({
 *   codeId: "c",
 *   flags: { namespace: "k8s.io", id: "pod", address: "/run/c.sock", publishBinary: "", debug: false, socket: "/run/s/x" },
 *   bundle: "/run/b/pod",
 *   env: {},
 * });
 * strictEqual(flags.action, "serve");
 * ```
 */
export function handoffServerFlags(handoff: SpareHandoff): ShimFlags {
  return {
    ...handoff.flags,
    publishBinary: handoff.flags.publishBinary ?? "",
    debug: handoff.flags.debug === true,
    bundle: "",
    version: false,
    info: false,
    spare: false,
    action: "serve",
    upgradeCheck: "",
  };
}

/**
 * Where a `start` runs and how it hands its container over. By default this process is `start`
 * (`ownStartContext` in sdk/shim/boot/start.ts); a warm spare answering a launcher's door runs the same `start`
 * for the launcher's process (its bundle, environment and parent) and takes the container itself.
 */
export interface StartContext {
  /** The bundle: `start`'s working directory. */
  bundle: string;
  /** `start`'s environment (containerd's `TTRPC_ADDRESS`, `GRPC_ADDRESS`, …). */
  env: Record<string, string>;
  /** `start`'s process (its nice value is the server's). */
  process: number | "self";
  /** containerd's pid (`start`'s parent): the server's OOM score is one above its. */
  containerd: number;
  /** containerd's process as `<pid>:<start time>`, for the next spare. */
  daemon: string;
  /** Hands the container to a server that takes it; undefined: start one cold. */
  handOff(request: Omit<SpareHandoff, "codeId">, socketDir: string): Promise<Adopted | undefined>;
}

/**
 * `start` run for a launcher's process (`runStart` of sdk/shim/boot/start.ts, which `runShim`
 * hands a spare: the spare does not import the actions).
 */
export type StartRunner = (
  flags: ShimFlags,
  stdin: Uint8Array,
  ctx: StartContext,
) => Promise<string | Uint8Array>;

/** A spare's answer once it serves the container's socket. */
export interface Adopted {
  /** The spare's pid: the server's from now on. */
  pid: number;
  /** containerd's version as `[major, minor]`, when the spare asked its binary. */
  containerd?: [number, number];
}

/**
 * Whether a line a connection sent is a well-formed {@linkcode SpareHandoff} (the spare checks
 * every connection's first line with it).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { validHandoff } from "./handoff.ts";
 * strictEqual(validHandoff({ codeId: "x" }), false);
 * ```
 */
export function validHandoff(v: unknown): v is SpareHandoff {
  const h = v as SpareHandoff;
  return typeof h === "object" && h !== null && typeof h.codeId === "string" &&
    typeof h.bundle === "string" && typeof h.env === "object" && h.env !== null &&
    typeof h.flags === "object" && h.flags !== null && typeof h.flags.id === "string" &&
    typeof h.flags.namespace === "string" && typeof h.flags.socket === "string" &&
    typeof h.flags.address === "string";
}

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
  return conn && await exchange(conn, handoff);
}

/**
 * The handoff on a connection to a spare or a shared server: the request, their hello, their
 * answer. Undefined when they refuse or fail (the connection is closed either way).
 *
 * @param conn the connection (closed when this resolves)
 * @param handoff what the server must become
 */
export async function exchange(
  conn: Deno.Conn,
  handoff: SpareHandoff,
): Promise<Adopted | undefined> {
  // No timer here: Deno sets up its timers on their first use, ~4 ms of start's path. The spare
  // bounds itself instead: it serves within SPARE_ADOPTION_MS of accepting, or exits.
  let pid: number | undefined;
  try {
    await writeJsonLine(conn, handoff);
    const lines = new JsonLines(conn);
    const hello = await lines.next() as { pid?: number; codeId?: string };
    if (hello.codeId !== handoff.codeId || !Number.isInteger(hello.pid)) return undefined;
    pid = hello.pid;
    const answer = await lines.next() as Partial<Adopted> & { ok?: boolean };
    if (answer.ok === true) {
      const v = answer.containerd;
      const known = Array.isArray(v) && v.length === 2 && v.every(Number.isInteger);
      return { pid: pid!, ...(known ? { containerd: v } : {}) };
    }
    return undefined; // it refused (other code, full, or it could not serve the pod)
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

/**
 * A connection to the unix socket at `path`, or undefined when nothing listens there.
 *
 * @param path the socket
 */
export async function tryConnect(path: string): Promise<Deno.Conn | undefined> {
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
 * containerd's process as `<pid>:<start time>`, from `start` (whose parent it is; a spare
 * answering a launcher's door names the launcher's parent): a spare leaves once that process is
 * gone, even SIGKILLed with its socket file left behind; the start time tells it from a later
 * process with the same pid.
 *
 * @param pid containerd's pid; default this process's parent
 * @example Usage
 * ```ts ignore
 * const daemon = containerdProcess();
 * ```
 */
export function containerdProcess(pid: number = Deno.ppid): string {
  return `${pid}:${processStartTime(pid) ?? ""}`;
}
