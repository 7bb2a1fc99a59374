/**
 * Moving a process into an existing cgroup by path, the way containerd's runc shim honours
 * runc options' `shim_cgroup` at `start`: on cgroup v2 the path is under the unified mount; on
 * v1 (and hybrid) it is taken in every v1 hierarchy where that directory exists, and at least
 * one must exist. Nothing is created: the cgroup belongs to whoever configured it.
 *
 * @module
 */

import { cgroupMounts, cgroupVersion } from "./cgroup_paths.ts";

/** The mount points of one cgroup filesystem type. */
function mountPoints(fsType: "cgroup" | "cgroup2"): string[] {
  return cgroupMounts().filter((m) => m.fsType === fsType).map((m) => m.mountPoint);
}

function isDir(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}

/**
 * Moves `pid` into the cgroup `path` (e.g. `/skiff/shims`).
 *
 * @param pid the process to move
 * @param path the cgroup path, absolute within each hierarchy
 * @param version the host's cgroup mode (default: detected)
 * @returns the `cgroup.procs` files written
 * @throws Error naming the path when it exists in no hierarchy or a write fails
 * @example Usage
 * ```ts ignore
 * await joinCgroup(server.pid, "/system.slice/shims");
 * ```
 */
export async function joinCgroup(
  pid: number,
  path: string,
  version: 1 | 2 = cgroupVersion(),
): Promise<string[]> {
  if (!path.startsWith("/")) {
    throw new Error(`shim cgroup "${path}" is not an absolute cgroup path`);
  }
  const rel = path.replace(/\/+$/, "");
  const dirs = version === 2
    ? [`/sys/fs/cgroup${rel}`]
    : mountPoints("cgroup").map((m) => `${m}${rel}`).filter(isDir);
  if (dirs.length === 0 || (version === 2 && !isDir(dirs[0]))) {
    throw new Error(`shim cgroup "${path}" does not exist (cgroup v${version})`);
  }
  const written: string[] = [];
  for (const dir of dirs) {
    const procs = `${dir}/cgroup.procs`;
    try {
      await Deno.writeTextFile(procs, `${pid}\n`, { append: true, create: false });
    } catch (e) {
      throw new Error(`add pid ${pid} to shim cgroup "${procs}": ${(e as Error).message}`);
    }
    written.push(procs);
  }
  return written;
}
