/**
 * Process identity from `/proc`: a pid alone is not an identity (the kernel reuses pids once a
 * process has been reaped), but a pid with its start time is, for as long as the machine runs.
 *
 * @module
 */

/**
 * Clock ticks per second of the start times in `/proc/<pid>/stat` (`USER_HZ`). The kernel fixes
 * it at 100 for every userspace ABI Linux has (`sysconf(_SC_CLK_TCK)`).
 */
export const CLOCK_TICKS_PER_SECOND = 100;

/**
 * Fields of `/proc/<pid>/stat` after the command name, which may itself hold spaces and
 * parentheses: field 3 (state) is at index 0, field 22 (starttime) at index 19.
 */
function statFields(pid: number): string[] | undefined {
  let stat: string;
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return undefined;
  }
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * The one-letter state of `pid` ("R", "S", "Z" for a zombie, ...), or undefined when there is
 * no such process.
 *
 * @param pid the process id
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { processState } from "./proc_stat.ts";
 * strictEqual(processState(Deno.pid) !== "Z", true);
 * ```
 */
export function processState(pid: number): string | undefined {
  return statFields(pid)?.[0];
}

/**
 * True while `pid` exists and has not exited: a zombie (exited, not yet reaped) is not alive.
 *
 * @param pid the process id
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { processAlive } from "./proc_stat.ts";
 * strictEqual(processAlive(Deno.pid), true);
 * ```
 */
export function processAlive(pid: number): boolean {
  const state = processState(pid);
  return state !== undefined && state !== "Z";
}

/**
 * The parent of `pid` (field 4 of `/proc/<pid>/stat`: the parent's process id, whichever of its
 * threads forked it), or undefined when there is no such process.
 *
 * @param pid the process id
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { processParent } from "./proc_stat.ts";
 * const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
 * strictEqual(processParent(child.pid), Deno.pid);
 * child.kill();
 * await child.status;
 * ```
 */
export function processParent(pid: number): number | undefined {
  const field = statFields(pid)?.[1];
  const ppid = Number(field);
  return field !== undefined && Number.isSafeInteger(ppid) ? ppid : undefined;
}

/**
 * When `pid` started, in clock ticks since boot (field 22 of `/proc/<pid>/stat`), or undefined
 * when there is no such process. A zombie still has it: read it before reaping.
 *
 * @param pid the process id
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { processStartTime } from "./proc_stat.ts";
 * strictEqual(processStartTime(Deno.pid)! > 0, true);
 * ```
 */
export function processStartTime(pid: number): number | undefined {
  const field = statFields(pid)?.[19];
  const ticks = Number(field);
  return field !== undefined && Number.isSafeInteger(ticks) ? ticks : undefined;
}

/**
 * Clock ticks since boot now, on the clock process start times use (`/proc/uptime`, boot time
 * in hundredths of a second). Every process started from now on has a start time at least this.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { bootTicks, processStartTime } from "./proc_stat.ts";
 * strictEqual(processStartTime(Deno.pid)! <= bootTicks(), true);
 * ```
 */
export function bootTicks(): number {
  const [seconds] = Deno.readTextFileSync("/proc/uptime").split(" ");
  // "12345.67": parse the digits, not a float, so no rounding moves it past a start time.
  const [whole, frac = "0"] = seconds.split(".");
  return Number(whole) * CLOCK_TICKS_PER_SECOND + Number(frac.padEnd(2, "0").slice(0, 2));
}

/**
 * The nice value of process (thread-group leader) `pid` from `/proc/<pid>/stat`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { niceOf } from "./proc_stat.ts";
 * strictEqual(Number.isInteger(niceOf("self")), true);
 * ```
 */
export function niceOf(pid: number | "self"): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
}
