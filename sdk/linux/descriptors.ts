/**
 * The process's own descriptors as a live upgrade needs them: which descriptor is which pipe or
 * socket, keeping one open across `execve(2)`, and replacing the process image in place.
 *
 * Deno opens everything close-on-exec and does not expose the descriptor behind its resources,
 * so they are found by what `/proc/self/fd` links to (`pipe:[inode]`, `socket:[inode]`).
 *
 * @module
 */

import { check, cstr, Errno, errno, ErrnoError, libc, setNonBlocking } from "./libc.ts";

const F_DUPFD_CLOEXEC = 1030;
const F_GETFD = 1;
const F_SETFD = 2;
const FD_CLOEXEC = 1;
const SOL_SOCKET = 1;
const SO_ACCEPTCONN = 30;
const AF_UNIX = 1;
const ECONNABORTED = 103;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const AT_EMPTY_PATH = 0x1000;
const STATX_INO = 0x100;
const STATX_TYPE = 0x1;
/**
 * `struct statx` (the same on every architecture): 256 bytes, `stx_ino` the fifth u64,
 * `stx_dev_major` and `stx_dev_minor` the 35th and 36th u32, `stx_mode` the 15th u16.
 */
const STATX_SIZE = 256;
const STATX_INO_U64 = 4;
const STATX_DEV_U32 = 34;
const STATX_MODE_U16 = 14;
const S_IFMT = 0o170000;
const S_IFIFO = 0o010000;

/**
 * Sets or clears a descriptor's close-on-exec flag: cleared, it survives `execve(2)`.
 *
 * @param fd the descriptor
 * @param on true to close it on exec
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { closeOnExec, setCloseOnExec } from "./descriptors.ts";
 * import { close, eventfd } from "./libc.ts";
 * const fd = eventfd(); // opened close-on-exec
 * setCloseOnExec(fd, false);
 * strictEqual(closeOnExec(fd), false);
 * setCloseOnExec(fd, true);
 * strictEqual(closeOnExec(fd), true);
 * close(fd);
 * ```
 */
export function setCloseOnExec(fd: number, on: boolean): void {
  check(`fcntl F_SETFD fd ${fd}`, libc().fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0));
}

/**
 * Whether a descriptor closes on exec.
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { closeOnExec } from "./descriptors.ts";
 * strictEqual(closeOnExec(0), false); // stdin is inherited
 * ```
 */
export function closeOnExec(fd: number): boolean {
  return (check(`fcntl F_GETFD fd ${fd}`, libc().fcntl(fd, F_GETFD, 0)) & FD_CLOEXEC) !== 0;
}

/**
 * A close-on-exec duplicate of `fd` (the caller owns it).
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { notStrictEqual } from "node:assert/strict";
 * import { dupCloseOnExec } from "./descriptors.ts";
 * import { close, eventfd } from "./libc.ts";
 * const fd = eventfd();
 * const copy = dupCloseOnExec(fd);
 * notStrictEqual(copy, fd);
 * close(copy);
 * close(fd);
 * ```
 */
export function dupCloseOnExec(fd: number): number {
  return check(`fcntl F_DUPFD_CLOEXEC fd ${fd}`, libc().fcntl(fd, F_DUPFD_CLOEXEC, 3));
}

/**
 * What each open descriptor of this process links to in `/proc/self/fd` (e.g. `pipe:[123]`),
 * keyed by the link: the way to find the descriptor behind a Deno resource.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { descriptorsByLink } from "./descriptors.ts";
 * import { close, eventfd } from "./libc.ts";
 * const fd = eventfd();
 * strictEqual(descriptorsByLink().get("anon_inode:[eventfd]") !== undefined, true);
 * close(fd);
 * ```
 */
export function descriptorsByLink(): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of Deno.readDirSync("/proc/self/fd")) {
    try {
      out.set(Deno.readLinkSync(`/proc/self/fd/${e.name}`), Number(e.name));
    } catch { /* closed meanwhile (the directory's own descriptor) */ }
  }
  return out;
}

