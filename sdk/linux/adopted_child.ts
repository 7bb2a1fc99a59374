/**
 * A child process this process inherited across a live upgrade (`execve`): a logging binary,
 * a hypervisor. No Deno handle owns it any more, so its exit comes through the shim's reaper,
 * matched by pid and start time (the pid alone may name a later process once it was reaped).
 *
 * @module
 */

import { processStartTime } from "./proc_stat.ts";
import { isExitOf, type Reaper } from "./reaper.ts";

/**
 * An inherited child: what a `Deno.ChildProcess` offers of it, its exit from the reaper.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { AdoptedChild } from "@skiff/shim/linux";
 * const child: AdoptedChild = {
 *   pid: 4242,
 *   status: Promise.resolve({ success: false, code: 137, signal: null }),
 *   kill: () => {},
 * };
 * strictEqual((await child.status).code, 137);
 * ```
 */
export interface AdoptedChild {
  /** Its pid. */
  readonly pid: number;
  /** Its exit: the code, or 128 + the signal's number (`signal` is always null). */
  readonly status: Promise<Deno.CommandStatus>;
  /** Signals it while it is still this process's child (alive, or a zombie not yet reaped). */
  kill(signal?: Deno.Signal): void;
}

/**
 * Continues a child the previous code of this process started (its pid and start time read
 * there): its exit is taken from `reaper`. A child that is already gone (exited and reaped
 * before, its pid now another process's or nobody's) reports `exitCode`, else 255 at once.
 *
 * @param pid its pid
 * @param startTime its start time in clock ticks since boot, as read by the previous code
 * @param reaper the shim's reaper, still holding exits (subscribe before it reaps)
 * @param exitCode its exit code, when the previous code saw it exit
 * @returns the child
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { adoptChild } from "@skiff/shim/linux";
 * // A pid that is not running (its start time does not match): reported gone at once.
 * const reaper = { onExit: () => () => {} };
 * const child = adoptChild(Deno.pid, 1, reaper);
 * strictEqual((await child.status).code, 255);
 * ```
 */
export function adoptChild(
  pid: number,
  startTime: number,
  reaper: Pick<Reaper, "onExit">,
  exitCode?: number,
): AdoptedChild {
  const exited = Promise.withResolvers<Deno.CommandStatus>();
  let gone = false;
  const end = (code: number) => {
    gone = true;
    off();
    exited.resolve({ success: code === 0, code, signal: null });
  };
  const off = reaper.onExit((e) => {
    if (!gone && isExitOf(e, pid, startTime)) end(e.status);
  });
  if (exitCode !== undefined || processStartTime(pid) !== startTime) end(exitCode ?? 255);
  return {
    pid,
    status: exited.promise,
    kill: (signal: Deno.Signal = "SIGTERM") => {
      if (gone) return;
      try {
        Deno.kill(pid, signal);
      } catch { /* exited meanwhile: the reaper tells */ }
    },
  };
}
