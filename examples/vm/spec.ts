/**
 * A container's OCI spec as the guest must see it. containerd (and CRI) write the bundle for the
 * host; the guest sees the host's root read-only over 9p except `/run` and `/tmp` (its own
 * tmpfs), so the VM shim shares what lives there (the rootfs, CRI's `/dev/shm`, the harness's
 * `/etc/hosts` in a temp dir) through the pod's share and rewrites the paths. What names host
 * objects the guest does not have goes: a network namespace file (the guest makes its own), the
 * host's cgroup path (the guest's cgroupfs needs a plain path), AppArmor/SELinux labels (the
 * guest loads no policy), hooks (host binaries). Namespace paths `/proc/<pid>/ns/*` stay: the
 * pids the shim reports are guest pids, so CRI's `/proc/<pause pid>/ns/net` names the pause
 * container's namespace in the guest. On the `shim` sandboxer's path the pod's pid is the VM's
 * (QEMU's on the host): a namespace CRI names by it is the VM's own, so the entry goes and runc
 * keeps the guest's (the agent's) namespace, which every container of the pod shares.
 *
 * @module
 */

/** The parts of an OCI spec this rewrite reads. */
interface Spec {
  root?: { path?: string; readonly?: boolean };
  process?: Record<string, unknown>;
  mounts?: { destination: string; type?: string; source?: string; options?: string[] }[];
  hooks?: unknown;
  linux?: {
    cgroupsPath?: string;
    namespaces?: { type: string; path?: string }[];
    mountLabel?: string;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}

/** A host path to share into the guest. */
export interface HostShare {
  /** The host path (a directory or a file). */
  source: string;
  /** Its name in the container's share directory. */
  name: string;
}

/** Where the host's paths under these are not the guest's. */
const GUEST_PRIVATE = ["/run/", "/var/run/", "/tmp/"];

/**
 * Rewrites a container's spec for the guest.
 *
 * @param spec the bundle's config.json, parsed
 * @param id the container id (its cgroup in the guest)
 * @param hostBundle the bundle directory on the host (relative root paths are under it)
 * @param guestDir where the guest sees the container's share directory
 * @param vmPid the pod's pid when it is the VM's (the `shim` sandboxer), else undefined
 * @returns the guest's spec and the host paths to bind into the share directory first
 */
export function guestSpec(
  spec: Spec,
  id: string,
  hostBundle: string,
  guestDir: string,
  vmPid?: number,
): { spec: Spec; shares: HostShare[] } {
  const out: Spec = structuredClone(spec);
  const rootPath = spec.root?.path ?? "rootfs";
  const shares: HostShare[] = [{
    source: rootPath.startsWith("/") ? rootPath : `${hostBundle}/${rootPath}`,
    name: "rootfs",
  }];
  out.root = { ...spec.root, path: `${guestDir}/rootfs` };
  out.mounts = (spec.mounts ?? []).map((m, i) => {
    const bind = m.type === "bind" || (m.options ?? []).some((o) => o === "bind" || o === "rbind");
    if (!bind || !m.source || !GUEST_PRIVATE.some((p) => m.source!.startsWith(p))) return m;
    shares.push({ source: m.source, name: `m${i}` });
    return { ...m, source: `${guestDir}/m${i}` };
  });
  if (out.process) out.process = guestProcess(out.process);
  delete out.hooks;
  if (out.linux) {
    out.linux.cgroupsPath = `/skiff-vm/${id}`;
    delete out.linux.mountLabel;
    out.linux.namespaces = out.linux.namespaces?.filter((ns) =>
      !ns.path?.startsWith(`/proc/${vmPid}/ns/`)
    ).map((ns) => ns.path && !/^\/proc\/\d+\/ns\//.test(ns.path) ? { type: ns.type } : ns);
  }
  return { spec: out, shares };
}

/**
 * An OCI process (the init's or an exec's) for the guest: without host security labels.
 *
 * @param process the process object
 * @returns a copy without `apparmorProfile` and `selinuxLabel`
 */
export function guestProcess(process: Record<string, unknown>): Record<string, unknown> {
  const { apparmorProfile: _a, selinuxLabel: _s, ...rest } = process;
  return rest;
}
