/**
 * Locating a process's cgroup directories on cgroup v1 (one hierarchy per controller) and v2
 * (the unified hierarchy), from /proc/<pid>/cgroup and /proc/self/mountinfo.
 *
 * @module
 */

/**
 * The process or its cgroup does not exist (Task.Stats answers NotFound).
 *
 * @example Usage
 * ```ts
 * import { strictEqual, throws } from "node:assert/strict";
 * import { CgroupNotFoundError, cgroupV1Paths } from "./cgroup_paths.ts";
 * // Above the kernel's largest pid_max: no such process. Task.Stats maps this to NotFound.
 * throws(() => cgroupV1Paths(2 ** 22 + 1), CgroupNotFoundError);
 * strictEqual(new CgroupNotFoundError(7, "gone").message, "cgroup of pid 7 not found: gone");
 * ```
 */
export class CgroupNotFoundError extends Error {
  /** The process whose cgroup was looked up. */
  readonly pid: number;

  /**
   * Builds the error for `pid`.
   *
   * @param pid the process
   * @param detail what is missing
   */
  constructor(pid: number, detail: string) {
    super(`cgroup of pid ${pid} not found: ${detail}`);
    this.name = "CgroupNotFoundError";
    this.pid = pid;
  }
}

/** One mounted cgroup hierarchy, from `/proc/self/mountinfo`. */
export interface CgroupMount {
  /** The hierarchy's path mounted there (usually "/"). */
  root: string;
  /** Where it is mounted. */
  mountPoint: string;
  /** `cgroup` (v1) or `cgroup2`. */
  fsType: string;
  /** Super options: the v1 controllers, among others. */
  superOptions: string[];
}

function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
}

/**
 * The cgroup hierarchies mounted in this mount namespace.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cgroupMounts } from "./cgroup_paths.ts";
 * const v1 = cgroupMounts().filter((m) => m.fsType === "cgroup").map((m) => m.mountPoint);
 * strictEqual(v1.every((dir) => dir.startsWith("/")), true);
 * ```
 */
export function cgroupMounts(): CgroupMount[] {
  const out: CgroupMount[] = [];
  for (const line of Deno.readTextFileSync("/proc/self/mountinfo").split("\n")) {
    const dash = line.indexOf(" - ");
    if (dash === -1) continue;
    const left = line.slice(0, dash).split(" ");
    const [fsType, , superOpts = ""] = line.slice(dash + 3).split(" ");
    if (fsType !== "cgroup" && fsType !== "cgroup2") continue;
    out.push({
      root: unescape(left[3]),
      mountPoint: unescape(left[4]),
      fsType,
      superOptions: superOpts.split(","),
    });
  }
  return out;
}

/**
 * 2 when the host runs the unified hierarchy (/sys/fs/cgroup is cgroup2), otherwise 1 (legacy
 * or hybrid, where containerd and runc use the v1 controllers).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cgroupMounts, cgroupVersion } from "./cgroup_paths.ts";
 * const unified = cgroupMounts().some((m) =>
 *   m.mountPoint === "/sys/fs/cgroup" && m.fsType === "cgroup2"
 * );
 * strictEqual(cgroupVersion(), unified ? 2 : 1);
 * ```
 */
export function cgroupVersion(): 1 | 2 {
  // Read once per process, as Go's cgroups.Mode(): /proc/self/mountinfo grows with every
  // container's rootfs mount, and a shared server asks for each of its containers.
  if (version === undefined) {
    const root = cgroupMounts().find((m) => m.mountPoint === "/sys/fs/cgroup");
    version = root?.fsType === "cgroup2" ? 2 : 1;
  }
  return version;
}

let version: 1 | 2 | undefined;

/**
 * A process's cgroups as `/proc/<pid>/cgroup` lists them: one entry per hierarchy, with its
 * controllers (none for v2) and the path. Kept, it still names a process's cgroups after the
 * process has exited (the cgroups live until the runtime removes them).
 */
export type CgroupMembership = readonly { controllers: string[]; path: string }[];

/**
 * `/proc/<pid>/cgroup` as one entry per hierarchy: its controllers (none for v2) and the path.
 * Throws {@linkcode CgroupNotFoundError} when the process is gone or a zombie.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { procCgroup } from "./cgroup_paths.ts";
 * strictEqual(procCgroup(Deno.pid).length > 0, true);
 * ```
 */
