/**
 * The `Deno.dlopen("libc.so.6")` bindings that skiff uses, and thin typed wrappers.
 *
 * Every wrapper turns a `-1` result into an {@linkcode ErrnoError} whose message names the
 * operation and its argument. Only `poll` runs with `nonblocking: true` (in a worker thread):
 * errno is thread-local and cannot be read back for calls made on another thread, so all other
 * calls are synchronous and work on `O_NONBLOCK` descriptors, with `poll` doing the waiting.
 *
 * @module
 */

const SYMBOLS = {
  __errno_location: { parameters: [], result: "pointer" },
  strerror: { parameters: ["i32"], result: "pointer" },
  getpid: { parameters: [], result: "i32" },
  prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
  waitpid: { parameters: ["i32", "buffer", "i32"], result: "i32" },
  waitid: { parameters: ["i32", "i32", "buffer", "i32"], result: "i32" },
  kill: { parameters: ["i32", "i32"], result: "i32" },
  open: { parameters: ["buffer", "i32", "u32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  fcntl: { parameters: ["i32", "i32", "i32"], result: "i32" },
  ioctl: { parameters: ["i32", "u64", "buffer"], result: "i32" },
  mkfifo: { parameters: ["buffer", "u32"], result: "i32" },
  eventfd: { parameters: ["u32", "i32"], result: "i32" },
  poll: { parameters: ["buffer", "u64", "i32"], result: "i32", nonblocking: true },
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  listen: { parameters: ["i32", "i32"], result: "i32" },
  accept4: { parameters: ["i32", "pointer", "pointer", "i32"], result: "i32" },
  recvmsg: { parameters: ["i32", "buffer", "i32"], result: "isize" },
  mount: { parameters: ["buffer", "buffer", "buffer", "u64", "buffer"], result: "i32" },
  umount2: { parameters: ["buffer", "i32"], result: "i32" },
  inotify_init1: { parameters: ["i32"], result: "i32" },
  inotify_add_watch: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  malloc_trim: { parameters: ["usize"], result: "i32" },
  setpriority: { parameters: ["i32", "u32", "i32"], result: "i32" },
  execve: { parameters: ["buffer", "buffer", "buffer"], result: "i32" },
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  statx: { parameters: ["i32", "buffer", "i32", "u32", "buffer"], result: "i32" },
  syscall: { parameters: ["i64", "i64", "i64"], result: "i64" },
} as const;

/**
 * The typed libc symbol table.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type Libc, libc } from "./libc.ts";
 * const symbols: Libc = libc(); // each symbol bound on its first use
 * strictEqual(symbols.getpid(), Deno.pid);
 * ```
 */
export type Libc = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

type SymbolName = keyof typeof SYMBOLS;

let table: Libc | undefined;
/** Every library handle opened, kept reachable for the life of the process. */
const handles: Deno.DynamicLibrary<Deno.ForeignLibraryInterface>[] = [];

/**
 * Binds one symbol (Deno compiles a call trampoline per bound symbol: ~0.3 ms each here, 8 ms
 * for the whole table, most of which a process never calls). `__errno_location` is bound first,
 * so reading errno right after a failed call never has to open anything in between.
 */
function bind<K extends SymbolName>(name: K): Libc[K] {
  if (name !== "__errno_location") void libc().__errno_location;
  const h = Deno.dlopen("libc.so.6", { [name]: SYMBOLS[name] } as Pick<typeof SYMBOLS, K>);
  handles.push(h as unknown as Deno.DynamicLibrary<Deno.ForeignLibraryInterface>);
  return (h.symbols as Pick<Libc, K>)[name];
}

/** A table whose entries bind themselves on first read (then are plain properties). */
function lazyTable(): Libc {
  const t = {} as Record<SymbolName, unknown>;
  for (const name of Object.keys(SYMBOLS) as SymbolName[]) {
    Object.defineProperty(t, name, {
      configurable: true,
      enumerable: true,
      get() {
        const value = bind(name);
        Object.defineProperty(t, name, { value, enumerable: true });
        return value;
      },
    });
  }
  return t as Libc;
}

/**
 * The raw libc symbols, each bound on its first use (a cold server binds the handful it calls
 * instead of all of them: docs/performance.md, "Cold server start"). Prefer the typed wrappers
 * in this module.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { libc } from "./libc.ts";
 * strictEqual(libc().getpid(), Deno.pid);
 * ```
 */
export function libc(): Libc {
  return table ??= lazyTable();
}

/**
 * Binds every libc symbol now: for a process that waits before it works (the warm spare), and
 * for tests whose resource sanitizer must see no library opened during a test.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { libc, preloadLibc } from "./libc.ts";
 * preloadLibc();
 * strictEqual(Object.getOwnPropertyDescriptor(libc(), "getpid")?.get, undefined); // bound
 * ```
 */
export function preloadLibc(): void {
  const t = libc();
  for (const name of Object.keys(SYMBOLS) as SymbolName[]) void t[name];
}

/** Symbolic names of the errno values skiff reports or handles. */
const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM",
  2: "ENOENT",
  3: "ESRCH",
  4: "EINTR",
  5: "EIO",
  6: "ENXIO",
  9: "EBADF",
  10: "ECHILD",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  16: "EBUSY",
  17: "EEXIST",
  19: "ENODEV",
  20: "ENOTDIR",
  21: "EISDIR",
  22: "EINVAL",
  24: "EMFILE",
  25: "ENOTTY",
  28: "ENOSPC",
  30: "EROFS",
  32: "EPIPE",
  36: "ENAMETOOLONG",
  38: "ENOSYS",
  95: "EOPNOTSUPP",
  98: "EADDRINUSE",
  111: "ECONNREFUSED",
};

/**
 * errno values skiff branches on.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Errno, ErrnoError, waitpidNoHang } from "./libc.ts";
 * let noChild = false;
 * try {
 *   waitpidNoHang(1); // init is no child of ours
 * } catch (e) {
 *   noChild = e instanceof ErrnoError && e.errno === Errno.ECHILD;
 * }
 * strictEqual(noChild, true);
 * ```
 */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  ESRCH: 3,
  EINTR: 4,
  EIO: 5,
  ENXIO: 6,
  ECHILD: 10,
  EAGAIN: 11,
  EBUSY: 16,
  EINVAL: 22,
  EPIPE: 32,
} as const;

