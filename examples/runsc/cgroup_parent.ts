/**
 * Why the runsc example makes a container's cgroup parent itself, on cgroup v2 only.
 *
 * runsc (gVisor) on cgroup v2 records every directory of the container's `cgroupsPath` that its
 * `create` made and removes all of them at `delete`, the leaf last-made first. Two containers
 * under a new parent (ctr's default `/<namespace>/<id>`) then break: the first one's `delete`
 * fails "removing cgroup path" (EBUSY for 5 s) because the parent still holds the other's cgroup.
 * runc and crun remove only the leaf, and on cgroup v1 runsc does too. Made beforehand, the
 * parent is not runsc's, so runsc owns just the leaf, as under a kubelet's pod cgroup.
 *
 * @module
 */

/**
 * Makes the parent of a cgroupfs `cgroupsPath` on a cgroup v2 host; a no-op for a systemd path
 * (`slice:prefix:name`), a relative path, a top-level one, or a v1/hybrid host.
 *
 * @param cgroupsPath the spec's `linux.cgroupsPath`
 * @param root where the unified hierarchy is mounted
 */
export function makeCgroupParent(cgroupsPath: string | undefined, root = "/sys/fs/cgroup"): void {
  if (!cgroupsPath?.startsWith("/")) return;
  try {
    Deno.statSync(`${root}/cgroup.controllers`);
  } catch {
    return; // not cgroup v2: runsc removes only the leaf there
  }
  const parent = cgroupsPath.replace(/\/+$/, "").replace(/\/[^/]*$/, "");
  if (!parent) return;
  try {
    Deno.mkdirSync(`${root}${parent}`, { recursive: true });
  } catch {
    // runsc's create makes the same directory and reports its own error if it cannot.
  }
}