/**
 * The descriptors of this process that are the pipes or sockets `links` name (`pipe:[123]`,
 * `socket:[456]`, as `/proc/<pid>/fd` shows them), keyed by link; a link that none is, is left
 * out. What {@linkcode descriptorsByLink} finds, for less: it reads the link of every descriptor,
 * and a process holds more of them the more it serves (a shared server: each pod's sockets, pipes,
 * FIFOs and event descriptors); this asks each descriptor's inode (`statx`, a plain system call)
 * and reads the link only where the inode is one of the links' (which the link then confirms:
 * inode numbers repeat across filesystems). Any other kind of link falls back to the full read.
 *
 * @param links the links looked for
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { descriptorsOf, linkOf } from "./descriptors.ts";
 * const dir = Deno.makeTempDirSync();
 * const listener = Deno.listen({ transport: "unix", path: `${dir}/s` });
 * const conn = await Deno.connect({ transport: "unix", path: `${dir}/s` });
 * const accepted = await listener.accept();
 * const link = [...Deno.readDirSync("/proc/self/fd")].map((e) => linkOf(Deno.pid, Number(e.name)))
 *   .find((l) => l?.startsWith("socket:"))!;
 * const found = descriptorsOf([link, "pipe:[1]"]);
 * strictEqual(linkOf(Deno.pid, found.get(link)!), link);
 * strictEqual(found.has("pipe:[1]"), false);
 * accepted.close();
 * conn.close();
 * listener.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function descriptorsOf(links: readonly string[]): Map<string, number> {
  const wanted = new Map<number, string>();
  for (const link of links) {
    const m = /^(?:pipe|socket):\[(\d+)\]$/.exec(link);
    if (!m) return pick(descriptorsByLink(), links);
    wanted.set(Number(m[1]), link);
  }
  if (!haveStatx()) return pick(descriptorsByLink(), links);
  const out = new Map<string, number>();
  for (const e of Deno.readDirSync("/proc/self/fd")) {
    const fd = Number(e.name);
    const link = wanted.get(inodeNumber(fd) ?? -1);
    if (link !== undefined && linkOf(Deno.pid, fd) === link) out.set(link, fd);
  }
  return out;
}

const EMPTY_PATH = new Uint8Array(1); // "": the descriptor itself (AT_EMPTY_PATH)
const statxWords = new BigUint64Array(STATX_SIZE / 8);
const statxBuf = new Uint8Array(statxWords.buffer);
const statxU32 = new Uint32Array(statxWords.buffer);

let statxBound: boolean | undefined;

/** Whether libc has `statx` (glibc 2.28 and later). */
function haveStatx(): boolean {
  if (statxBound === undefined) {
    try {
      statxBound = typeof libc().statx === "function";
    } catch {
      statxBound = false;
    }
  }
  return statxBound;
}

/** Fills the `statx` buffer for descriptor `fd`; false when it is not open (or no `statx`). */
function statxFd(fd: number): boolean {
  return haveStatx() &&
    libc().statx(fd, EMPTY_PATH, AT_EMPTY_PATH, STATX_INO | STATX_TYPE, statxBuf) === 0;
}

/**
 * Whether descriptor `fd` is a pipe or a FIFO (`statx`); false when it is not open (or libc has
 * no `statx`).
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { isPipe } from "./descriptors.ts";
 * const dir = Deno.makeTempDirSync();
 * const file = Deno.openSync(`${dir}/f`, { write: true, create: true });
 * const child = new Deno.Command("cat", { stdin: "piped", stdout: "null" }).spawn();
 * const fds = [...Deno.readDirSync("/proc/self/fd")].map((e) => Number(e.name));
 * strictEqual(fds.some((fd) => isPipe(fd)), true); // the pipe to cat
 * strictEqual(isPipe(99999), false);
 * await child.stdin.close();
 * await child.status;
 * file.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function isPipe(fd: number): boolean {
  return statxFd(fd) && (new Uint16Array(statxWords.buffer)[STATX_MODE_U16] & S_IFMT) === S_IFIFO;
}

/**
 * The number of the inode behind descriptor `fd` (`statx`), or undefined when `fd` is not open
 * (or libc has no `statx`).
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { inodeNumber } from "./descriptors.ts";
 * strictEqual(typeof inodeNumber(0), "number"); // stdin
 * strictEqual(inodeNumber(99999), undefined);
 * ```
 */
export function inodeNumber(fd: number): number | undefined {
  return statxFd(fd) ? Number(statxWords[STATX_INO_U64]) : undefined;
}

/**
 * The device of the filesystem of the inode behind descriptor `fd` (major × 2^20 + minor), or
 * undefined when `fd` is not open (or libc has no `statx`).
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { deviceNumber } from "./descriptors.ts";
 * strictEqual(typeof deviceNumber(0), "number"); // stdin
 * strictEqual(deviceNumber(99999), undefined);
 * ```
 */
export function deviceNumber(fd: number): number | undefined {
  return statxFd(fd) ? statxU32[STATX_DEV_U32] * 0x100000 + statxU32[STATX_DEV_U32 + 1] : undefined;
}

function pick(all: Map<string, number>, links: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const link of links) {
    const fd = all.get(link);
    if (fd !== undefined) out.set(link, fd);
  }
  return out;
}