/**
 * A failed libc call: `errno` and its symbolic `code` are kept for callers that branch on them.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ErrnoError, kill } from "@skiff/shim/linux";
 * let code = "";
 * try {
 *   kill(2 ** 22 + 1, 0); // above any pid_max: no such process
 * } catch (e) {
 *   if (e instanceof ErrnoError) code = e.code;
 * }
 * strictEqual(code, "ESRCH");
 * ```
 */
export class ErrnoError extends Error {
  /** The errno value. */
  readonly errno: number;
  /** The symbolic errno name such as `"ENOENT"`, or `"E<number>"` when unknown. */
  readonly code: string;

  /**
   * Builds an error for `what` that failed with `errno`.
   *
   * @param what what failed, with its value, e.g. `open "/x"`
   * @param errno the errno value
   */
  constructor(what: string, errno: number) {
    const code = ERRNO_NAMES[errno] ?? `E${errno}`;
    super(`${what}: ${strerror(errno)} (${code})`);
    this.name = "ErrnoError";
    this.errno = errno;
    this.code = code;
  }
}

/**
 * The calling thread's errno, read through `__errno_location`. Meaningful only right after a
 * synchronous call that failed.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { errno, libc } from "./libc.ts";
 * strictEqual(libc().close(-1), -1);
 * strictEqual(errno(), 9); // EBADF; read at once, before another call changes it
 * ```
 */
export function errno(): number {
  const p = libc().__errno_location();
  return p === null ? 0 : new Deno.UnsafePointerView(p).getInt32();
}

function strerror(code: number): string {
  const p = libc().strerror(code);
  return p === null ? `errno ${code}` : Deno.UnsafePointerView.getCString(p);
}

/**
 * Throws an {@linkcode ErrnoError} for `what` when `result` is -1, otherwise returns it.
 *
 * @example Usage
 * ```ts
 * import { throws } from "node:assert/strict";
 * import { check, cstr, ErrnoError, libc } from "./libc.ts";
 * const path = "/nonexistent/skiff";
 * throws(() => check(`open "${path}"`, libc().open(cstr(path), 0, 0)), ErrnoError);
 * ```
 */
export function check(what: string, result: number): number {
  if (result === -1) throw new ErrnoError(what, errno());
  return result;
}

/**
 * A NUL-terminated copy of `s` for passing to C.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cstr, libc } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * strictEqual(libc().mkfifo(cstr(`${dir}/f`), 0o600), 0);
 * strictEqual(Deno.statSync(`${dir}/f`).isFifo, true);
 * strictEqual(cstr("ab").at(-1), 0); // NUL-terminated
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function cstr(s: string): Uint8Array<ArrayBuffer> {
  const bytes = new TextEncoder().encode(s);
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/**
 * `open(2)` flags used by skiff (Linux, x86_64 and aarch64 values).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`);
 * // A FIFO opened read-write never blocks the open, whoever is (not) at the other end.
 * const fd = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
 * strictEqual(fd > 2, true);
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export const O = {
  RDONLY: 0,
  WRONLY: 1,
  RDWR: 2,
  CREAT: 0o100,
  APPEND: 0o2000,
  NONBLOCK: 0o4000,
  CLOEXEC: 0o2000000,
} as const;

/**
 * `open(2)` with `O_CLOEXEC` always added, so skiff's descriptors never leak into children.
 *
 * @example Usage
 * ```ts
 * import { throws } from "node:assert/strict";
 * import { ErrnoError, O, open } from "./libc.ts";
 * // A failed open throws, naming the path.
 * throws(() => open("/nonexistent/skiff/stdout", O.RDWR | O.NONBLOCK), ErrnoError);
 * ```
 */