export function procCgroup(pid: number): { controllers: string[]; path: string }[] {
  let text: string;
  try {
    text = Deno.readTextFileSync(`/proc/${pid}/cgroup`);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) throw new CgroupNotFoundError(pid, "no such process");
    throw new Error(`read /proc/${pid}/cgroup: ${(e as Error).message}`);
  }
  // A zombie's /proc/<pid>/cgroup already shows the root cgroups: it has none of its own.
  let stat = "";
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch { /* raced with the reap */ }
  if (stat === "" || stat[stat.lastIndexOf(")") + 2] === "Z") {
    throw new CgroupNotFoundError(pid, "the process has exited");
  }
  return parseProcCgroup(text);
}

/**
 * Parses the text of `/proc/<pid>/cgroup` (`hierarchy-id:controllers:path` lines).
 *
 * @param text the file's text
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { parseProcCgroup } from "./cgroup_paths.ts";
 * deepStrictEqual(parseProcCgroup("4:memory:/a/b\n0::/a/b\n"), [
 *   { controllers: ["memory"], path: "/a/b" },
 *   { controllers: [], path: "/a/b" },
 * ]);
 * ```
 */
export function parseProcCgroup(text: string): { controllers: string[]; path: string }[] {
  return text.split("\n").filter(Boolean).map((line) => {
    const first = line.indexOf(":");
    const second = line.indexOf(":", first + 1);
    return {
      controllers: line.slice(first + 1, second).split(",").filter(Boolean),
      path: line.slice(second + 1),
    };
  });
}

/**
 * The directory of cgroup `path` under `mount`, relative to the sub-tree the mount exposes.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cgroupDir } from "./cgroup_paths.ts";
 * const m = { root: "/", mountPoint: "/sys/fs/cgroup/pids", fsType: "cgroup", superOptions: ["pids"] };
 * strictEqual(cgroupDir(m, "/a/b"), "/sys/fs/cgroup/pids/a/b");
 * ```
 */
export function cgroupDir(mount: CgroupMount, path: string): string {
  // The mount may expose a sub-tree (root != "/"): make `path` relative to it.
  const rel = mount.root !== "/" && (path === mount.root || path.startsWith(`${mount.root}/`))
    ? path.slice(mount.root.length)
    : path;
  return `${mount.mountPoint}${rel === "/" ? "" : rel}`;
}

/**
 * The v1 directories of `pid`'s cgroup, by controller (`memory`, `cpu`, `cpuacct`, `pids`,
 * `blkio`, `hugetlb`, ...). Only directories that exist are returned; throws
 * {@linkcode CgroupNotFoundError} when the process or all of them are gone.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cgroupV1Paths, cgroupVersion } from "./cgroup_paths.ts";
 * if (cgroupVersion() === 1) {
 *   const memoryDir = cgroupV1Paths(Deno.pid).get("memory");
 *   strictEqual(memoryDir === undefined || memoryDir.startsWith("/"), true);
 * }
 * ```
 *
 * @param pid the process (named in errors)
 * @param membership its cgroups; default: read now from `/proc/<pid>/cgroup`
 */
export function cgroupV1Paths(
  pid: number,
  membership: CgroupMembership = procCgroup(pid),
): Map<string, string> {
  const mounts = cgroupMounts().filter((m) => m.fsType === "cgroup");
  const dirs = new Map<string, string>();
  for (const { controllers, path } of membership) {
    for (const controller of controllers) {
      const mount = mounts.find((m) => m.superOptions.includes(controller));
      if (!mount) continue;
      const dir = cgroupDir(mount, path);
      if (exists(dir)) dirs.set(controller, dir);
    }
  }
  if (dirs.size === 0) throw new CgroupNotFoundError(pid, "no v1 controller directory exists");
  return dirs;
}

/**
 * The v2 (unified) directory of `pid`'s cgroup; throws {@linkcode CgroupNotFoundError} when
 * the process or the directory is gone.
 *
 * @example Usage
 * ```ts ignore
 * const dir: string = cgroupV2Path(pid); // e.g. /sys/fs/cgroup/default/web
 * ```
 *
 * @param pid the process (named in errors)
 * @param membership its cgroups; default: read now from `/proc/<pid>/cgroup`
 */
export function cgroupV2Path(pid: number, membership: CgroupMembership = procCgroup(pid)): string {
  const line = membership.find((l) => l.controllers.length === 0);
  const mount = cgroupMounts().find((m) => m.fsType === "cgroup2");
  if (!line || !mount) throw new CgroupNotFoundError(pid, "not in a cgroup v2 hierarchy");
  if (line.path.endsWith(" (deleted)")) {
    throw new CgroupNotFoundError(pid, `cgroup "${line.path}" was removed`);
  }
  const dir = cgroupDir(mount, line.path);
  if (!exists(dir)) throw new CgroupNotFoundError(pid, `directory "${dir}" does not exist`);
  return dir;
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isDirectory;
  } catch {
    return false;
  }
}
