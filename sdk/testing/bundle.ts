/**
 * OCI bundles for tests: a busybox root filesystem and a `config.json` that runc 1.1+ accepts.
 *
 * Nothing is downloaded: the rootfs is the host's static busybox plus one symlink per applet.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createBusyboxBundle } from "@skiff/shim/testing";
 *
 * const b = await createBusyboxBundle({ args: ["echo", "hello"] });
 * try {
 *   // as root: runc --root /tmp/r run --bundle ${b.bundle} demo   prints "hello"
 *   strictEqual(Deno.lstatSync(`${b.bundle}/rootfs/bin/echo`).isSymlink, true);
 * } finally {
 *   await b.cleanup();
 * }
 * ```
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~270 lines) is one concept,
// busybox bundles

/**
 * Options of {@linkcode buildBusyboxRootfs}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxRootfs, type BusyboxRootfsOptions, findBusybox } from "./bundle.ts";
 * const dir = await Deno.makeTempDir();
 * const opts: BusyboxRootfsOptions = { busybox: findBusybox() };
 * await buildBusyboxRootfs(`${dir}/rootfs`, opts);
 * strictEqual(Deno.statSync(`${dir}/rootfs/bin/busybox`).isFile, true);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export interface BusyboxRootfsOptions {
  /** The static busybox to copy. Default: `/bin/busybox`, else the first `busybox` on PATH. */
  busybox?: string;
}

/**
 * The default PATH inside test containers (the same list containerd's default spec uses).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOciSpec, DEFAULT_PATH } from "./bundle.ts";
 * strictEqual(createOciSpec({ args: ["sh"] }).process.env[0], DEFAULT_PATH); // added when missing
 * ```
 */
export const DEFAULT_PATH: string =
  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * Finds the host's busybox binary.
 *
 * @returns an absolute path, or undefined when no busybox is installed
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { findBusybox } from "@skiff/shim/testing";
 * const bb = findBusybox(); // undefined without the busybox-static package
 * strictEqual(bb === undefined || bb.endsWith("/busybox"), true);
 * ```
 */
export function findBusybox(): string | undefined {
  const dirs = ["/bin", ...(Deno.env.get("PATH") ?? "").split(":").filter(Boolean)];
  for (const d of dirs) {
    try {
      const st = Deno.statSync(`${d}/busybox`);
      if (st.isFile) return `${d}/busybox`;
    } catch { /* keep looking */ }
  }
  return undefined;
}

/**
 * Lists the applets a busybox binary provides (`busybox --list`).
 *
 * @param busybox path of the busybox binary
 * @returns applet names such as `sh`, `echo`, `cat`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { busyboxApplets, findBusybox } from "./bundle.ts";
 * const applets = await busyboxApplets(findBusybox()!);
 * strictEqual(applets.includes("sh"), true);
 * strictEqual(applets.includes("busybox"), false); // the binary itself is not an applet link
 * ```
 */
