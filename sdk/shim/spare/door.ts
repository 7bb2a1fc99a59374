/**
 * The warm spare's door: how an installed launcher hands a `start` to a waiting spare without
 * starting a Deno process of its own (the launcher's shell, `startDoorPath` in
 * `sdk/install/install.ts`). The spare answers the `start` in the launcher's place: it reads the
 * launcher's arguments, environment, working directory (the bundle) and parent (containerd) from
 * `/proc`, takes containerd's options from the launcher's stdin (reopened through
 * `/proc/<pid>/fd/0`), leaves the answer beside the shell's token and tells the shell, which
 * prints it itself.
 *
 * The protocol, all in the spare's directory (`<socket dir>/skiff-<containerd>/`):
 *
 * 1. the shell creates the token `start-<its pid>` and writes its pid as one line into the
 *    FIFO `spare-<code>.door`, opened read-write so that it never blocks (a dead spare's FIFO
 *    then just loses the line);
 * 2. the spare takes the start by renaming the token to `taken-<pid>` (atomic: a shell that
 *    gave up first has removed it, and then the spare leaves it alone), and writes its own pid
 *    into it: a shell whose taker is gone before it said how it went fails at once, instead of
 *    waiting out its bound;
 * 3. the spare runs `start` for it, leaves `answer-<pid>` (or `error-<pid>`) and signals the
 *    shell: `SIGUSR1` answered (the shell prints the answer and exits 0), `SIGHUP` failed (it
 *    prints the reason on stderr and exits 1), `SIGUSR2` not taken (the shell starts Deno's
 *    `start` as before). A shell that hears nothing within a second (a shared server: five),
 *    or finds its knock lost (the door removed or replaced, no server holding the lock), and
 *    can still remove its token goes the Deno way too.
 *
 * @module
 */

import { mkfifo, O, open, readFd } from "../../linux/libc.ts";
import { FdStream } from "../../linux/fd_stream.ts";
import { processParent } from "../../linux/proc_stat.ts";
import { containerdProcess, type StartContext, type StartRunner } from "./handoff.ts";
import { parseShimFlags, type ShimFlags } from "../contract/flags.ts";
import { LAUNCHER_DEFAULTS, LAUNCHER_SETS } from "../contract/launcher_env.ts";

/** What the shell says: its pid, one per line. */
const PID_LINE = /^(\d+)$/;

/**
 * The door FIFO of the spare whose socket is `socket` (`spare-<code>.sock` →
 * `spare-<code>.door`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { doorPath } from "./door.ts";
 * strictEqual(doorPath("/run/containerd/s/skiff-ab/spare-0123.sock"), "/run/containerd/s/skiff-ab/spare-0123.door");
 * ```
 */
export function doorPath(socket: string): string {
  return socket.replace(/\.sock$/, ".door");
}

/** An open door: the pids of the shells that knocked, and its closing. */
export interface Door {
  /** Each pid written into the door, in order. */
  knocks(): AsyncIterable<number>;
  /**
   * Stops listening and removes the FIFO. The knocks written but not yet read are handed to
   * `unread` first (so that their shells can be told at once, rather than find the door gone
   * at their next look).
   */
  close(unread?: (pid: number) => void): void;
}

/**
 * Makes the door FIFO at `path` (replacing a dead spare's) and listens at it. The FIFO is held
 * open read-write, so a shell's open never waits and a line is never lost while this spare lives.
 *
 * @param path the FIFO
 * @returns the door
 */
export function openDoor(path: string): Door {
  try {
    Deno.removeSync(path);
  } catch { /* none */ }
  mkfifo(path, 0o600);
  const fd = open(path, O.RDWR | O.NONBLOCK);
  const stream = new FdStream(fd, `spare door ${path}`);
  let closed = false;
  // What was read and not yet taken, shared by the listening loop and the close: a line split
  // between the two readers is still one knock, and none is handed out twice.
  let text = "";
  const add = (bytes: Uint8Array) => text += new TextDecoder().decode(bytes);
  function* pids(): Generator<number> {
    let nl;
    while ((nl = text.indexOf("\n")) >= 0) {
      const m = PID_LINE.exec(text.slice(0, nl).trim());
      text = text.slice(nl + 1);
      if (m) yield Number(m[1]);
    }
    if (text.length > 256) text = ""; // not a shell of ours
  }
  return {
    async *knocks() {
      const buf = new Uint8Array(4096);
      for (;;) {
        let n: number | null;
        try {
          n = await stream.read(buf);
        } catch {
          return; // closed
        }
        if (n === null) return;
        add(buf.subarray(0, n));
        yield* pids();
      }
    },
    close(unread) {
      if (closed) return;
      closed = true;
      try {
        Deno.removeSync(path);
      } catch { /* gone */ }
      if (unread) {
        // Removed first: a shell that looks now finds no door. What is in the FIFO is read here
        // (non-blocking; the stream's pending read then gets nothing).
        const buf = new Uint8Array(4096);
        try {
          for (let n; (n = readFd(fd, buf, `spare door ${path}`));) add(buf.subarray(0, n));
        } catch { /* nothing more */ }
        for (const pid of pids()) unread(pid);
      }
      void stream.close();
    },
  };
}

/**
 * Takes the `start` of the shell `pid`: renames its token, and names this process in it (the
 * shell watches that it lives until it answers). False when the shell gave up first (or never
 * made one).
 *
 * @param dir the spare's directory
 * @param pid the shell's pid
 */
