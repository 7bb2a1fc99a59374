/**
 * How long a waiting spare lives: it leaves after its idle time, when its containerd's socket
 * or process is gone (a SIGKILLed containerd leaves its socket file behind), or when its
 * launcher changed or vanished. And what it takes with it: the spares' directory of a
 * containerd that is gone, once nothing of it runs ({@linkcode tidySpareDir}).
 *
 * @module
 */

import { processStartTime } from "../../linux/proc_stat.ts";
import { spareDirCache } from "./config.ts";

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

/**
 * Whether containerd at `address` is gone: its socket missing, or nobody accepting on it (a
 * SIGKILLed containerd leaves the file, a restarted one listens there again). While `daemon`
 * (`<pid>:<start time>`), the containerd a spare was spawned under, lives, it is not gone, and
 * no connection is made.
 */
async function containerdGone(address: string, daemon: string): Promise<boolean> {
  const path = address.replace(/^unix:\/\//, "");
  try {
    Deno.statSync(path);
  } catch (e) {
    return e instanceof Deno.errors.NotFound;
  }
  if (/^\d+:\d+$/.test(daemon) && !daemonGone(daemon)) return false;
  try {
    (await Deno.connect({ transport: "unix", path })).close();
    return false;
  } catch (e) {
    return e instanceof Deno.errors.ConnectionRefused;
  }
}

/**
 * Whether a process other than this one names `address` as its `-address` (containerd passes
 * it to every shim action): a server, a spare, Deno's `start` or a launcher's shell of that
 * containerd, of whichever code, or any other shim of it.
 *
 * @param address containerd's address
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { addressInUse } from "./lifetime.ts";
 * strictEqual(addressInUse("/nonexistent/containerd.sock"), false);
 * ```
 */
export function addressInUse(address: string): boolean {
  const named = new Set([`-address=${address}`, `--address=${address}`]);
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name) || Number(e.name) === Deno.pid) continue;
    let text: string;
    try {
      text = Deno.readTextFileSync(`/proc/${e.name}/cmdline`);
    } catch {
      continue; // gone
    }
    if (!text.includes(address)) continue;
    const argv = text.split("\0");
    for (let i = 0; i < argv.length; i++) {
      if (named.has(argv[i])) return true;
      if ((argv[i] === "-address" || argv[i] === "--address") && argv[i + 1] === address) {
        return true;
      }
    }
  }
  return false;
}

function removeIfThere(path: string): void {
  try {
    Deno.removeSync(path);
  } catch { /* gone */ }
}

/**
 * Removes the spares' directory `dir` of containerd at `address` (its spares', shared servers'
 * and counters' files, the launcher's `ns-` notes) and the launcher's note of its name beside
 * it (`spareDirCache`), once nothing of that containerd is left: it is gone (its socket missing
 * or refusing) and no other process names the address (`addressInUse`: no server, spare,
 * `start` or launcher's shell of it). A spare calls it as it leaves: a spare is what notices a
 * containerd gone, and every server spawns one. True when both are gone.
 *
 * The launcher's shell never fails for it: a missing note or directory is hashed again and the
 * start goes Deno's way. The one step of the shell that ends it when the directory is gone
 * under it (creating its `start-<pid>` token, a redirection of `:`) comes only after it saw a
 * door there: the doors go first, and a shell that saw one before is found running at the
 * second look, which then keeps everything.
 *
 * @param dir the spares' directory (`spareDir`)
 * @param address containerd's address
 * @param daemon containerd's process as `<pid>:<start time>`, when known ("" otherwise)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { tidySpareDir } from "./lifetime.ts";
 * const socketDir = Deno.makeTempDirSync();
 * const dir = `${socketDir}/skiff-0123456789ab`;
 * Deno.mkdirSync(dir);
 * Deno.writeTextFileSync(`${dir}/stats-0123456789abcdef.json`, "{}");
 * // No containerd listens at this address, and no process names it.
 * strictEqual(await tidySpareDir(dir, `${socketDir}/containerd.sock`), true);
 * strictEqual([...Deno.readDirSync(socketDir)].length, 0);
 * Deno.removeSync(socketDir);
 * ```
 */
export async function tidySpareDir(dir: string, address: string, daemon = ""): Promise<boolean> {
  const quiet = async () => {
    try {
      return await containerdGone(address, daemon) && !addressInUse(address);
    } catch {
      return false;
    }
  };
  if (!(await quiet())) return false;
  let names: string[] = [];
  try {
    names = [...Deno.readDirSync(dir)].map((e) => e.name);
  } catch { /* gone already: the note may still be there */ }
  for (const name of names) if (name.endsWith(".door")) removeIfThere(`${dir}/${name}`);
  if (!(await quiet())) return false;
  try {
    Deno.removeSync(dir, { recursive: true });
  } catch (e) {
    // Something was made in it meanwhile (a containerd back at this address): theirs to keep.
    if (!(e instanceof Deno.errors.NotFound)) return false;
  }
  const note = spareDirCache(address, dir.slice(0, dir.lastIndexOf("/")) || "/");
  if (note) removeIfThere(note);
  return true;
}
