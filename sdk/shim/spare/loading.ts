/**
 * The spare's loading marker: `spare-<code>.loading` names the process a server spawned as the
 * next spare (`<pid> <start time>`) from its spawn until that process holds the spare's lock.
 *
 * The lock alone cannot say "a spare is on its way": a spare takes it only once Deno has booted
 * it, and at nice 19 on a busy node that is seconds after its spawn. In a burst of 20 starts every
 * server that began to serve meanwhile found the lock free and spawned a spare of its own: 18 of
 * 20 booted only to find the lock taken and exit (measured with `perf` exec/exit events,
 * `bench/scale_bench.ts --only burst`), each a Deno process's CPU and memory. With the marker, one
 * spare loads at a time.
 *
 * @module
 */

import { processAlive, processStartTime } from "../../linux/proc_stat.ts";

/** A marker with no process named yet is its spawner's for at most this long. */
const UNNAMED_MARKER_MS = 10_000;

/** The marker beside a spare's socket or lock file. */
export function loadingMarker(socketOrLock: string): string {
  return socketOrLock.replace(/\.(sock|lock)$/, ".loading");
}

/** The `<pid> <start time>` the marker names, if it names a live process. */
function liveNamed(text: string): boolean {
  const m = /^(\d+) (\d+)\n?$/.exec(text);
  // A zombie is a spare that gave up (its spawner has not reaped it yet).
  return m !== null && processStartTime(Number(m[1])) === Number(m[2]) &&
    processAlive(Number(m[1]));
}

/**
 * Claims the marker at `path` for a spare about to be spawned, unless a spare it names is still
 * on its way (or its spawner is between claiming and naming it). Returns the function that names
 * the spawned process, or undefined when another spare loads.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { claimLoading } from "./loading.ts";
 * const dir = Deno.makeTempDirSync();
 * const name = claimLoading(`${dir}/spare-a.loading`)!;
 * name(Deno.pid); // this process plays the spare that loads
 * strictEqual(claimLoading(`${dir}/spare-a.loading`), undefined);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function claimLoading(path: string): ((pid: number) => void) | undefined {
  for (let attempt = 0; attempt < 2; attempt++) {
    let file: Deno.FsFile;
    try {
      file = Deno.openSync(path, { write: true, createNew: true, mode: 0o600 });
    } catch (e) {
      if (!(e instanceof Deno.errors.AlreadyExists)) return undefined;
      if (!stale(path)) return undefined;
      try {
        Deno.removeSync(path);
      } catch { /* another spawner removed it */ }
      continue;
    }
    file.close();
    return (pid) => {
      const start = processStartTime(pid);
      // A child already gone leaves no marker: the next server may spawn again.
      if (start === undefined) return releaseLoading(path);
      Deno.writeTextFileSync(path, `${pid} ${start}\n`);
    };
  }
  return undefined;
}

/** True when the marker names no live process, or has named none for too long. */
function stale(path: string): boolean {
  try {
    const text = Deno.readTextFileSync(path);
    if (text !== "") return !liveNamed(text);
    const mtime = Deno.statSync(path).mtime?.getTime() ?? 0;
    return Date.now() - mtime > UNNAMED_MARKER_MS;
  } catch {
    return true; // gone meanwhile: free to claim
  }
}

/**
 * Removes the marker at `path` once the spare it names holds the lock, is adopted or gives up
 * (`pid`: only a marker naming that process is removed); without `pid`, whatever it names.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { claimLoading, releaseLoading } from "./loading.ts";
 * const dir = Deno.makeTempDirSync();
 * claimLoading(`${dir}/spare-a.loading`)!(Deno.pid);
 * releaseLoading(`${dir}/spare-a.loading`, Deno.pid + 1); // names another process: kept
 * strictEqual(claimLoading(`${dir}/spare-a.loading`), undefined);
 * releaseLoading(`${dir}/spare-a.loading`, Deno.pid);
 * strictEqual(typeof claimLoading(`${dir}/spare-a.loading`), "function");
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function releaseLoading(path: string, pid?: number): void {
  try {
    if (pid !== undefined) {
      // Unnamed: its spawner has not written the pid yet (then it is ours; adoption removes it).
      const named = Deno.readTextFileSync(path).split(" ")[0];
      if (Number(named) !== pid) return;
    }
    Deno.removeSync(path);
  } catch { /* gone */ }
}
