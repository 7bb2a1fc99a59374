/**
 * Where a container's server is: the grouping key that names its socket, and whether something
 * serves that socket. Shared by `start`, `delete` and the server, and light enough for all three.
 *
 * @module
 */

/** Annotations that group containers into one shim (a pod, or an explicit group). */
export const GROUP_ANNOTATIONS: readonly string[] = [
  "io.containerd.runc.v2.group",
  "io.kubernetes.cri.sandbox-id",
];

/** The grouping key of a bundle: a group annotation in config.json, else the id. */
export function groupKey(bundle: string, id: string): string {
  try {
    // Sync file calls on start's path: each async one costs a thread-pool round trip.
    const spec = JSON.parse(Deno.readTextFileSync(`${bundle}/config.json`));
    const ann = (spec?.annotations ?? {}) as Record<string, string>;
    for (const key of GROUP_ANNOTATIONS) if (ann[key]) return ann[key];
  } catch { /* no spec (sandboxes may have none): no grouping */ }
  return id;
}

/** True when a file (of any kind) is at `path`; a dangling symlink counts. */
export function pathPresent(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** True when something accepts connections on the unix socket. */
export async function socketAlive(path: string): Promise<boolean> {
  // No file, no server: the usual case of a fresh container, answered without a connect.
  if (!pathPresent(path)) return false;
  try {
    const c = await Deno.connect({ transport: "unix", path });
    c.close();
    return true;
  } catch {
    return false;
  }
}