export function open(path: string, flags: number, mode = 0): number {
  return check(`open "${path}"`, libc().open(cstr(path), flags | O.CLOEXEC, mode));
}

/**
 * `close(2)`; errors are ignored because there is nothing a caller could do about them.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd, libc } from "./libc.ts";
 * const fd = eventfd();
 * close(fd);
 * strictEqual(libc().close(fd), -1); // already closed
 * ```
 */
export function close(fd: number): void {
  libc().close(fd);
}

/**
 * `mkfifo(3)`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open, readFd, writeFd } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`, 0o600);
 * const fd = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
 * strictEqual(writeFd(fd, new TextEncoder().encode("hi"), "stdout fifo"), 2);
 * const buf = new Uint8Array(8);
 * strictEqual(readFd(fd, buf, "stdout fifo"), 2);
 * strictEqual(readFd(fd, buf, "stdout fifo"), null); // empty: would block
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function mkfifo(path: string, mode = 0o600): void {
  check(`mkfifo "${path}"`, libc().mkfifo(cstr(path), mode));
}

const F_GETFL = 3;
const F_SETFL = 4;

/**
 * Sets `O_NONBLOCK` on `fd`, which every descriptor handed to {@linkcode waitFd} needs.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open, readFd, setNonBlocking } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`);
 * const fd = open(`${dir}/stdout`, O.RDWR); // blocking
 * setNonBlocking(fd);
 * strictEqual(readFd(fd, new Uint8Array(8), "stdout fifo"), null); // would block: null, no hang
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function setNonBlocking(fd: number): void {
  const flags = check(`fcntl F_GETFL fd ${fd}`, libc().fcntl(fd, F_GETFL, 0));
  check(`fcntl F_SETFL fd ${fd}`, libc().fcntl(fd, F_SETFL, flags | O.NONBLOCK));
}

/**
 * Non-blocking `read(2)`: the byte count, 0 at end of file, or `null` when the read would block.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open, readFd, writeFd } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`);
 * const fd = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
 * const buf = new Uint8Array(8);
 * strictEqual(readFd(fd, buf, "stdin fifo"), null); // nothing yet
 * writeFd(fd, new TextEncoder().encode("hi"), "stdin fifo");
 * const n: number | null = readFd(fd, buf, "stdin fifo");
 * strictEqual(n, 2);
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function readFd(fd: number, buf: Uint8Array<ArrayBuffer>, what: string): number | null {
  const n = Number(libc().read(fd, buf, BigInt(buf.byteLength)));
  if (n >= 0) return n;
  const e = errno();
  if (e === Errno.EAGAIN || e === Errno.EINTR) return null;
  throw new ErrnoError(`read ${what} (fd ${fd})`, e);
}

/**
 * Non-blocking `write(2)`: the bytes written, or `null` when the write would block.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open, writeFd } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`);
 * const fd = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
 * const data = new Uint8Array(64 * 1024);
 * let n: number | null = 0;
 * let total = 0;
 * while ((n = writeFd(fd, data, "stdout fifo")) !== null) total += n; // until the pipe is full
 * strictEqual(n, null);
 * strictEqual(total > 0, true);
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function writeFd(fd: number, buf: Uint8Array<ArrayBuffer>, what: string): number | null {
  const n = Number(libc().write(fd, buf, BigInt(buf.byteLength)));
  if (n >= 0) return n;
  const e = errno();
  if (e === Errno.EAGAIN || e === Errno.EINTR) return null;
  throw new ErrnoError(`write ${what} (fd ${fd})`, e);
}

/**
 * Bytes waiting to be read in a pipe, FIFO, socket or terminal (`FIONREAD`); 0 when the kernel
 * cannot say (the descriptor is closed or of another kind).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, mkfifo, O, open, unreadBytes, writeFd } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`);
 * const fd = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
 * writeFd(fd, new TextEncoder().encode("hello"), "stdout fifo");
 * strictEqual(unreadBytes(fd), 5);
 * close(fd);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function unreadBytes(fd: number): number {
  const FIONREAD = 0x541b;
  const n = new Int32Array(1);
  if (libc().ioctl(fd, BigInt(FIONREAD), new Uint8Array(n.buffer)) === -1) return 0;
  return n[0];
}

/**
 * `eventfd(2)` with `EFD_CLOEXEC | EFD_NONBLOCK`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd } from "./libc.ts";
 * const efd: number = eventfd();
 * strictEqual(efd >= 0, true);
 * close(efd);
 * ```
 */
