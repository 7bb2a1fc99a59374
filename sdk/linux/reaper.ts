/**
 * Child subreaper that reaps re-parented orphans without stealing Deno's own children.
 *
 * A shim must reap the container init after `runc create` exits (it is re-parented to the
 * shim) and any daemon that double-forks, but Deno reaps the children it spawned itself with
 * `waitpid(pid)` on a pidfd; a `waitpid(-1)` loop would steal those and make
 * `Deno.ChildProcess.status` reject with ECHILD. So this reaper never waits on `-1`: on SIGCHLD
 * and on a slow periodic sweep it lists its children from `/proc/self/task/<tid>/children` and
 * reaps, one pid at a time with `WNOHANG`, the zombies that are neither registered through
 * {@linkcode Reaper.spawn} nor held by a Deno pidfd. Those are orphans (or container processes):
 * they are reaped at once, as the Go shim does, so none lingers after its container's exit.
 *
 * The reaper keeps no history. A pid is not an identity: once reaped, the kernel hands it to the
 * next process, so an exit is only ever delivered live, to listeners subscribed before it was
 * reaped, together with the process's start time (its identity for as long as the machine runs).
 * While a process is being started and its pid is not known yet, {@linkcode Reaper.holdSince}
 * keeps it a zombie should it exit, so its pid cannot go to another process in the meantime.
 *
 * @module
 */

import {
  anyChildExited,
  childExited,
  close,
  decodeWaitStatus,
  Errno,
  ErrnoError,
  getpid,
  libc,
  prctl,
  waitpidNoHang,
} from "./libc.ts";
import { deviceNumber } from "./descriptors.ts";
import { processStartTime } from "./proc_stat.ts";

/**
 * One reaped process.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ProcessExit } from "@skiff/shim/linux";
 * // A process killed by SIGKILL (9): status 128 + 9, as containerd reports it.
 * const exit: ProcessExit = { pid: 4242, startTime: 1234, status: 137, exitedAt: new Date() };
 * strictEqual(exit.status - 128, 9);
 * ```
 */
export interface ProcessExit {
  /** The process id. */
  pid: number;
  /**
   * When the process started, in clock ticks since boot (read from the zombie before reaping
   * it); with `pid` it names one process, where `pid` alone may name several over time.
   * Undefined only when `/proc` could not tell.
   */
  startTime?: number;
  /** The exit code, or 128 + signal number when a signal killed the process. */
  status: number;
  /** When the reaper collected the exit. */
  exitedAt: Date;
}

/**
 * Whether `exit` can be the exit of the process `pid` whose start time is `startTime` (when
 * known). A start time on either side that is unknown does not rule the exit out.
 *
 * @param exit the observed exit
 * @param pid the process's pid
 * @param startTime the process's start time, in clock ticks since boot
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { isExitOf } from "@skiff/shim/linux";
 * const exit = { pid: 7, startTime: 100, status: 0, exitedAt: new Date() };
 * strictEqual(isExitOf(exit, 7, 100), true);
 * strictEqual(isExitOf(exit, 7, 250), false);
 * strictEqual(isExitOf(exit, 8), false);
 * ```
 */
export function isExitOf(
  exit: ProcessExit,
  pid: number,
  startTime?: number,
): boolean {
  if (exit.pid !== pid) return false;
  return startTime === undefined || exit.startTime === undefined || exit.startTime === startTime;
}

/**
 * Options for {@linkcode Reaper.start}.
 *
 * @example Usage
 * ```ts ignore
 * const reaper = Reaper.start({ subreaper: true });
 * ```
 */
export interface ReaperOptions {
  /** Become the child subreaper (`PR_SET_CHILD_SUBREAPER`); default true. */
  subreaper?: boolean;
  /**
   * How long an unregistered zombie stays unreaped before the reaper takes it; 0 (at once).
   * Deno's children are told apart by registration and pidfd, not by this delay.
   */
  graceMs?: number;
  /**
   * Reap nothing until {@linkcode Reaper.release} (a live upgrade: the exits of the window wait
   * as zombies until the carried processes are known again); default false.
   */
  held?: boolean;
  /** Safety-net sweep interval, in case a SIGCHLD was coalesced away; 1000 ms. */
  sweepIntervalMs?: number;
}

