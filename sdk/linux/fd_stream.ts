/**
 * Async reads and writes on a raw, non-blocking descriptor (FIFO, pty master, pipe) that
 * Deno's own file APIs cannot wrap.
 *
 * @module
 */

import { close, Errno, ErrnoError, readFd, setNonBlocking, unreadBytes, writeFd } from "./libc.ts";
import { Canceller, POLLIN, POLLOUT, waitFd } from "./poll.ts";

/**
 * Options for {@linkcode FdStream}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { FdStreamOptions } from "@skiff/shim/linux";
 * // A pty master reads EIO once the last slave closes: for a terminal that is end of file.
 * const options: FdStreamOptions = { eioIsEof: true };
 * strictEqual(options.eioIsEof, true);
 * ```
 */
export interface FdStreamOptions {
  /**
   * Treat EIO on read, once it repeats after a pause, as end of stream (a pty master whose
   * slave side closed).
   */
  eioIsEof?: boolean;
}

/** How often, and after how long, a pty's EIO is read again before it counts as the end. */
const EIO_RETRIES = 2;
const EIO_PAUSE_MS = 5;

/**
 * Owns one descriptor: `read`/`write` wait with a cancellable `poll`, writes are serialised so
 * concurrent writers (stdout and stderr sharing one FIFO) never interleave within a chunk, and
 * `close` cancels pending waits before closing the descriptor.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { FdStream } from "@skiff/shim/linux";
 * import { mkfifo, O, open } from "./libc.ts";
 * const dir = Deno.makeTempDirSync();
 * mkfifo(`${dir}/stdout`, 0o600);
 * // Read-write: the open never blocks, and the FIFO buffers what is written until it is read.
 * const s = new FdStream(open(`${dir}/stdout`, O.RDWR | O.NONBLOCK), "stdout fifo");
 * await s.write(new TextEncoder().encode("hello\n"));
 * const buf = new Uint8Array(16);
 * const n = await s.read(buf);
 * strictEqual(new TextDecoder().decode(buf.subarray(0, n!)), "hello\n");
 * await s.close();
 * strictEqual(s.closed, true);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export class FdStream {
  /** The descriptor; invalid after {@linkcode FdStream.close}. */
  readonly fd: number;
  /** What this descriptor is, for error messages (e.g. `stdout fifo "/x"`). */
  readonly what: string;
  #canceller = new Canceller();
  #eioIsEof: boolean;
  #pending = new Set<Promise<unknown>>();
  #writeChain: Promise<void> = Promise.resolve();
  #closed: Promise<void> | undefined;
  #bytesRead = 0;
  #bytesWritten = 0;

  /**
   * Takes ownership of `fd` and sets `O_NONBLOCK` on it.
   *
   * @param fd an open descriptor
   * @param what a description for error messages
   * @param options see {@linkcode FdStreamOptions}
   */
  constructor(fd: number, what: string, options: FdStreamOptions = {}) {
    this.fd = fd;
    this.what = what;
    this.#eioIsEof = options.eioIsEof ?? false;
    setNonBlocking(fd);
  }

  /** True once {@linkcode FdStream.close} has begun. */
  get closed(): boolean {
    return this.#closed !== undefined;
  }

  async #wait(events: number): Promise<boolean> {
    const p = waitFd(this.fd, events, this.#canceller);
    this.#pending.add(p);
    try {
      return await p;
    } finally {
      this.#pending.delete(p);
    }
  }

  /**
   * Reads into `buf`: the byte count, or `null` at end of stream or after close.
   *
   * @param buf the destination
   */
  async read(buf: Uint8Array<ArrayBuffer>): Promise<number | null> {
    let eio = 0;
    while (!this.closed) {
      let n: number | null;
      try {
        n = readFd(this.fd, buf, this.what);
      } catch (e) {
        if (!this.#eioIsEof || !(e instanceof ErrnoError) || e.errno !== Errno.EIO) throw e;
        // A pty's EIO can come while the last bytes the terminal's process wrote are still on
        // their way to the master (containerd's console code, too, takes EIO as temporary):
        // it is the end only when it repeats after a pause.
        if (++eio > EIO_RETRIES) return null;
        await new Promise((r) => setTimeout(r, EIO_PAUSE_MS));
        continue;
      }
      if (n === 0) return null;
      if (n !== null) {
        this.#bytesRead += n;
        return n;
      }
      if (!await this.#wait(POLLIN)) return null;
    }
    return null;
  }

  /** Bytes {@linkcode FdStream.read} has taken from the descriptor, counted as they leave it. */
  get bytesRead(): number {
    return this.#bytesRead;
  }

  /** Bytes {@linkcode FdStream.write} has put into the descriptor. */
  get bytesWritten(): number {
    return this.#bytesWritten;
  }

  /** Bytes waiting in the descriptor that nobody has read yet (`FIONREAD`); 0 once closed. */
  unread(): number {
    return this.closed ? 0 : unreadBytes(this.fd);
  }

  /**
   * Writes all of `data`, waiting while the descriptor is full. Throws `ErrnoError` (e.g. EPIPE)
   * when the reader is gone, and an error when the stream was closed first.
   *
   * @param data the bytes
   */
  write(data: Uint8Array): Promise<void> {
    const next = this.#writeChain.then(() => this.#writeAll(data));
    this.#writeChain = next.catch(() => {});
    return next;
  }

  async #writeAll(data: Uint8Array): Promise<void> {
    let rest: Uint8Array<ArrayBuffer> = new Uint8Array(data);
    while (rest.byteLength > 0) {
      if (this.closed) throw new Error(`write ${this.what}: stream is closed`);
      const n = writeFd(this.fd, rest, this.what);
      if (n !== null) {
        this.#bytesWritten += n;
        rest = rest.subarray(n);
        continue;
      }
      if (!await this.#wait(POLLOUT)) throw new Error(`write ${this.what}: stream is closed`);
    }
  }

  /**
   * A stream of the bytes read until end of stream or close.
   *
   * @param chunkSize the read buffer size
   */
  readable(chunkSize = 32 * 1024): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        const buf = new Uint8Array(chunkSize);
        const n = await this.read(buf);
        if (n === null) controller.close();
        else controller.enqueue(buf.subarray(0, n));
      },
      // No read-ahead: bytes stay in the descriptor until a reader asks, so what a live upgrade
      // hands on is never half in this stream's queue.
    }, { highWaterMark: 0 });
  }

  /**
   * A sink writing to the descriptor. Closing or aborting it leaves the descriptor open: the
   * owner closes it with {@linkcode FdStream.close}.
   */
  writable(): WritableStream<Uint8Array> {
    return new WritableStream<Uint8Array>({ write: (chunk) => this.write(chunk) });
  }

  /** Cancels pending waits, then closes the descriptor; idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#canceller.cancel();
      await Promise.allSettled([...this.#pending]);
      close(this.fd);
      this.#canceller.close();
    })();
    return this.#closed;
  }
}
