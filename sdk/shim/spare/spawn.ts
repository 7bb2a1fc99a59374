/**
 * Spawning the next warm spare: a server calls it once it serves (the spare extension), off
 * `start`'s path.
 *
 * @module
 */

import type { SpareConfig } from "./config.ts";
import { SPARE_DAEMON_ENV, SPARE_NICE_ENV } from "./handoff.ts";
import { mayRaisePriority, niceOf, setAutogroupNice } from "../../linux/nice.ts";
import { claimLoading, loadingMarker, releaseLoading } from "./loading.ts";
import { daemonGone } from "./lifetime.ts";

/** coreutils' `nice`, which starts a spare at the lowest priority. */
const NICE = "/usr/bin/nice";

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/**
 * Spawns the next spare unless one is alive, loading (it holds the lock) or on its way (the
 * loading marker names it: `./loading.ts`). A server calls it once it serves (off `start`'s
 * path); the spare inherits its environment (`start`'s), and takes the cgroups, OOM score and
 * priority of the `start` that adopts it.
 *
 * @param cfg the spare's place
 * @param address containerd's address
 * @param publishBinary containerd's binary
 * @example Usage
 * ```ts ignore
 * spawnSpare(cfg, flags.address, flags.publishBinary, daemon);
 * ```
 */
export function spawnSpare(
  cfg: SpareConfig,
  address: string,
  publishBinary: string,
  daemon: string,
  spawn: (cmd: Deno.Command) => Deno.ChildProcess = (cmd) => cmd.spawn(),
): void {
  // Sync calls: this runs on start's path, and each async file call is a thread-pool hop.
  try {
    // A spare leaves once its containerd's socket is gone: none is worth loading without one.
    Deno.statSync(address.replace(/^unix:\/\//, ""));
  } catch {
    return;
  }
  // Nor for a containerd process that is gone (a server from before containerd restarted): the
  // spare would leave within its first second, maybe with a start in hand. The next start
  // spawns one that names the containerd of now.
  if (daemonGone(daemon)) return;
  Deno.mkdirSync(cfg.dir, { recursive: true, mode: 0o700 });
  const lock = Deno.openSync(cfg.lock, { read: true, write: true, create: true, mode: 0o600 });
  try {
    if (!lock.tryLockSync(true)) return; // a spare holds it
    lock.unlockSync();
  } finally {
    lock.close();
  }
  // A spare spawned but not yet holding the lock (booting at nice 19 takes seconds on a busy node).
  const name = claimLoading(loadingMarker(cfg.lock));
  if (!name) return;
  // Loading at the lowest priority takes CPU from idle time, not from the container being
  // started; only where the spare may raise its priority back once adopted.
  const args = [
    "-spare",
    "-address",
    address,
    "-publish-binary",
    publishBinary,
    "-socket",
    cfg.socket,
  ];
  const nice = mayRaisePriority() && isFile(NICE) ? [NICE, "-n", "19"] : [];
  let child: Deno.ChildProcess;
  try {
    child = spawn(
      new Deno.Command(nice[0] ?? cfg.launcher, {
        args: [...nice.slice(1), ...(nice.length ? [cfg.launcher] : []), ...args],
        // The priority to return to as soon as a start connects (the handoff then says start's).
        env: { [SPARE_DAEMON_ENV]: daemon, [SPARE_NICE_ENV]: String(niceOf("self")) },
        cwd: "/",
        stdin: "null",
        stdout: "null",
        stderr: "null",
        detached: true,
      }),
    );
  } catch (e) {
    releaseLoading(loadingMarker(cfg.lock));
    throw e;
  }
  name(child.pid);
  // Its new session is its own autogroup, which would weigh as much as the container's.
  if (nice.length) setAutogroupNice(child.pid, 19);
  child.unref();
}