export async function busyboxApplets(busybox: string): Promise<string[]> {
  const out = await new Deno.Command(busybox, {
    args: ["--list"],
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  if (!out.success) {
    throw new Error(`"${busybox} --list" failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  return new TextDecoder().decode(out.stdout).split("\n").map((s) => s.trim())
    // A name with "/" would escape /bin; busybox never prints one, but be strict.
    .filter((s) => s && !s.includes("/") && s !== "busybox");
}

/**
 * Writes a minimal busybox root filesystem into `dir`: `/bin/busybox`, a relative symlink per
 * applet in `/bin`, the usual empty mount points, and `/etc/passwd` / `/etc/group`.
 *
 * @param dir the rootfs directory (created if missing)
 * @param opts which busybox to copy
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxRootfs } from "./bundle.ts";
 * const dir = await Deno.makeTempDir();
 * await buildBusyboxRootfs(`${dir}/rootfs`);
 * strictEqual(Deno.readLinkSync(`${dir}/rootfs/bin/sh`), "busybox"); // relative: valid inside
 * strictEqual(Deno.statSync(`${dir}/rootfs/tmp`).mode! & 0o7777, 0o1777);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function buildBusyboxRootfs(
  dir: string,
  opts: BusyboxRootfsOptions = {},
): Promise<void> {
  const busybox = opts.busybox ?? findBusybox();
  if (!busybox) throw new Error("busybox not found: install the busybox-static package");
  for (const d of ["bin", "dev", "etc", "proc", "sys", "run", "var", "usr", "root", "tmp"]) {
    await Deno.mkdir(`${dir}/${d}`, { recursive: true });
  }
  await Deno.chmod(`${dir}/tmp`, 0o1777);
  await Deno.chmod(`${dir}/root`, 0o700);
  await Deno.copyFile(busybox, `${dir}/bin/busybox`);
  await Deno.chmod(`${dir}/bin/busybox`, 0o755);
  for (const applet of await busyboxApplets(busybox)) {
    const link = `${dir}/bin/${applet}`;
    try {
      await Deno.remove(link);
    } catch { /* absent: the usual case */ }
    await Deno.symlink("busybox", link);
  }
  await Deno.writeTextFile(
    `${dir}/etc/passwd`,
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
  );
  await Deno.writeTextFile(`${dir}/etc/group`, "root:x:0:\nnogroup:x:65534:\n");
}

/**
 * One entry of an OCI spec's `mounts`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOciSpec, type OciMount } from "@skiff/shim/testing";
 * const m: OciMount = { destination: "/data", type: "bind", source: "/srv", options: ["rbind"] };
 * const spec = createOciSpec({ args: ["true"], mounts: [m] });
 * strictEqual(spec.mounts.at(-1)?.destination, "/data"); // after the default mounts
 * ```
 */
export interface OciMount {
  /** Path inside the container. */
  destination: string;
  /** Filesystem type, e.g. `tmpfs`, `proc`, `bind`. */
  type?: string;
  /** Source path or device. */
  source?: string;
  /** Mount options. */
  options?: string[];
}

/**
 * The subset of the OCI runtime spec that the bundle builder writes. Extra fields may be added
 * by callers before writing; runc ignores none of the ones listed here.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOciSpec, type OciSpec } from "@skiff/shim/testing";
 * const spec: OciSpec = createOciSpec({ args: ["true"] });
 * spec.process.cwd = "/tmp"; // callers adjust it before writing config.json
 * strictEqual(JSON.parse(JSON.stringify(spec)).process.cwd, "/tmp");
 * ```
 */
export interface OciSpec {
  /** OCI runtime spec version. */
  ociVersion: string;
  /** The container's init process. */
  process: {
    terminal: boolean;
    user: { uid: number; gid: number };
    args: string[];
    env: string[];
    cwd: string;
    capabilities: {
      bounding: string[];
      effective: string[];
      permitted: string[];
    };
    rlimits: { type: string; hard: number; soft: number }[];
    noNewPrivileges: boolean;
  };
  /** The rootfs, relative to the bundle. */
  root: { path: string; readonly: boolean };
  /** Hostname set in the UTS namespace. */
  hostname: string;
  /** Mounts, in order. */
  mounts: OciMount[];
  /** Annotations (containerd and shims read these). */
  annotations?: Record<string, string>;
  /** Linux-specific settings. */
  linux: {
    resources: {
      devices: { allow: boolean; access: string }[];
      memory?: { limit: number };
    };
    cgroupsPath?: string;
    namespaces: { type: string; path?: string }[];
    maskedPaths: string[];
    readonlyPaths: string[];
  };
}

/**
 * Options of {@linkcode createOciSpec} and {@linkcode createBusyboxBundle}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOciSpec, type OciSpecOptions } from "@skiff/shim/testing";
 * const o: OciSpecOptions = { args: ["sh"], terminal: true, memoryLimit: 64 << 20 };
 * const spec = createOciSpec(o);
 * strictEqual(spec.linux.resources.memory?.limit, 64 << 20);
 * strictEqual(spec.process.env.includes("TERM=xterm"), true); // a terminal gets a TERM
 * ```
 */
export interface OciSpecOptions {
  /** The init process's argv. */
  args: string[];
  /** Allocate a terminal (the runtime then needs `--console-socket`). Default false. */
  terminal?: boolean;
  /** Extra `KEY=VALUE` entries; PATH is always set unless given here. */
  env?: string[];
  /** Working directory inside the container. Default `/`. */
  cwd?: string;
  /** Hostname. Default `skiff`. */
  hostname?: string;
  /** Spec annotations. */
  annotations?: Record<string, string>;
  /** Memory limit in bytes (`linux.resources.memory.limit`). */
  memoryLimit?: number;
  /** `linux.cgroupsPath`; runc picks `/<id>` when unset. */
  cgroupsPath?: string;
  /** Namespace types to create. Default pid, ipc, uts, mount, network. */
  namespaces?: string[];
  /** Mounts appended after the defaults. */
  mounts?: OciMount[];
  /** uid/gid of the init process. Default 0/0. */
  user?: { uid: number; gid: number };
  /** Make the rootfs read-only. Default false. */
  readonlyRootfs?: boolean;
}

// containerd's default capability set: enough for busybox tests, not privileged.
const CAPS = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_MKNOD",
  "CAP_NET_RAW",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETFCAP",
  "CAP_SETPCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_SYS_CHROOT",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
];

/**
 * Builds an OCI runtime spec for a busybox container.
 *
 * @param opts process and resource settings
 * @returns the spec, ready for `JSON.stringify`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOciSpec } from "@skiff/shim/testing";
 * const spec = createOciSpec({ args: ["sh", "-c", "exit 3"] });
 * strictEqual(spec.root.path, "rootfs");
 * ```
 */
export function createOciSpec(opts: OciSpecOptions): OciSpec {
  // long: one literal OCI spec (mounts, namespaces, masked paths); split, it reads worse
  const env = [...(opts.env ?? [])];
  if (!env.some((e) => e.startsWith("PATH="))) env.unshift(DEFAULT_PATH);
  const terminal = opts.terminal ?? false;
  if (terminal && !env.some((e) => e.startsWith("TERM="))) env.push("TERM=xterm");
  const spec: OciSpec = {
    ociVersion: "1.0.2",
    process: {
      terminal,
      user: opts.user ?? { uid: 0, gid: 0 },
      args: opts.args,
      env,
      cwd: opts.cwd ?? "/",
      capabilities: { bounding: [...CAPS], effective: [...CAPS], permitted: [...CAPS] },
      rlimits: [{ type: "RLIMIT_NOFILE", hard: 1024, soft: 1024 }],
      noNewPrivileges: true,
    },
    root: { path: "rootfs", readonly: opts.readonlyRootfs ?? false },
    hostname: opts.hostname ?? "skiff",
    mounts: [
      {
        destination: "/proc",
        type: "proc",
        source: "proc",
        options: ["nosuid", "noexec", "nodev"],
      },
      {
        destination: "/dev",
        type: "tmpfs",
        source: "tmpfs",
        options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
      },
      {
        destination: "/dev/pts",
        type: "devpts",
        source: "devpts",
        options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
      },
      {
        destination: "/dev/shm",
        type: "tmpfs",
        source: "shm",
        options: ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
      },
      {
        destination: "/dev/mqueue",
        type: "mqueue",
        source: "mqueue",
        options: ["nosuid", "noexec", "nodev"],
      },
      {
        destination: "/sys",
        type: "sysfs",
        source: "sysfs",
        options: ["nosuid", "noexec", "nodev", "ro"],
      },
      {
        destination: "/sys/fs/cgroup",
        type: "cgroup",
        source: "cgroup",
        options: ["nosuid", "noexec", "nodev", "relatime", "ro"],
      },
      ...(opts.mounts ?? []),
    ],
    linux: {
      // Deny all device access except what runc always allows (null, zero, tty, ...).
      resources: { devices: [{ allow: false, access: "rwm" }] },
      namespaces: (opts.namespaces ?? ["pid", "ipc", "uts", "mount", "network"]).map((type) => ({
        type,
      })),
      maskedPaths: [
        "/proc/acpi",
        "/proc/asound",
        "/proc/kcore",
        "/proc/keys",
        "/proc/latency_stats",
        "/proc/timer_list",
        "/proc/timer_stats",
        "/proc/sched_debug",
        "/proc/scsi",
        "/sys/firmware",
      ],
      readonlyPaths: [
        "/proc/bus",
        "/proc/fs",
        "/proc/irq",
        "/proc/sys",
        "/proc/sysrq-trigger",
      ],
    },
  };
  if (opts.annotations) spec.annotations = { ...opts.annotations };
  if (opts.memoryLimit !== undefined) spec.linux.resources.memory = { limit: opts.memoryLimit };
  if (opts.cgroupsPath !== undefined) spec.linux.cgroupsPath = opts.cgroupsPath;
  return spec;
}

/**
 * Options of {@linkcode createBusyboxBundle}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type BusyboxBundleOptions, createBusyboxBundle } from "@skiff/shim/testing";
 * const dir = await Deno.realPath(await Deno.makeTempDir());
 * const opts: BusyboxBundleOptions = { dir: `${dir}/b1`, args: ["echo", "hi"] };
 * const b = await createBusyboxBundle(opts);
 * strictEqual(b.bundle, `${dir}/b1`);
 * await b.cleanup();
 * await Deno.remove(dir);
 * ```
 */
export interface BusyboxBundleOptions extends OciSpecOptions {
  /** Bundle directory (created if missing). Default: a new temp dir. */
  dir?: string;
  /** Which busybox to copy into the rootfs. */
  busybox?: string;
}

/**
 * A bundle on disk, from {@linkcode createBusyboxBundle}.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { type BusyboxBundle, createBusyboxBundle } from "@skiff/shim/testing";
 * const b: BusyboxBundle = await createBusyboxBundle({ args: ["true"] });
 * deepStrictEqual(JSON.parse(Deno.readTextFileSync(`${b.bundle}/config.json`)), b.spec);
 * await b.cleanup();
 * ```
 */
export interface BusyboxBundle {
  /** Absolute bundle path (holds `config.json` and `rootfs/`). */
  bundle: string;
  /** The spec written to `config.json`. */
  spec: OciSpec;
  /**
   * Unmounts anything left mounted under the bundle, then removes it.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { createBusyboxBundle } from "@skiff/shim/testing";
   * const bundle = await createBusyboxBundle({ args: ["true"] });
   * await bundle.cleanup();
   * strictEqual(await Deno.stat(bundle.bundle).catch((e) => e.name), "NotFound");
   * ```
   */
  cleanup(): Promise<void>;
}

/**
 * Creates an OCI bundle: a busybox rootfs plus a `config.json` from {@linkcode createOciSpec}.
 *
 * @param opts process settings and where to put the bundle
 * @returns the bundle path, its spec, and a cleanup function
 *
 * @example Usage
 * ```ts ignore
 * const b = await createBusyboxBundle({ args: ["sh", "-c", "exit 3"] });
 * const run = await new Deno.Command("runc", {
 *   args: ["--root", "/tmp/runc-root", "run", "--bundle", b.bundle, "demo"],
 * }).output();
 * console.log(run.code); // 3
 * await b.cleanup();
 * ```
 */
export async function createBusyboxBundle(opts: BusyboxBundleOptions): Promise<BusyboxBundle> {
  const bundle = opts.dir ?? await Deno.makeTempDir({ prefix: "skiff-bundle-" });
  await Deno.mkdir(bundle, { recursive: true });
  const abs = await Deno.realPath(bundle);
  const spec = createOciSpec(opts);
  try {
    const rootfsOpts: BusyboxRootfsOptions = {};
    if (opts.busybox) rootfsOpts.busybox = opts.busybox;
    await buildBusyboxRootfs(`${abs}/rootfs`, rootfsOpts);
    await Deno.writeTextFile(`${abs}/config.json`, JSON.stringify(spec, null, 2));
  } catch (e) {
    await removeTree(abs);
    throw e;
  }
  return { bundle: abs, spec, cleanup: () => removeTree(abs) };
}

/**
 * Lists mount points at or below `dir`, deepest first (the order to unmount them in).
 *
 * @param dir an absolute path
 * @returns mount points from /proc/self/mountinfo
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { mountsUnder } from "./bundle.ts";
 * const dir = await Deno.makeTempDir();
 * deepStrictEqual(await mountsUnder(dir), []); // nothing mounted in a fresh directory
 * await Deno.remove(dir);
 * ```
 */
export async function mountsUnder(dir: string): Promise<string[]> {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  const info = await Deno.readTextFile("/proc/self/mountinfo");
  const out: string[] = [];
  for (const line of info.split("\n")) {
    const mp = line.split(" ")[4];
    if (!mp) continue;
    // mountinfo escapes space, tab, newline and backslash as octal.
    const path = mp.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (path === dir || path.startsWith(prefix)) out.push(path);
  }
  return out.sort((a, b) => b.length - a.length);
}

/**
 * Lazily unmounts everything under `dir`, then removes it. Unmounting first matters: a recursive
 * remove would otherwise delete the contents of whatever is still mounted there.
 *
 * @param dir an absolute path; a missing dir is not an error
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { removeTree } from "./bundle.ts";
 * const dir = await Deno.makeTempDir({ prefix: "skiff-bundle-" });
 * await Deno.mkdir(`${dir}/rootfs/tmp`, { recursive: true });
 * await removeTree(dir);
 * await removeTree(dir); // a missing directory is not an error
 * strictEqual(await Deno.stat(dir).catch((e) => e.name), "NotFound");
 * ```
 */
export async function removeTree(dir: string): Promise<void> {
  for (let pass = 0; pass < 5; pass++) {
    const mounts = await mountsUnder(dir);
    if (mounts.length === 0) break;
    for (const m of mounts) {
      await new Deno.Command("umount", { args: ["-l", m], stdout: "null", stderr: "null" })
        .output().catch(() => undefined);
    }
  }
  if ((await mountsUnder(dir)).length > 0) {
    throw new Error(`cannot remove "${dir}": mounts remain below it`);
  }
  await Deno.remove(dir, { recursive: true }).catch((e) => {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  });
}
