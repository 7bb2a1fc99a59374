/**
 * Mounting `CreateTaskRequest.rootfs` onto a bundle's rootfs and tearing it down again.
 *
 * @module
 */

import { cstr, Errno, errno, ErrnoError, libc } from "./libc.ts";
import { cleanPath } from "./clean_path.ts";

/**
 * One entry of `CreateTaskRequest.rootfs` (containerd's `Mount`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { Mount } from "@skiff/shim/linux";
 * const m: Mount = { type: "bind", source: "/var/lib/x", options: ["rbind", "ro"] };
 * strictEqual(m.target, undefined); // the rootfs itself
 * ```
 */
export interface Mount {
  /** Filesystem type, e.g. `overlay`, `bind`, `ext4`. */
  type: string;
  /** What to mount: a path, a device or a name such as `overlay`. */
  source: string;
  /** Optional sub-path inside the rootfs (containerd 2.x); the rootfs itself when empty. */
  target?: string;
  /** fstab-style options: flags (`ro`, `rbind`, `nosuid`...) and filesystem data. */
  options: string[];
}

const MS_RDONLY = 0x1;
const MS_REMOUNT = 0x20;
const MS_BIND = 0x1000;
const MS_REC = 0x4000;
const MS_UNBINDABLE = 0x20000;
const MS_PRIVATE = 0x40000;
const MS_SLAVE = 0x80000;
const MS_SHARED = 0x100000;
const MNT_DETACH = 0x2;

/** option → [clear the flag instead of setting it, flag] (values from mount(2)). */
const FLAGS: Record<string, [boolean, number]> = {
  async: [true, 0x10],
  atime: [true, 0x400],
  bind: [false, MS_BIND],
  defaults: [false, 0],
  dev: [true, 0x4],
  diratime: [true, 0x800],
  dirsync: [false, 0x80],
  exec: [true, 0x8],
  mand: [false, 0x40],
  noatime: [false, 0x400],
  nodev: [false, 0x4],
  nodiratime: [false, 0x800],
  noexec: [false, 0x8],
  nomand: [true, 0x40],
  norelatime: [true, 0x200000],
  nostrictatime: [true, 0x1000000],
  nosuid: [false, 0x2],
  rbind: [false, MS_BIND | MS_REC],
  relatime: [false, 0x200000],
  remount: [false, MS_REMOUNT],
  ro: [false, MS_RDONLY],
  rw: [true, MS_RDONLY],
  strictatime: [false, 0x1000000],
  suid: [true, 0x2],
  sync: [false, 0x10],
};

const PROPAGATION: Record<string, number> = {
  private: MS_PRIVATE,
  rprivate: MS_PRIVATE | MS_REC,
  shared: MS_SHARED,
  rshared: MS_SHARED | MS_REC,
  slave: MS_SLAVE,
  rslave: MS_SLAVE | MS_REC,
  unbindable: MS_UNBINDABLE,
  runbindable: MS_UNBINDABLE | MS_REC,
};

/**
 * Splits fstab-style options into mount(2) flags, propagation flags and the data string that
 * the filesystem receives (everything that is not a flag, e.g. overlay's `lowerdir=...`).
 *
 * @example Usage
 * ```ts
 * import assert from "node:assert/strict";
 * const { flags, propagation, data } = parseMountOptions(["rbind", "ro", "rprivate", "size=1m"]);
 * assert.equal(flags, 0x1000 | 0x4000 | 0x1); // MS_BIND | MS_REC | MS_RDONLY
 * assert.equal(propagation, 0x40000 | 0x4000); // MS_PRIVATE | MS_REC
 * assert.equal(data, "size=1m");
 * ```
 */
export function parseMountOptions(
  options: string[],
): { flags: number; propagation: number; data: string } {
  let flags = 0;
  let propagation = 0;
  const data: string[] = [];
  for (const option of options) {
    const flag = FLAGS[option];
    if (flag) {
      flags = flag[0] ? flags & ~flag[1] : flags | flag[1];
    } else if (PROPAGATION[option] !== undefined) {
      propagation |= PROPAGATION[option];
    } else if (option === "loop") {
      throw new Error(`mount option "loop" is not supported`);
    } else {
      data.push(option);
    }
  }
  return { flags, propagation, data: data.join(",") };
}

/**
 * Mounts each entry on `rootfs` (or `rootfs/<target>`), in order. Creates `rootfs` (0711) when
 * there is something to mount. Bind mounts with other flags (e.g. `ro`) are bound first and
 * then remounted with the flags, as the kernel ignores them on the initial bind. If any mount
 * fails, those already made are unmounted and the error names the failing mount.
 *
 * @example Usage
 * ```ts ignore
 * await mountAll(
 *   [{ type: "overlay", source: "overlay", options: ["lowerdir=/l", "upperdir=/u", "workdir=/w"] }],
 *   `${bundle}/rootfs`,
 * );
 * ```
 */
