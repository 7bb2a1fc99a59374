/**
 * Attributing exits to processes whose pid is learnt after they were started.
 *
 * A runtime starts a process and only then tells the shim its pid (a pid file); the process
 * may exit, and be reaped, before that. The shim therefore opens an {@linkcode ExitWindow}
 * before asking the runtime to start the process, and the window keeps the exits reaped while
 * it is open that no known process claimed. Once the pid is known, the window hands over an exit
 * only if it is the exit of that process: same pid, and a start time no earlier than the window
 * (or equal to the process's own, when it could still be read). An exit from before the window,
 * of an earlier process that had the same pid, is never taken: the kernel reuses pids.
 *
 * containerd's Go shim subscribes to exits around Start the same way, matching by pid alone;
 * the start time is what makes the match safe when a pid is reused within the window.
 *
 * @module
 */

import { isExitOf } from "../../linux/reaper.ts";

/** An exit as the platform reports it. */
export interface ObservedExit {
  /** The process id. */
  pid: number;
  /** The process's start time in clock ticks since boot, when known. */
  startTime?: number;
  /** Exit code, or 128+signal. */
  status: number;
  /** When it exited. */
  exitedAt: Date;
}

/**
 * Collects unclaimed exits while a process is being started, and hands over the one that is
 * that process's.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ExitWindow } from "./exit_window.ts";
 * const window = new ExitWindow(1000); // clock ticks since boot when the window opened
 * window.add({ pid: 42, startTime: 400, status: 1, exitedAt: new Date() }); // an older pid 42
 * window.add({ pid: 42, startTime: 1003, status: 7, exitedAt: new Date() }); // ours
 * strictEqual(window.take(42)?.status, 7);
 * ```
 */
export class ExitWindow {
  /** Clock ticks since boot when the window opened; undefined when unknown. */
  readonly openedAt: number | undefined;
  #exits: ObservedExit[] = [];

  /**
   * Opens a window.
   *
   * @param openedAt clock ticks since boot, read before the process is started
   */
  constructor(openedAt: number | undefined) {
    this.openedAt = openedAt;
  }

  /**
   * Records an exit that no known process claimed.
   *
   * @param exit the exit
   */
  add(exit: ObservedExit): void {
    this.#exits.push(exit);
  }

  /**
   * The exit of the process that now has `pid`, if it already happened.
   *
   * @param pid the pid the runtime reported
   * @param startTime the process's start time, when it could still be read (it is alive, or a
   *   zombie); undefined when it is gone already
   */
  take(pid: number, startTime?: number): ObservedExit | undefined {
    // The first exit that is the process's: a pid that was ours, exited and went to yet another
    // process inside the window would exit after ours.
    return this.#exits.find((e) =>
      isExitOf(e, pid, startTime) &&
      (startTime !== undefined || this.openedAt === undefined || e.startTime === undefined ||
        e.startTime >= this.openedAt)
    );
  }
}
