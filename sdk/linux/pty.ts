/**
 * A pseudo-terminal master received from the OCI runtime.
 *
 * @module
 */

import { check, libc, unreadBytes } from "./libc.ts";
import { FdStream } from "./fd_stream.ts";

const TIOCSWINSZ = 0x5414;

/**
 * The master side of a container's terminal. Reads end when the container side closes (the
 * kernel reports EIO), so `readable` finishes when the last process holding the terminal exits.
 *
 * @example Usage
 * ```ts ignore
 * const pty = await consoleSocket.receiveMaster();
 * pty.resize(80, 24);
 * const writer = pty.writable.getWriter();
 * await writer.write(new TextEncoder().encode("echo hi\n"));
 * for await (const chunk of pty.readable) console.log(new TextDecoder().decode(chunk));
 * await pty.close();
 * ```
 */
export class Pty {
  /** The master descriptor (owned by this object). */
  readonly fd: number;
  #stream: FdStream;
  #readable: ReadableStream<Uint8Array> | undefined;
  #writable: WritableStream<Uint8Array> | undefined;

  /**
   * Takes ownership of a pty master descriptor.
   *
   * @param fd the master descriptor, e.g. from {@linkcode ConsoleSocket.receiveMaster}
   */
  constructor(fd: number) {
    this.fd = fd;
    this.#stream = new FdStream(fd, `pty master`, { eioIsEof: true });
  }

  /** True once {@linkcode Pty.close} has begun. */
  get closed(): boolean {
    return this.#stream.closed;
  }

  /** Output of the container's terminal, until it closes or {@linkcode Pty.close}. */
  get readable(): ReadableStream<Uint8Array> {
    this.#readable ??= this.#stream.readable();
    return this.#readable;
  }

  /** Input to the container's terminal. Closing it keeps the pty open. */
  get writable(): WritableStream<Uint8Array> {
    this.#writable ??= this.#stream.writable();
    return this.#writable;
  }

  /**
   * Writes `data` to the terminal (the same as writing to {@linkcode Pty.writable}).
   *
   * @param data the bytes
   */
  write(data: Uint8Array): Promise<void> {
    return this.#stream.write(data);
  }

  /**
   * Sets the window size (`TIOCSWINSZ`), as `ResizePty` asks.
   *
   * @param width columns
   * @param height rows
   */
  resize(width: number, height: number): void {
    const ws = new Uint8Array(8);
    const view = new DataView(ws.buffer);
    view.setUint16(0, height, true);
    view.setUint16(2, width, true);
    check(
      `resize pty (fd ${this.fd}) to ${width}x${height}`,
      libc().ioctl(this.fd, BigInt(TIOCSWINSZ), ws),
    );
  }

  /**
   * Bytes the terminal's output holds that nobody has read yet (`FIONREAD`); 0 when the kernel
   * cannot say. A shim that ends a terminal's output after its process exited (a background
   * process may hold the terminal open) drains until this is 0, as containerd's shim does.
   *
   * @example Usage
   * ```ts ignore
   * while (pty.unread() > 0) await new Promise((r) => setTimeout(r, 10));
   * await pty.close();
   * ```
   */
  unread(): number {
    return unreadBytes(this.fd);
  }

  /** Stops pending reads and writes and closes the master; idempotent. */
  close(): Promise<void> {
    return this.#stream.close();
  }
}