/**
 * What descriptor `fd` of process `pid` links to (`pipe:[123]`), or `undefined` when the
 * process or descriptor is gone.
 *
 * @param pid the process
 * @param fd its descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { linkOf } from "./descriptors.ts";
 * strictEqual(typeof linkOf(Deno.pid, 0), "string");
 * strictEqual(linkOf(Deno.pid, 99999), undefined);
 * ```
 */
export function linkOf(pid: number, fd: number): string | undefined {
  try {
    return Deno.readLinkSync(`/proc/${pid}/fd/${fd}`);
  } catch {
    return undefined;
  }
}

/**
 * The descriptors of unix sockets listening at one of `paths` (by the name they were bound to).
 *
 * @param paths the socket paths
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { listeningSockets } from "./descriptors.ts";
 * const dir = Deno.makeTempDirSync();
 * const listener = Deno.listen({ transport: "unix", path: `${dir}/s` });
 * deepStrictEqual(listeningSockets([`${dir}/s`]).length, 1);
 * listener.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function listeningSockets(paths: readonly string[]): number[] {
  const wanted = new Set(paths);
  const out: number[] = [];
  for (const [link, fd] of descriptorsByLink()) {
    if (!link.startsWith("socket:")) continue;
    const name = unixSocketName(fd);
    if (name === undefined || !wanted.has(name)) continue;
    const on = new Int32Array(1);
    const len = new Uint32Array([4]);
    if (
      libc().getsockopt(
        fd,
        SOL_SOCKET,
        SO_ACCEPTCONN,
        new Uint8Array(on.buffer),
        new Uint8Array(len.buffer),
      ) !== 0
    ) continue;
    if (on[0] !== 0) out.push(fd);
  }
  return out;
}

/**
 * The path a unix socket is bound to (for an accepted socket: its listener's), or `undefined`.
 *
 * @param fd the descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { unixSocketName } from "./descriptors.ts";
 * strictEqual(unixSocketName(0), undefined); // not a socket here
 * ```
 */
export function unixSocketName(fd: number): string | undefined {
  const addr = new Uint8Array(110);
  const len = new Uint32Array([addr.length]);
  if (libc().getsockname(fd, addr, new Uint8Array(len.buffer)) !== 0) return undefined;
  if ((addr[0] | (addr[1] << 8)) !== AF_UNIX) return undefined;
  let end = Math.min(len[0], addr.length);
  while (end > 2 && addr[end - 1] === 0) end--;
  return end > 2 ? new TextDecoder().decode(addr.subarray(2, end)) : undefined;
}

/**
 * Accepts one pending connection without waiting: its descriptor (non-blocking,
 * close-on-exec), or `null` when none is pending. Sets the listener non-blocking.
 *
 * @param listener a listening socket's descriptor
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { acceptPending, listeningSockets } from "./descriptors.ts";
 * const dir = Deno.makeTempDirSync();
 * const listener = Deno.listen({ transport: "unix", path: `${dir}/s` });
 * const [fd] = listeningSockets([`${dir}/s`]);
 * strictEqual(acceptPending(fd), null);
 * listener.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function acceptPending(listener: number): number | null {
  setNonBlocking(listener);
  const fd = libc().accept4(listener, null, null, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) return fd;
  const e = errno();
  if (e === Errno.EAGAIN || e === Errno.EINTR || e === ECONNABORTED) return null;
  throw new ErrnoError(`accept4 on listening descriptor ${listener}`, e);
}

/**
 * Replaces this process's image in place (`execve(2)`): same pid, so its children stay its
 * children; only descriptors without close-on-exec stay open. Returns only on failure, with the
 * error.
 *
 * @param path the program
 * @param argv its arguments, `argv[0]` first
 * @param env its environment
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { execInPlace } from "./descriptors.ts";
 * // A program that does not exist: execve fails and the caller carries on.
 * const err = execInPlace("/nonexistent/program", ["program"], {});
 * strictEqual(err.message.includes("ENOENT"), true);
 * ```
 */
export function execInPlace(
  path: string,
  argv: readonly string[],
  env: Readonly<Record<string, string>>,
): ErrnoError {
  const keep: Uint8Array[] = []; // the strings must stay reachable until execve returns
  const vector = (list: readonly string[]) => {
    const ptrs = new BigUint64Array(list.length + 1);
    list.forEach((s, i) => {
      const b = cstr(s);
      keep.push(b);
      ptrs[i] = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(b)));
    });
    return new Uint8Array(ptrs.buffer);
  };
  const args = vector(argv);
  const envp = vector(Object.entries(env).map(([k, v]) => `${k}=${v}`));
  libc().execve(cstr(path), args, envp);
  const e = errno();
  void keep;
  return new ErrnoError(`execve ${path}`, e);
}
