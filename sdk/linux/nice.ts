/**
 * Scheduling niceness, per thread. A warm spare server loads at the lowest priority, so that on
 * a busy node it takes CPU only from idle time and not from the container being started; once
 * adopted it takes the priority its `start` had. Raising a priority again needs
 * `CAP_SYS_NICE`, so a spare is only lowered where it could be raised back.
 *
 * @module
 */

import { check, libc } from "./libc.ts";

// Read from /proc/<pid>/stat like the process's start time; kept here too for callers of this module.
export { niceOf } from "./proc_stat.ts";

/** `PRIO_PROCESS`: on Linux, `setpriority` with it sets one thread. */
const PRIO_PROCESS = 0;
/** Bit of `CAP_SYS_NICE` in the capability sets. */
const CAP_SYS_NICE = 23;

/**
 * True when this process may raise a priority again (`CAP_SYS_NICE` effective).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { mayRaisePriority } from "./nice.ts";
 * strictEqual(typeof mayRaisePriority(), "boolean");
 * ```
 */
export function mayRaisePriority(): boolean {
  try {
    const status = Deno.readTextFileSync("/proc/self/status");
    const hex = /^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1];
    return hex !== undefined && ((BigInt(`0x${hex}`) >> BigInt(CAP_SYS_NICE)) & 1n) === 1n;
  } catch {
    return false;
  }
}

/**
 * Sets the nice value of every thread of this process (threads created later inherit their
 * creator's).
 *
 * @throws Error naming the thread and value when the kernel refuses
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { niceOf } from "./proc_stat.ts";
 * import { setProcessNice } from "./nice.ts";
 * const nice = niceOf("self");
 * setProcessNice(nice); // the same value needs no privilege
 * strictEqual(niceOf("self"), nice);
 * ```
 */
export function setProcessNice(nice: number): void {
  for (const task of Deno.readDirSync("/proc/self/task")) {
    const tid = Number(task.name);
    try {
      check(`setpriority(thread ${tid}, ${nice})`, libc().setpriority(PRIO_PROCESS, tid, nice));
    } catch (e) {
      // A thread that exited since the listing is no error.
      let alive = true;
      try {
        Deno.statSync(`/proc/self/task/${tid}`);
      } catch {
        alive = false;
      }
      if (alive) throw e;
    }
  }
}

/**
 * Sets the nice value of the autogroup of process `pid` (`/proc/<pid>/autogroup`), best
 * effort. With `sched_autogroup` on, as on most desktop and server kernels, each session in
 * the root CPU cgroup is one scheduling entity, and a thread's own nice value only weighs
 * against threads of the same session; a process that called `setsid` therefore competes at
 * full weight whatever its nice value, unless its autogroup is lowered too. A new autogroup
 * starts at 0.
 *
 * @returns false when the kernel has no autogroups or refused (no error: priority is a hint)
 * @example Usage
 * ```ts ignore
 * setAutogroupNice(child.pid, 19);
 * ```
 */
export function setAutogroupNice(pid: number | "self", nice: number): boolean {
  try {
    Deno.writeTextFileSync(`/proc/${pid}/autogroup`, String(nice));
    return true;
  } catch {
    return false;
  }
}
