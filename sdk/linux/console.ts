/**
 * The console socket an OCI runtime (`runc --console-socket`) sends a pty master through.
 *
 * @module
 */

import { check, close, cstr, Errno, errno, ErrnoError, libc } from "./libc.ts";
import { Canceller, POLLIN, waitFd } from "./poll.ts";
import { Pty } from "./pty.ts";

export { Pty } from "./pty.ts";

const AF_UNIX = 1;
const SOCK_STREAM = 1;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SCM_RIGHTS = 1;
const MSG_CMSG_CLOEXEC = 0x40000000;
const SUN_PATH_MAX = 108;

/**
 * A listening unix socket in a private temporary directory. Pass {@linkcode ConsoleSocket.path}
 * to `runc create/exec --console-socket`, then {@linkcode ConsoleSocket.receiveMaster}.
 *
 * @example Usage
 * ```ts ignore
 * const socket = await ConsoleSocket.create();
 * const master = socket.receiveMaster();
 * await reaper.spawn(new Deno.Command("runc", {
 *   args: ["create", "--bundle", bundle, "--console-socket", socket.path, id],
 * })).status;
 * const pty = await master;
 * await socket.close();
 * ```
 */
export class ConsoleSocket {
  /** The socket path. */
  readonly path: string;
  #fd: number;
  #dir: string;
  #cancellers = new Set<Canceller>();
  #receiving = new Set<Promise<Pty>>();
  #closed = false;

  private constructor(fd: number, path: string, dir: string) {
    this.#fd = fd;
    this.path = path;
    this.#dir = dir;
  }

  /**
   * Creates and listens on `<new temp dir>/console.sock`.
   *
   * @param dir where to create the temporary directory; the system default when omitted
   */
  static async create(dir?: string): Promise<ConsoleSocket> {
    const tmp = await Deno.makeTempDir({ prefix: "skiff-console-", ...(dir ? { dir } : {}) });
    const path = `${tmp}/console.sock`;
    const pathBytes = cstr(path);
    if (pathBytes.byteLength > SUN_PATH_MAX) {
      await Deno.remove(tmp, { recursive: true });
      throw new Error(`console socket path "${path}" is longer than ${SUN_PATH_MAX - 1} bytes`);
    }
    let fd = -1;
    try {
      fd = check(
        `create console socket "${path}"`,
        libc().socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
      );
      const addr = new Uint8Array(2 + pathBytes.byteLength);
      new DataView(addr.buffer).setUint16(0, AF_UNIX, true);
      addr.set(pathBytes, 2);
      check(`bind console socket "${path}"`, libc().bind(fd, addr, addr.byteLength));
      check(`listen on console socket "${path}"`, libc().listen(fd, 1));
    } catch (e) {
      if (fd !== -1) close(fd);
      await Deno.remove(tmp, { recursive: true });
      throw e;
    }
    return new ConsoleSocket(fd, path, tmp);
  }

  /**
   * Accepts one connection and receives the pty master sent with SCM_RIGHTS. Rejects when
   * `signal` aborts or the socket is closed first.
   *
   * @param signal aborts the wait
   */
  receiveMaster(signal?: AbortSignal): Promise<Pty> {
    const p = this.#receive(signal);
    this.#receiving.add(p);
    const done = (): void => {
      this.#receiving.delete(p);
    };
    p.then(done, done);
    return p;
  }

  async #receive(signal: AbortSignal | undefined): Promise<Pty> {
    if (this.#closed) throw new Error(`receive pty from "${this.path}": console socket is closed`);
    signal?.throwIfAborted();
    const canceller = new Canceller();
    this.#cancellers.add(canceller);
    const onAbort = (): void => canceller.cancel();
    signal?.addEventListener("abort", onAbort);
    let conn = -1;
    try {
      while (conn === -1) {
        if (!await waitFd(this.#fd, POLLIN, canceller)) throw this.#stopped(signal);
        conn = libc().accept4(this.#fd, null, null, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (conn === -1) {
          const e = errno();
          if (e !== Errno.EAGAIN && e !== Errno.EINTR) {
            throw new ErrnoError(`accept on console socket "${this.path}"`, e);
          }
        }
      }
      for (;;) {
        if (!await waitFd(conn, POLLIN, canceller)) throw this.#stopped(signal);
        const fd = this.#receiveFd(conn);
        if (fd !== null) return new Pty(fd);
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      if (conn !== -1) close(conn);
      this.#cancellers.delete(canceller);
      canceller.close();
    }
  }

  #stopped(signal: AbortSignal | undefined): unknown {
    if (signal?.aborted) return signal.reason;
    return new Error(`receive pty from "${this.path}": console socket is closed`);
  }

  /** One recvmsg: the received descriptor, or null when nothing was ready yet. */
  #receiveFd(conn: number): number | null {
    const data = new Uint8Array(4096); // runc sends the terminal's name as the payload
    const iov = new Uint8Array(16);
    const iovView = new DataView(iov.buffer);
    iovView.setBigUint64(0, ptr(data), true);
    iovView.setBigUint64(8, BigInt(data.byteLength), true);
    const control = new Uint8Array(64);
    const msg = new Uint8Array(56);
    const msgView = new DataView(msg.buffer);
    msgView.setBigUint64(16, ptr(iov), true); // msg_iov
    msgView.setBigUint64(24, 1n, true); // msg_iovlen
    msgView.setBigUint64(32, ptr(control), true); // msg_control
    msgView.setBigUint64(40, BigInt(control.byteLength), true); // msg_controllen
    const n = Number(libc().recvmsg(conn, msg, MSG_CMSG_CLOEXEC));
    if (n === -1) {
      const e = errno();
      if (e === Errno.EAGAIN || e === Errno.EINTR) return null;
      throw new ErrnoError(`receive pty from console socket "${this.path}"`, e);
    }
    // Walk the control messages (cmsghdr: u64 len, i32 level, i32 type, data).
    const controlLen = Number(msgView.getBigUint64(40, true));
    const cview = new DataView(control.buffer);
    let fd: number | null = null;
    for (let off = 0; off + 16 <= controlLen;) {
      const len = Number(cview.getBigUint64(off, true));
      if (len < 16) break;
      if (
        cview.getInt32(off + 8, true) === SOL_SOCKET &&
        cview.getInt32(off + 12, true) === SCM_RIGHTS
      ) {
        for (let i = off + 16; i + 4 <= off + len; i += 4) {
          const received = cview.getInt32(i, true);
          if (fd === null) fd = received;
          else close(received); // only one is expected
        }
      }
      off += (len + 7) & ~7;
    }
    if (fd === null) {
      throw new Error(
        `receive pty from console socket "${this.path}": ${
          n === 0 ? "peer closed without sending" : "message carried no file descriptor"
        }`,
      );
    }
    return fd;
  }

  /** Stops pending receives, closes the socket and removes its directory; idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const c of this.#cancellers) c.cancel();
    // Pending receives must observe the cancel before the descriptor goes away.
    await Promise.allSettled([...this.#receiving]);
    close(this.#fd);
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }
}

function ptr(buf: Uint8Array): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(buf)));
}