export function takeKnock(dir: string, pid: number): boolean {
  const taken = `${dir}/taken-${pid}`;
  try {
    Deno.renameSync(`${dir}/start-${pid}`, taken);
  } catch {
    return false;
  }
  try {
    Deno.writeTextFileSync(taken, `${Deno.pid}\n`);
  } catch { /* the shell then waits for the answer, within its bound */ }
  return true;
}

/** A launcher's `start`, as the spare reads it from `/proc`. */
export interface LauncherStart {
  /** The shell's pid. */
  pid: number;
  /** Its flags (containerd's arguments). */
  flags: ShimFlags;
  /** Its working directory: the bundle. */
  bundle: string;
  /** Its environment, as containerd gave it. */
  env: Record<string, string>;
  /** containerd's pid: the shell's parent. */
  containerd: number;
  /** containerd's process as `<pid>:<start time>`. */
  daemon: string;
}

/**
 * Reads the `start` of the shell `pid`, which must be running `launcher` (this spare's, by the
 * same path) for containerd at `address`; undefined for anything else. Its environment is the
 * one containerd gave the shell, plus what the launcher exports (taken from `exported`, this
 * spare's own: the same launcher's), as Deno's `start` would have had it.
 *
 * @param pid the shell's pid
 * @param launcher this spare's launcher path
 * @param address this spare's containerd address
 * @param exported this spare's environment, as its launcher made it
 */
export function readLauncherStart(
  pid: number,
  launcher: string,
  address: string,
  exported: Record<string, string>,
): LauncherStart | undefined {
  try {
    const argv = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0").slice(0, -1);
    const at = argv.indexOf(launcher);
    if (at < 0) return undefined;
    const flags = parseShimFlags(argv.slice(at + 1));
    if (flags.action !== "start" || flags.address !== address) return undefined;
    const env: Record<string, string> = {};
    for (const kv of Deno.readTextFileSync(`/proc/${pid}/environ`).split("\0")) {
      const eq = kv.indexOf("=");
      if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1);
    }
    for (const key of LAUNCHER_SETS) if (key in exported) env[key] = exported[key];
    for (const key of LAUNCHER_DEFAULTS) if (key in exported) env[key] ??= exported[key];
    const containerd = processParent(pid);
    if (containerd === undefined) return undefined;
    return {
      pid,
      flags,
      bundle: Deno.readLinkSync(`/proc/${pid}/cwd`),
      env,
      containerd,
      daemon: containerdProcess(containerd),
    };
  } catch {
    return undefined; // gone, or not ours to read
  }
}

/**
 * The launcher's stdin (containerd's options for `start`), read to its end through
 * `/proc/<pid>/fd/0`.
 *
 * @param pid the shell's pid
 */
export async function launcherStdin(pid: number): Promise<Uint8Array> {
  return await Deno.readFile(`/proc/${pid}/fd/0`);
}

/**
 * Runs `start` for the shell `start.pid` as its launcher would have: its flags, containerd's
 * options from its stdin, its bundle, environment and parent; `handOff` is the taker's.
 *
 * @param run `start`'s own code (`runStart`)
 * @param start the shell's start, as {@linkcode readLauncherStart} read it
 * @param handOff where the container goes
 * @returns what `start` prints
 */
export async function runLauncherStart(
  run: StartRunner,
  start: LauncherStart,
  handOff: StartContext["handOff"],
): Promise<string | Uint8Array> {
  return await run(start.flags, await launcherStdin(start.pid), {
    bundle: start.bundle,
    env: start.env,
    process: start.pid,
    containerd: start.containerd,
    daemon: start.daemon,
    handOff,
  });
}

/**
 * Answers the launcher's `start`: leaves `answer` beside its token (`answer-<pid>`, written
 * whole before it is named) and tells the shell, which prints it on its own stdout (containerd's
 * pipe) and exits 0.
 *
 * @param dir the spare's directory
 * @param pid the shell's pid
 * @param answer what `start` prints
 */
export function answerLauncher(dir: string, pid: number, answer: string | Uint8Array): void {
  leave(dir, pid, "answer", typeof answer === "string" ? new TextEncoder().encode(answer) : answer);
  Deno.kill(pid, "SIGUSR1");
}

/**
 * Fails the launcher's `start`: leaves why beside its token (`error-<pid>`) and tells the shell,
 * which prints it on its stderr (what containerd shows) and exits 1.
 *
 * @param dir the spare's directory
 * @param pid the shell's pid
 * @param message what containerd shows
 */
export function failLauncher(dir: string, pid: number, message: string): void {
  try {
    leave(dir, pid, "error", new TextEncoder().encode(`${message}\n`));
  } catch { /* the shell still exits 1, with its own words */ }
  try {
    Deno.kill(pid, "SIGHUP");
  } catch { /* gone */ }
}

function leave(dir: string, pid: number, what: "answer" | "error", data: Uint8Array): void {
  const path = `${dir}/${what}-${pid}`;
  Deno.writeFileSync(`${path}.part`, data, { mode: 0o600 });
  Deno.renameSync(`${path}.part`, path);
}

/**
 * Sends the shell back to Deno's `start` (this spare does not take it); nothing was read.
 *
 * @param pid the shell's pid
 */
export function refuseLauncher(pid: number): void {
  try {
    Deno.kill(pid, "SIGUSR2");
  } catch { /* gone: nothing to refuse */ }
}
