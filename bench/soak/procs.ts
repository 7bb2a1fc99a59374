/**
 * Process-table reads for leak checks: a shim's pid by container id, a process's descendants
 * and which of them are zombies.
 *
 * @example Usage
 * ```ts ignore
 * const shim = shimOf(c, "ns", "long");
 * if (shim) console.log(zombiesUnder(shim));
 * ```
 *
 * @module
 */

import type { PrivateContainerd } from "../../sdk/testing/containerd.ts";

/** pid → [ppid, state] of every process now. */
function table(): Map<number, { ppid: number; state: string }> {
  const out = new Map<number, { ppid: number; state: string }>();
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${e.name}/stat`);
      // comm may hold spaces and parens: the fields after the last ")" are state, ppid, ...
      const [state, ppid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(Number(e.name), { ppid: Number(ppid), state: state ?? "?" });
    } catch { /* exited meanwhile */ }
  }
  return out;
}

/**
 * Descendants of `pid` (children, grandchildren, ...) with their state letter.
 *
 * @param pid the ancestor
 * @returns pid and state (`Z` for a zombie) of each descendant
 */
export function descendants(pid: number): { pid: number; state: string }[] {
  const t = table();
  const out: { pid: number; state: string }[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const p = queue.shift()!;
    for (const [child, info] of t) {
      if (info.ppid === p) {
        out.push({ pid: child, state: info.state });
        queue.push(child);
      }
    }
  }
  return out;
}

/**
 * Zombies among the descendants of `pid`.
 *
 * @param pid the ancestor (a shim)
 * @returns the zombies' pids
 */
export function zombiesUnder(pid: number): number[] {
  return descendants(pid).filter((d) => d.state === "Z").map((d) => d.pid);
}

/**
 * The shim process containerd started for container `id` in namespace `ns`: the one whose argv
 * names it; else the live server the container's bundle names in `shim.pid` (a pod that joined
 * a shared server, `SKIFF_SHARED_PODS`: the process's argv names its first pod).
 *
 * @param c the private containerd
 * @param ns namespace
 * @param id container id (or group key)
 * @returns its pid, or undefined when none runs
 */
export function shimOf(c: PrivateContainerd, ns: string, id: string): number | undefined {
  const shims = c.shims();
  const byArgv = shims.find((s) => {
    const a = s.argv;
    return a[a.indexOf("-id") + 1] === id && a[a.indexOf("-namespace") + 1] === ns;
  })?.pid;
  if (byArgv !== undefined) return byArgv;
  try {
    const pid = Number(
      Deno.readTextFileSync(`${c.state}/io.containerd.runtime.v2.task/${ns}/${id}/shim.pid`)
        .trim(),
    );
    return shims.some((s) => s.pid === pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Shims of namespace `ns`.
 *
 * @param c the private containerd
 * @param ns namespace
 * @returns pid and `-id` of each
 */
export function shimsIn(c: PrivateContainerd, ns: string): { pid: number; id: string }[] {
  return c.shims().filter((s) => s.argv[s.argv.indexOf("-namespace") + 1] === ns)
    .map((s) => ({ pid: s.pid, id: s.argv[s.argv.indexOf("-id") + 1] ?? "" }));
}