export async function mountAll(mounts: Mount[], rootfs: string): Promise<void> {
  if (mounts.length === 0) return;
  await Deno.mkdir(rootfs, { recursive: true, mode: 0o711 });
  const done: string[] = [];
  try {
    for (const m of mounts) {
      const target = resolveTarget(rootfs, m.target);
      mountOne(m, target);
      done.push(target);
    }
  } catch (e) {
    for (const target of done.reverse()) libc().umount2(cstr(target), MNT_DETACH);
    throw e;
  }
}

function resolveTarget(rootfs: string, sub: string | undefined): string {
  if (!sub) return rootfs;
  const joined = cleanPath(`${rootfs}/${sub}`);
  const root = cleanPath(rootfs).replace(/\/$/, "");
  if (joined !== root && !joined.startsWith(`${root}/`)) {
    throw new Error(`mount target "${sub}" escapes rootfs "${rootfs}"`);
  }
  return joined;
}

function mountOne(m: Mount, target: string): void {
  const what = `mount ${m.type} "${m.source}" on "${target}" (options "${m.options.join(",")}")`;
  const { flags, propagation, data } = parseMountOptions(m.options);
  const call = (source: string, type: string, f: number, d: string): void => {
    if (libc().mount(cstr(source), cstr(target), cstr(type), BigInt(f), cstr(d)) === -1) {
      throw new ErrnoError(what, errno());
    }
  };
  const bind = (flags & MS_BIND) !== 0;
  if (bind && (flags & ~(MS_BIND | MS_REC)) !== 0) {
    call(m.source, m.type, flags & (MS_BIND | MS_REC), data);
    try {
      call("", "", (flags & ~MS_REC) | MS_REMOUNT, "");
    } catch (e) {
      libc().umount2(cstr(target), MNT_DETACH);
      throw e;
    }
  } else {
    call(m.source, m.type, flags, data);
  }
  if (propagation !== 0) {
    try {
      call("", "", propagation, "");
    } catch (e) {
      libc().umount2(cstr(target), MNT_DETACH);
      throw e;
    }
  }
}

/**
 * Unmounts `target` and everything mounted below it, deepest first, including mounts stacked
 * on one path. A path that does not exist or is not mounted is fine. A busy mount is retried
 * a few times and then detached (`MNT_DETACH`).
 *
 * @example Usage
 * ```ts ignore
 * await unmountAll(`${bundle}/rootfs`);
 * ```
 */
export async function unmountAll(target: string): Promise<void> {
  let real: string;
  try {
    real = await Deno.realPath(target);
  } catch {
    return; // gone: nothing is mounted there
  }
  const under = (await mountPoints()).filter((p) => p === real || p.startsWith(`${real}/`));
  under.push(real); // in case mountinfo was read while something else changed it
  const unique = [...new Set(under)].sort((a, b) => b.length - a.length);
  for (const path of unique) await unmountStack(path);
}

/**
 * The mount points at or under `target` that `/proc/self/mountinfo` lists, deepest first; none
 * when `target` does not exist. It reads a file only (no libc), so a caller can skip loading
 * anything more when nothing is mounted.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { mountsUnder } from "./mount.ts";
 * const bundle = Deno.makeTempDirSync();
 * deepStrictEqual(await mountsUnder(`${bundle}/rootfs`), []); // no such directory: none
 * Deno.mkdirSync(`${bundle}/rootfs`);
 * deepStrictEqual(await mountsUnder(`${bundle}/rootfs`), []); // nothing mounted there
 * Deno.removeSync(bundle, { recursive: true });
 * ```
 */
export async function mountsUnder(target: string): Promise<string[]> {
  let real: string;
  try {
    real = await Deno.realPath(target);
  } catch {
    return [];
  }
  const under = (await mountPoints()).filter((p) => p === real || p.startsWith(`${real}/`));
  return [...new Set(under)].sort((a, b) => b.length - a.length);
}

async function unmountStack(path: string): Promise<void> {
  let busy = 0;
  for (;;) {
    if (libc().umount2(cstr(path), 0) === 0) continue; // there may be more stacked mounts
    const e = errno();
    if (e === Errno.EINVAL || e === Errno.ENOENT) return; // no longer a mount point
    if (e === Errno.EBUSY && busy++ < 10) {
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    if (e === Errno.EBUSY) {
      if (libc().umount2(cstr(path), MNT_DETACH) === 0) continue;
      throw new ErrnoError(`unmount (detach) "${path}"`, errno());
    }
    throw new ErrnoError(`unmount "${path}"`, e);
  }
}

/** Mount points from /proc/self/mountinfo (field 5), unescaped. */
async function mountPoints(): Promise<string[]> {
  const text = await Deno.readTextFile("/proc/self/mountinfo");
  return text.split("\n").filter(Boolean).map((line) =>
    line.split(" ")[4].replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)))
  );
}
