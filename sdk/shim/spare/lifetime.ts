/**
 * How long a waiting spare lives: it leaves after its idle time, when its containerd's socket
 * or process is gone (a SIGKILLed containerd leaves its socket file behind), or when its
 * launcher changed or vanished.
 *
 * @module
 */

import { processStartTime } from "../../linux/proc_stat.ts";

/** How often the spare checks its idle time, containerd and its launcher. */
const WATCH_MS = 1_000;

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** What {@linkcode watchLifetime} watches. */
export interface LifetimeWatch {
  /** The launcher file, and its bytes when the spare took its lock. */
  launcher: string;
  launcherText: Uint8Array;
  /** containerd's address (`-address`): its socket gone means leave. */
  address: string;
  /** containerd's process as `<pid>:<start time>` ("" when unknown). */
  daemon: string;
  /** How long the spare may wait unused. */
  idleMs: number;
  /** Called once when the spare should leave. */
  onExpired(): void;
}

/**
 * Whether containerd's process `daemon` (`<pid>:<start time>`, as `containerdProcess` in
 * ./handoff.ts gives it) is gone: no such pid, or a later process with it. False when unknown.
 *
 * @param daemon containerd's process, or ""
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { daemonGone } from "./lifetime.ts";
 * strictEqual(daemonGone(""), false);
 * strictEqual(daemonGone(`${Deno.pid}:0`), true); // this process, started at another time
 * ```
 */
export function daemonGone(daemon: string): boolean {
  const [pid, start] = daemon.split(":");
  return Number(pid) > 1 && start !== undefined && start !== "" &&
    String(processStartTime(Number(pid)) ?? "") !== start;
}

/**
 * Checks every second; returns the function that stops the watch (on adoption).
 *
 * @example Usage
 * ```ts ignore
 * const stop = watchLifetime({ launcher, launcherText, address, daemon, idleMs, onExpired });
 * ```
 */
export function watchLifetime(w: LifetimeWatch): () => void {
  const deadline = Date.now() + w.idleMs;
  const daemonSocket = w.address.replace(/^unix:\/\//, "");
  const text = w.launcherText;
  const watch = setInterval(() => {
    let reinstalled = false;
    try {
      // The bytes, not their hash: this runs every second for as long as the spare waits.
      const now = Deno.readFileSync(w.launcher);
      reinstalled = now.length !== text.length || now.some((b, i) => b !== text[i]);
    } catch {
      reinstalled = true; // the launcher is gone
    }
    if (
      Date.now() >= deadline || reinstalled || (daemonSocket && !exists(daemonSocket)) ||
      daemonGone(w.daemon)
    ) {
      clearInterval(watch);
      w.onExpired();
    }
  }, WATCH_MS);
  return () => clearInterval(watch);
}