const PR_SET_CHILD_SUBREAPER = 36;

/**
 * Reaps exited children of the shim process and fans their exits out to listeners.
 *
 * Use one per process; like a listener, an open reaper keeps the event loop alive until
 * {@linkcode Reaper.close}, from its first child on (a spawn, a SIGCHLD, a child a sweep sees). Spawn every `Deno.Command` the shim runs through
 * {@linkcode Reaper.spawn}; plain `new Deno.Command(...).output()` is still safe (Deno's pidfd
 * and the grace period protect it), only slower to tell apart.
 *
 * @example Usage
 * ```ts ignore
 * const reaper = Reaper.start();
 * // Subscribe before starting the process: its exit may come before its pid is known.
 * const exits: ProcessExit[] = [];
 * const off = reaper.onExit((e) => exits.push(e));
 * const runc = reaper.spawn(new Deno.Command("runc", { args: ["create", "--bundle", b, id] }));
 * await runc.status;
 * const initPid = Number(await Deno.readTextFile(`${b}/init.pid`));
 * off();
 * reaper.close();
 * ```
 */
export class Reaper {
  #options: Required<ReaperOptions>;
  #listeners = new Set<(exit: ProcessExit) => void>();
  #denoChildren = new Set<number>();
  #zombieSince = new Map<number, number>();
  #onSignal = (): void => {
    this.#watch();
    this.#schedule(0);
  };
  #interval: ReturnType<typeof setInterval> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #held: boolean;
  /** Start times (clock ticks since boot) from which zombies are kept; see {@link holdSince}. */
  #holds = new Set<{ since: number }>();

  private constructor(options: Required<ReaperOptions>) {
    this.#options = options;
    this.#held = options.held;
    if (options.subreaper) prctl(PR_SET_CHILD_SUBREAPER, 1);
    Deno.addSignalListener("SIGCHLD", this.#onSignal);
    this.sweep();
  }

  /** Starts reaping after `held: true`: the zombies that waited are reaped now. */
  release(): void {
    this.#held = false;
    this.sweep();
  }

  /**
   * Leaves unreaped every child that started at or after `since` (clock ticks since boot, as
   * {@linkcode ProcessExit.startTime}) until the returned function is called, which reaps them.
   *
   * For starting a process whose pid is learnt only afterwards (runc's pid file): if it exits
   * before then, its zombie keeps the pid its own, so the start time read for that pid is its
   * own too, never that of a later process the kernel gave the freed pid to. Children that
   * started earlier are reaped as usual. Call the function once the pid and start time are
   * known; holds nest.
   *
   * @param since clock ticks since boot, read before the process was started
   * @returns a function that ends the hold (calling it again does nothing)
   */
  holdSince(since: number): () => void {
    const hold = { since };
    this.#holds.add(hold);
    return () => {
      if (this.#holds.delete(hold)) this.sweep();
    };
  }

  /** Whether a zombie must wait for a hold: it started within one, or its start is unknown. */
  #heldBack(startTime: number | undefined): boolean {
    if (this.#holds.size === 0) return false;
    if (startTime === undefined) return true;
    for (const hold of this.#holds) if (startTime >= hold.since) return true;
    return false;
  }

  /**
   * Starts the periodic sweep, once there is a child to watch (a spawn, a SIGCHLD, a child seen
   * by a sweep): a process's first timer makes Deno load its Node-compatible timers (10-17 ms
   * here), which a cold server would otherwise pay before it listens (docs/performance.md,
   * "Cold server start"). A coalesced SIGCHLD still delivers one, so no child goes unwatched.
   * Ref'd on purpose, like a listening socket: a reaper with children keeps the process alive.
   */
  #watch(): void {
    if (this.#closed || this.#interval !== undefined) return;
    this.#interval = setInterval(() => this.sweep(), this.#options.sweepIntervalMs);
  }

  /**
   * Becomes the child subreaper (unless `subreaper: false`) and starts reaping.
   *
   * @param options see {@linkcode ReaperOptions}
   */
  static start(options: ReaperOptions = {}): Reaper {
    return new Reaper({
      subreaper: options.subreaper ?? true,
      graceMs: options.graceMs ?? 0,
      held: options.held ?? false,
      sweepIntervalMs: options.sweepIntervalMs ?? 1000,
    });
  }

  /**
   * Calls `listener` for every exit reaped from now on. Returns a function that unsubscribes.
   * Subscribe before starting the process whose exit you need: an exit reaped before the
   * subscription is gone for good, and one with the same pid from before the process started
   * belongs to another process (compare {@linkcode ProcessExit.startTime}).
   *
   * @param listener called synchronously from the sweep; exceptions are logged and ignored
   */
  onExit(listener: (exit: ProcessExit) => void): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * Spawns `cmd` and registers the child so the reaper leaves its exit to Deno until
   * `child.status` settles.
   *
   * @param cmd the command to spawn
   */
  spawn(cmd: Deno.Command): Deno.ChildProcess {
    // No await between spawn() and add(): a sweep cannot run in between.
    const child = cmd.spawn();
    const pid = child.pid;
    this.#denoChildren.add(pid);
    this.#watch();
    const forget = (): void => {
      this.#denoChildren.delete(pid);
    };
    child.status.then(forget, forget);
    return child;
  }

  /** Stops reaping, drops the subreaper flag it set and forgets all listeners. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    Deno.removeSignalListener("SIGCHLD", this.#onSignal);
    if (this.#interval !== undefined) clearInterval(this.#interval);
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#options.subreaper) prctl(PR_SET_CHILD_SUBREAPER, 0);
    this.#listeners.clear();
  }

  #schedule(delayMs: number): void {
    if (this.#closed || this.#timer !== undefined) return;
    const timer = setTimeout(() => {
      this.#timer = undefined;
      this.sweep();
    }, delayMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /**
   * Looks for exited children now rather than at the next SIGCHLD or periodic sweep, and reaps
   * those that are not Deno's (after `graceMs`, when set).
   */
  sweep(): void {
    if (this.#closed || this.#held) return;
    // No child waits to be reaped (Deno took its own already, nothing exited since): nothing to
    // list. The common case for SIGCHLDs of Deno's children and for the periodic sweep, which
    // a shared server runs while its pods' processes live; only once the periodic sweep runs,
    // since a full sweep is what starts it for children nobody spawned here (a carried one).
    if (this.#interval !== undefined && !anyChildExited()) {
      this.#zombieSince.clear();
      return;
    }
    const now = Date.now();
    const children = listChildren();
    if (children.length > 0) this.#watch();
    // Deno's own children are Deno's to reap; for the others, one waitid(WNOWAIT) each instead
    // of reading /proc/<pid>/stat: a shared server sweeps past every pod's container processes.
    const zombies = children.filter((pid) => !this.#denoChildren.has(pid) && childExited(pid));
    for (const pid of this.#zombieSince.keys()) {
      if (!zombies.includes(pid)) this.#zombieSince.delete(pid);
    }
    let pidfdPids: Set<number> | undefined;
    let waiting = false;
    for (const pid of zombies) {
      if (this.#denoChildren.has(pid)) continue;
      pidfdPids ??= pidsWithPidfd();
      if (pidfdPids.has(pid)) continue;
      const since = this.#zombieSince.get(pid);
      if (
        this.#options.graceMs > 0 && (since === undefined || now - since < this.#options.graceMs)
      ) {
        if (since === undefined) this.#zombieSince.set(pid, now);
        waiting = true;
        continue;
      }
      this.#zombieSince.delete(pid);
      // Only we reap this zombie, so its /proc entry (and pid) stays its own until waitpid.
      const startTime = processStartTime(pid);
      if (this.#heldBack(startTime)) continue;
      this.#reap(pid, startTime);
    }
    if (waiting) this.#schedule(this.#options.graceMs);
  }

  #reap(pid: number, startTime: number | undefined): void {
    let raw: number | null;
    try {
      raw = waitpidNoHang(pid);
    } catch (e) {
      // Someone else (Deno) reaped it between our look and our wait.
      if (e instanceof ErrnoError && e.errno === Errno.ECHILD) return;
      throw e;
    }
    if (raw === null) return;
    const exit: ProcessExit = {
      pid,
      ...(startTime !== undefined ? { startTime } : {}),
      status: decodeWaitStatus(raw),
      exitedAt: new Date(),
    };
    for (const listener of [...this.#listeners]) {
      try {
        listener(exit);
      } catch (e) {
        console.error(`reaper: exit listener for pid ${pid} threw:`, e);
      }
    }
  }
}

/** Our direct children, across all threads (a child's parent is the thread that forked it). */
function listChildren(): number[] {
  const pids: number[] = [];
  let tasks: Iterable<Deno.DirEntry>;
  try {
    tasks = Deno.readDirSync(`/proc/${getpid()}/task`);
  } catch {
    return pids;
  }
  for (const task of tasks) {
    let text: string;
    try {
      text = Deno.readTextFileSync(`/proc/${getpid()}/task/${task.name}/children`);
    } catch {
      continue; // the thread exited meanwhile
    }
    for (const word of text.split(" ")) {
      const pid = Number(word);
      if (word !== "" && Number.isInteger(pid)) pids.push(pid);
    }
  }
  return pids;
}

/** `pidfd_open(2)`: the same number on every architecture (it came after Linux 5.1's). */
const SYS_PIDFD_OPEN = 434;
let pidfdDev: number | null | undefined;

/**
 * The device of the filesystem of a pidfd's inode, learnt once from one of our own; undefined
 * when it cannot be (no `pidfd_open`, no `statx`): then every descriptor is looked at.
 */
function pidfdDevice(): number | undefined {
  if (pidfdDev === undefined) {
    pidfdDev = null;
    try {
      const fd = Number(libc().syscall(BigInt(SYS_PIDFD_OPEN), BigInt(getpid()), 0n));
      if (fd >= 0) {
        pidfdDev = deviceNumber(fd) ?? null;
        close(fd);
      }
    } catch { /* no syscall(3) to call */ }
  }
  return pidfdDev ?? undefined;
}

/**
 * Pids for which this process holds a pidfd: Deno's own children awaiting their reap (Deno
 * reaps them; the reaper leaves them alone).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { pidsWithPidfd } from "./reaper.ts";
 * const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
 * strictEqual(pidsWithPidfd().has(child.pid), true);
 * child.kill();
 * await child.status;
 * ```
 */
export function pidsWithPidfd(): Set<number> {
  const pids = new Set<number>();
  const self = `/proc/${getpid()}`;
  const device = pidfdDevice();
  for (const entry of Deno.readDirSync(`${self}/fd`)) {
    // Only a descriptor on the filesystem of pidfds can be one: the others (pipes, sockets,
    // files; since Linux 6.9 every other anonymous inode too) are passed over without reading
    // their links, which a process serving many pods holds hundreds of.
    if (device !== undefined && deviceNumber(Number(entry.name)) !== device) continue;
    try {
      if (Deno.readLinkSync(`${self}/fd/${entry.name}`) !== "anon_inode:[pidfd]") continue;
      const info = Deno.readTextFileSync(`${self}/fdinfo/${entry.name}`);
      const m = /^Pid:\s*(-?\d+)/m.exec(info);
      if (m) pids.add(Number(m[1]));
    } catch {
      // closed meanwhile
    }
  }
  return pids;
}
