/**
 * Test-side cgroup helpers for integration tests that put shims into cgroups of their own (runc
 * options' `shim_cgroup`, a containerd moved while a spare waits).
 *
 * @module
 */

import { cgroupVersion } from "../sdk/linux/cgroup_paths.ts";

/** Where a cgroup path lives in every hierarchy this host uses for it (v1: each controller). */
export function cgroupDirs(path: string): string[] {
  if (cgroupVersion() === 2) return [`/sys/fs/cgroup${path}`];
  const dirs: string[] = [];
  for (const line of Deno.readTextFileSync("/proc/self/mountinfo").split("\n")) {
    const [pre, post] = line.split(" - ");
    if (pre && post?.startsWith("cgroup ")) dirs.push(`${pre.split(" ")[4]}${path}`);
  }
  return dirs;
}

/** Creates a cgroup in every hierarchy; a new v1 cpuset level gets its parent's cpus and mems. */
export async function makeCgroup(path: string): Promise<string[]> {
  const dirs = cgroupDirs(path);
  // On v2 an empty cpuset.cpus means "the parent's" (and the root has none to copy).
  const v1 = cgroupVersion() === 1;
  for (const dir of dirs) {
    const levels = path.split("/").filter(Boolean);
    let at = dir.slice(0, dir.length - path.length);
    for (const level of levels) {
      const parent = at;
      at = `${at}/${level}`;
      await Deno.mkdir(at).catch((e) => {
        if (!(e instanceof Deno.errors.AlreadyExists)) throw e;
      });
      for (const file of v1 ? ["cpuset.cpus", "cpuset.mems"] : []) {
        const own = await Deno.readTextFile(`${at}/${file}`).catch(() => undefined);
        if (own === undefined || own.trim() !== "") continue;
        await Deno.writeTextFile(`${at}/${file}`, await Deno.readTextFile(`${parent}/${file}`));
      }
    }
  }
  return dirs;
}

export function procsOf(dir: string): number[] {
  return Deno.readTextFileSync(`${dir}/cgroup.procs`).split("\n").filter(Boolean).map(Number);
}
