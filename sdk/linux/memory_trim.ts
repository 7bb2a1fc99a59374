/**
 * Gives a shim server's idle memory back to the kernel: one "last resort" V8 collection (the
 * one that also shrinks the young generation, drops compilation caches and releases pooled
 * heap pages) followed by glibc's `malloc_trim(0)`. A server spends nearly all its life idle,
 * so this runs once in the warm spare before it waits and once shortly after a server starts
 * listening, when the loading and the first requests have left their garbage behind (a shared
 * server: after the last of the pods that start in quick succession, {@linkcode idleTrim}).
 *
 * It needs V8's `gc` function (`--expose-gc`, part of {@linkcode DEFAULT_SHIM_V8_FLAGS} of the
 * bundled launchers); without it nothing is collected (the trim still runs). With one malloc
 * arena it took about 2.7 MiB of PSS off each runc shim server on containerd 2.1.9 (figures at
 * `DEFAULT_SHIM_V8_FLAGS`).
 *
 * @module
 */

import { libc } from "./libc.ts";

/** How long after listening a server trims: past a typical Create and Start. */
export const IDLE_TRIM_DELAY_MS = 1_000;

type GcOptions = { type: "major"; execution: "sync"; flavor: "last-resort" };

/**
 * Collects all garbage V8 can (if `gc` is exposed) and returns malloc's free pages.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { trimMemory } from "./memory_trim.ts";
 * strictEqual(trimMemory(), undefined); // without --expose-gc only malloc's free pages go back
 * ```
 */
export function trimMemory(): void {
  const gc = (globalThis as { gc?: (o: GcOptions) => void }).gc;
  gc?.({ type: "major", execution: "sync", flavor: "last-resort" });
  try {
    libc().malloc_trim(0n);
  } catch { /* no glibc: nothing to trim */ }
}

/** How many times a trim waits another {@linkcode IDLE_TRIM_DELAY_MS} for the CPUs to be free. */
export const BUSY_TRIM_POSTPONEMENTS = 8;

/**
 * Whether more tasks are runnable right now than there are CPUs (`/proc/loadavg`'s
 * running/total field), or undefined when that cannot be read.
 *
 * @param loadavg the text of `/proc/loadavg` (default: read it)
 * @param cpus the number of CPUs (default: `navigator.hardwareConcurrency`)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cpusBusy } from "./memory_trim.ts";
 * strictEqual(cpusBusy("3.10 2.05 1.50 9/211 4242\n", 2), true);
 * strictEqual(cpusBusy("0.10 0.05 0.50 1/211 4242\n", 2), false);
 * ```
 */
export function cpusBusy(loadavg?: string, cpus?: number): boolean | undefined {
  try {
    const text = loadavg ?? Deno.readTextFileSync("/proc/loadavg");
    const running = Number(/^\S+ \S+ \S+ (\d+)\//.exec(text)?.[1]);
    const n = cpus ?? navigator.hardwareConcurrency;
    return Number.isFinite(running) && n > 0 ? running > n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A process's idle trim: each ask runs {@linkcode trimMemory} once, `delayMs` later, without
 * keeping the process alive. While more tasks are runnable than there are CPUs (a burst of
 * container starts), it waits `delayMs` more, up to {@linkcode BUSY_TRIM_POSTPONEMENTS} times: a
 * trim costs 15-45 ms of CPU, which a burst would take from the starts still under way, and the
 * memory can wait that long. An ask while a trim is still to come restarts the wait (busy
 * postponements included), so that asks in quick succession trim once, after the last. A shared
 * server asks as each pod serves: a trim collects the whole heap, every pod's (about 30 ms of CPU
 * per joining pod in a server of 10 to 16), and a stream of joins needs one at its end.
 *
 * @param delayMs how long after the last ask to trim, and to wait again while the CPUs are busy
 * @param busy whether the CPUs are busy now ({@linkcode cpusBusy})
 * @param trim what to run (default {@linkcode trimMemory})
 * @returns the ask
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { idleTrim } from "./memory_trim.ts";
 * let trims = 0;
 * const { promise, resolve } = Promise.withResolvers<void>();
 * const ask = idleTrim(20, () => false, () => (trims++, resolve()));
 * ask();
 * ask(); // before the first trim ran: one trim, 20 ms after this ask
 * const alive = setInterval(() => {}, 1_000); // its timers never keep a process alive
 * await promise;
 * await new Promise((r) => setTimeout(r, 50));
 * strictEqual(trims, 1);
 * // Busy twice, then free: the trim runs at the third look.
 * let looks = 0;
 * const third = Promise.withResolvers<number>();
 * idleTrim(1, () => ++looks < 3, () => third.resolve(looks))();
 * strictEqual(await third.promise, 3);
 * clearInterval(alive);
 * ```
 */
export function idleTrim(
  delayMs: number = IDLE_TRIM_DELAY_MS,
  busy: () => boolean | undefined = cpusBusy,
  trim: () => void = trimMemory,
): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let postponed = 0;
  const wait = () => {
    timer = setTimeout(look, delayMs);
    Deno.unrefTimer(timer);
  };
  const look = () => {
    if (postponed < BUSY_TRIM_POSTPONEMENTS && busy() === true) {
      postponed++;
      return wait();
    }
    timer = undefined;
    trim();
  };
  return () => {
    clearTimeout(timer);
    postponed = 0;
    wait();
  };
}
