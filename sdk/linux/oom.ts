/**
 * OOM notifications for a process's memory cgroup, as `/tasks/oom` needs them.
 *
 * - cgroup v1: an eventfd registered through `cgroup.event_control` for `memory.oom_control`;
 *   the kernel signals it on every OOM and when the cgroup is removed (which is not reported).
 * - cgroup v2: inotify on `memory.events`; every increase of `oom_kill` is one notification.
 *
 * @module
 */

import { check, close, cstr, libc, O, open, readFd, writeFd } from "./libc.ts";
import { Canceller, POLLIN, waitFd } from "./poll.ts";
import { CgroupNotFoundError, cgroupV1Paths, cgroupV2Path, cgroupVersion } from "./cgroup_paths.ts";
import { readKeyValues, readOptional } from "./cgroup_files.ts";

/**
 * A running OOM watch.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type OomWatch, watchOomV2At } from "./oom.ts";
 * // A directory with a memory.events file stands in for a v2 cgroup.
 * const dir = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${dir}/memory.events`, "oom 0\noom_kill 0\n");
 * const watch: OomWatch = watchOomV2At(dir, () => {});
 * watch.close();
 * strictEqual(await watch.done, undefined); // settles once stopped
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export interface OomWatch {
  /** Stops watching; idempotent. */
  close(): void;
  /** Settles once the watch has stopped (closed, or its cgroup was removed). */
  readonly done: Promise<void>;
}

/**
 * Calls `onOom` whenever a process in `pid`'s memory cgroup is OOM-killed (v2) or the cgroup
 * hits its limit (v1). Throws `CgroupNotFoundError` when the cgroup does not exist. Watching
 * stops by itself when the cgroup is removed.
 *
 * @example Usage
 * ```ts ignore
 * const watch = await watchOom(initPid, () => publish("/tasks/oom", { containerId: id }));
 * // ... on init exit:
 * watch.close();
 * ```
 */
export function watchOom(pid: number, onOom: () => void): Promise<OomWatch> {
  try {
    if (cgroupVersion() === 2) return Promise.resolve(watchOomV2At(cgroupV2Path(pid), onOom));
    const dir = cgroupV1Paths(pid).get("memory");
    if (!dir) throw new CgroupNotFoundError(pid, "no v1 memory controller directory");
    return Promise.resolve(watchOomV1At(dir, onOom));
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * The v1 watch on the memory cgroup directory `dir`.
 *
 * @example Usage
 * ```ts ignore
 * const watch = watchOomV1At("/sys/fs/cgroup/memory/web", () => console.log("oom"));
 * ```
 */
export function watchOomV1At(dir: string, onOom: () => void): OomWatch {
  const control = `${dir}/memory.oom_control`;
  const efd = check(`eventfd for "${control}"`, libc().eventfd(0, 0o2000000 | 0o4000));
  let ofd = -1;
  try {
    ofd = open(control, O.RDONLY);
    const ec = open(`${dir}/cgroup.event_control`, O.WRONLY);
    try {
      writeFd(ec, new TextEncoder().encode(`${efd} ${ofd}`), `"${dir}/cgroup.event_control"`);
    } finally {
      close(ec);
    }
  } catch (e) {
    if (ofd !== -1) close(ofd);
    close(efd);
    throw e;
  }
  return loop(efd, `oom eventfd of "${dir}"`, onOom, () => {
    // The eventfd also fires when the cgroup is removed: that is the end, not an OOM.
    if (readOptional(control) === undefined) return "stop";
    return "oom";
  }, () => close(ofd));
}

/**
 * The v2 watch on the cgroup directory `dir` (only `memory.events` is used).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { watchOomV2At } from "./oom.ts";
 * const dir = Deno.makeTempDirSync(); // stands in for /sys/fs/cgroup/default/web
 * Deno.writeTextFileSync(`${dir}/memory.events`, "oom 0\noom_kill 0\n");
 * let ooms = 0;
 * const { promise: killed, resolve } = Promise.withResolvers<void>();
 * const watch = watchOomV2At(dir, () => (ooms++, resolve()));
 * Deno.writeTextFileSync(`${dir}/memory.events`, "oom 1\noom_kill 1\n"); // the kernel's update
 * await killed;
 * Deno.removeSync(`${dir}/memory.events`); // the cgroup goes away: the watch ends by itself
 * await watch.done;
 * strictEqual(ooms, 1);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function watchOomV2At(dir: string, onOom: () => void): OomWatch {
  const events = `${dir}/memory.events`;
  const IN_NONBLOCK = 0o4000;
  const IN_CLOEXEC = 0o2000000;
  const IN_MODIFY = 0x2;
  const fd = check(`inotify for "${events}"`, libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  try {
    check(`watch "${events}"`, libc().inotify_add_watch(fd, cstr(events), IN_MODIFY));
  } catch (e) {
    close(fd);
    throw e;
  }
  let seen = oomKills(events) ?? 0n;
  return loop(fd, `inotify of "${events}"`, onOom, () => {
    const now = oomKills(events);
    if (now === undefined) return "stop"; // cgroup removed
    if (now <= seen) return "continue";
    seen = now;
    return "oom";
  });
}

function oomKills(path: string): bigint | undefined {
  if (readOptional(path) === undefined) return undefined;
  return readKeyValues(path).get("oom_kill") ?? 0n;
}

/**
 * Reads `fd` until cancelled; after each wake-up `decide` tells whether it was an OOM to report,
 * a change that is not one, or the end of the cgroup.
 */
function loop(
  fd: number,
  what: string,
  onOom: () => void,
  decide: () => "oom" | "continue" | "stop",
  cleanup: () => void = () => {},
): OomWatch {
  const canceller = new Canceller();
  const buf = new Uint8Array(4096);
  const done = (async () => {
    try {
      while (await waitFd(fd, POLLIN, canceller)) {
        // Drain: the eventfd counter or a batch of inotify events.
        for (let n = readFd(fd, buf, what); n !== null && n > 0; n = readFd(fd, buf, what));
        const verdict = decide();
        if (verdict === "stop") return;
        if (verdict === "oom") {
          try {
            onOom();
          } catch (e) {
            console.error(`oom watch (${what}): listener threw:`, e);
          }
        }
      }
    } finally {
      close(fd);
      cleanup();
      canceller.close();
    }
  })();
  return {
    done,
    close: () => canceller.cancel(),
  };
}