export function eventfd(): number {
  const EFD_CLOEXEC = 0o2000000;
  const EFD_NONBLOCK = 0o4000;
  return check("eventfd", libc().eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

/**
 * `getpid(2)`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { getpid } from "./libc.ts";
 * strictEqual(getpid(), Deno.pid);
 * ```
 */
export function getpid(): number {
  return libc().getpid();
}

/**
 * `kill(2)`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { kill } from "@skiff/shim/linux";
 * const child = new Deno.Command("sleep", { args: ["60"] }).spawn();
 * kill(child.pid, 9);
 * strictEqual((await child.status).signal, "SIGKILL");
 * ```
 */
export function kill(pid: number, signal: number): void {
  check(`kill pid ${pid} signal ${signal}`, libc().kill(pid, signal));
}

/**
 * `prctl(2)` with integer arguments.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { prctl } from "./libc.ts";
 * // prctl(36, 1) is PR_SET_CHILD_SUBREAPER (Reaper.start does it); PR_GET_DUMPABLE (3) only reads.
 * strictEqual(prctl(3), 1);
 * ```
 */
export function prctl(option: number, arg2 = 0, arg3 = 0, arg4 = 0, arg5 = 0): number {
  return check(
    `prctl option ${option}`,
    libc().prctl(option, BigInt(arg2), BigInt(arg3), BigInt(arg4), BigInt(arg5)),
  );
}

/**
 * `waitpid(pid, &status, WNOHANG)`: the raw wait status, or `null` while `pid` is still running.
 *
 * @example Usage
 * ```ts ignore
 * const status: number | null = waitpidNoHang(pid);
 * ```
 */
export function waitpidNoHang(pid: number): number | null {
  const WNOHANG = 1;
  const status = new Int32Array(1);
  const r = check(
    `waitpid pid ${pid}`,
    libc().waitpid(pid, new Uint8Array(status.buffer), WNOHANG),
  );
  return r === 0 ? null : status[0];
}

const waitInfo = new Int32Array(32); // siginfo_t: 128 bytes; si_pid is the fifth int

/**
 * `waitid(idtype, id, WEXITED | WNOHANG | WNOWAIT)`: the pid of a child that has exited and waits
 * to be reaped, left unreaped; 0 when none does (or on ECHILD).
 */
function peekExited(idtype: number, id: number): number {
  const WNOHANG = 1;
  const WEXITED = 4;
  const WNOWAIT = 0x01000000;
  waitInfo.fill(0);
  const r = libc().waitid(idtype, id, new Uint8Array(waitInfo.buffer), WEXITED | WNOHANG | WNOWAIT);
  // With WNOHANG and no zombie, waitid returns 0 and leaves si_pid 0; ECHILD is -1.
  return r === 0 ? waitInfo[4]! : 0;
}

/**
 * Whether child `pid` has exited and waits to be reaped (a zombie), without reaping it:
 * `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`. False for a child still running, and for a
 * pid that is not (or no longer) an unreaped child of this process.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { childExited } from "./libc.ts";
 * const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
 * strictEqual(childExited(child.pid), false);
 * child.kill();
 * await child.status;
 * strictEqual(childExited(child.pid), false); // reaped: no longer a child
 * ```
 */
export function childExited(pid: number): boolean {
  const P_PID = 1;
  return peekExited(P_PID, pid) === pid;
}

/**
 * Whether any child of this process (of any of its threads) has exited and waits to be reaped,
 * without reaping it: `waitid(P_ALL, 0, WEXITED | WNOHANG | WNOWAIT)`. One system call, where
 * listing the children to find one costs a read per thread.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { anyChildExited } from "./libc.ts";
 * const child = new Deno.Command("sleep", { args: ["5"] }).spawn();
 * strictEqual(anyChildExited(), false); // running
 * child.kill();
 * await child.status; // Deno reaped it
 * strictEqual(anyChildExited(), false);
 * ```
 */
export function anyChildExited(): boolean {
  const P_ALL = 0;
  return peekExited(P_ALL, 0) !== 0;
}

/**
 * The exit status containerd expects from a raw wait status: the exit code, or 128 + signal.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeWaitStatus } from "./libc.ts";
 * strictEqual(decodeWaitStatus(7 << 8), 7); // exit(7)
 * strictEqual(decodeWaitStatus(9), 137); // SIGKILL
 * ```
 */
export function decodeWaitStatus(raw: number): number {
  const sig = raw & 0x7f;
  return sig === 0 ? (raw >> 8) & 0xff : 128 + sig;
}
