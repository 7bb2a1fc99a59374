/**
 * What a private containerd's teardown removes besides its dir, all outside it: the shims'
 * sockets and skiff's spare dir under `/run`, containers left in its private runc root, and its
 * cgroup tree. {@linkcode PrivateContainerd.stop} calls these after every process is gone.
 *
 * @module
 */

import { spareDir, spareDirCache } from "../shim/spare/mod.ts";

const dec = new TextDecoder();

async function sha256Hex(text: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Removes the sockets the shims of `address` may have left: the Go shims listen on
 * `/run/containerd/s/<sha256(address/ns/id)>` (a killed one leaves it), skiff shims with the
 * operations endpoint on also leave `<socket>.ops`; and skiff's warm spares of this containerd
 * (their sockets, locks and counters, and the launcher's note of where they live).
 *
 * @param address the containerd's gRPC socket
 * @param containers `ns/id` of every container the shims may have served
 *
 * @example Usage
 * ```ts ignore
 * await removeShimSockets(c.address, ["test/my-id"]);
 * ```
 */
export async function removeShimSockets(
  address: string,
  containers: Iterable<string>,
): Promise<void> {
  for (const key of containers) {
    const hex = await sha256Hex(`${address}/${key}`);
    await Deno.remove(`/run/containerd/s/${hex}`).catch(() => undefined);
    await Deno.remove(`/run/containerd/s/${hex}.ops`).catch(() => undefined);
  }
  await Deno.remove(spareDir(address), { recursive: true }).catch(() => undefined);
  const cache = spareDirCache(address);
  if (cache) await Deno.remove(cache).catch(() => undefined);
}

/**
 * Removes the (now empty) cgroup dirs under `/<parent>` in every cgroup hierarchy mounted.
 *
 * @param parent the instance's cgroup parent (`PrivateContainerd.cgroupParent`)
 *
 * @example Usage
 * ```ts
 * import { removeCgroupTree } from "./containerd_teardown.ts";
 * await removeCgroupTree("skiff-no-such-parent"); // nothing there: nothing to do
 * ```
 */
export async function removeCgroupTree(parent: string): Promise<void> {
  const info = await Deno.readTextFile("/proc/self/mountinfo");
  for (const line of info.split("\n")) {
    const [pre, post] = line.split(" - ");
    if (!pre || !post || !/^cgroup2? /.test(post)) continue;
    const top = `${pre.split(" ")[4]}/${parent}`;
    const dirs: string[] = [];
    const walk = (d: string) => {
      try {
        for (const e of Deno.readDirSync(d)) if (e.isDirectory) walk(`${d}/${e.name}`);
        dirs.push(d);
      } catch { /* missing in this hierarchy */ }
    };
    walk(top);
    // Children before parents; a cgroup dir is removed with rmdir even though it lists files.
    for (const d of dirs) await Deno.remove(d).catch(() => undefined);
  }
}

/**
 * Force-deletes every container runc still lists in a private runc root (one root per
 * namespace below it, as the Go runc shim lays them out).
 *
 * @param runcRoot the instance's runc root (`PrivateContainerd.runcRoot`)
 *
 * @example Usage
 * ```ts
 * import { deleteRuncContainers } from "./containerd_teardown.ts";
 * await deleteRuncContainers("/tmp/no-such-runc-root"); // missing: nothing to do
 * ```
 */
export async function deleteRuncContainers(runcRoot: string): Promise<void> {
  let namespaces: string[] = [];
  try {
    namespaces = [...Deno.readDirSync(runcRoot)].filter((e) => e.isDirectory)
      .map((e) => e.name);
  } catch {
    return;
  }
  for (const ns of namespaces) {
    const root = `${runcRoot}/${ns}`;
    const list = await new Deno.Command("runc", {
      args: ["--root", root, "list", "-q"],
      stdout: "piped",
      stderr: "null",
    }).output().catch(() => undefined);
    for (const id of dec.decode(list?.stdout ?? new Uint8Array()).split("\n").filter(Boolean)) {
      await new Deno.Command("runc", {
        args: ["--root", root, "delete", "--force", id],
        stdout: "null",
        stderr: "null",
      }).output().catch(() => undefined);
    }
  }
}
