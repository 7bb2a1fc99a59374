/**
 * Moving a process into an existing cgroup by path, the way containerd's runc shim honours
 * runc options' `shim_cgroup` at `start`: on cgroup v2 the path is under the unified mount; on
 * v1 (and hybrid) it is taken in every v1 hierarchy where that directory exists, and at least
 * one must exist. Nothing is created: the cgroup belongs to whoever configured it.
 *
 * @module
 */

import { cgroupDir, cgroupMounts, cgroupVersion, procCgroup } from "./cgroup_paths.ts";

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

/**
 * Moves `pid` into every cgroup process `of` is in, hierarchy by hierarchy, where the two
 * differ. A warm spare server uses it to take the cgroups of the `start` that adopts it, which
 * a server spawned by that `start` would have inherited. Hierarchies not mounted here (or mounted
 * below the path) are skipped: there is nothing to write.
 *
 * @param pid the process to move
 * @param of the process whose cgroups to take
 * @returns the `cgroup.procs` files written (empty when nothing differed)
 * @throws Error naming the file when a write fails
 * @example Usage
 * ```ts ignore
 * await joinCgroupsOf(Deno.pid, peer.pid);
 * ```
 */
export async function joinCgroupsOf(pid: number, of: number): Promise<string[]> {
  const key = (controllers: string[]) => controllers.join(",");
  const have = new Map(procCgroup(pid).map((c) => [key(c.controllers), c.path]));
  const differ = procCgroup(of).filter((c) => have.get(key(c.controllers)) !== c.path);
  if (differ.length === 0) return [];
  const mounts = cgroupMounts();
  const written: string[] = [];
  for (const { controllers, path } of differ) {
    const mount = controllers.length === 0
      ? mounts.find((m) => m.fsType === "cgroup2")
      : mounts.find((m) =>
        m.fsType === "cgroup" && controllers.every((c) => m.superOptions.includes(c))
      );
    // Not mounted here, or mounted below the path: nothing to write.
    if (
      !mount || (mount.root !== "/" && path !== mount.root && !path.startsWith(`${mount.root}/`))
    ) {
      continue;
    }
    const procs = `${cgroupDir(mount, path)}/cgroup.procs`;
    try {
      await Deno.writeTextFile(procs, `${pid}\n`, { append: true, create: false });
    } catch (e) {
      throw new Error(`add pid ${pid} to cgroup "${procs}": ${(e as Error).message}`);
    }
    written.push(procs);
  }
  return written;
}
