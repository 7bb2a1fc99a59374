/**
 * Cancellable waiting for a raw descriptor to become readable or writable.
 *
 * `poll(2)` runs in a worker thread (a `nonblocking` FFI call) on the descriptor and on an
 * eventfd owned by a {@linkcode Canceller}; signalling the eventfd wakes every pending wait, so
 * a descriptor is never closed while another thread still polls it and nothing can wedge
 * shutdown.
 *
 * @module
 */

import { close, eventfd, libc, writeFd } from "./libc.ts";

/**
 * `poll(2)` event bit: readable.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd, writeFd } from "./libc.ts";
 * import { Canceller, POLLIN, waitFd } from "./poll.ts";
 * const fd = eventfd();
 * const canceller = new Canceller();
 * writeFd(fd, new Uint8Array(new BigUint64Array([1n]).buffer), "eventfd"); // now readable
 * strictEqual(await waitFd(fd, POLLIN, canceller), true);
 * canceller.close();
 * close(fd);
 * ```
 */
export const POLLIN = 0x1;
/**
 * `poll(2)` event bit: writable.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd } from "./libc.ts";
 * import { Canceller, POLLOUT, waitFd } from "./poll.ts";
 * const fd = eventfd(); // its counter is far from full: writable at once
 * const canceller = new Canceller();
 * strictEqual(await waitFd(fd, POLLOUT, canceller), true);
 * canceller.close();
 * close(fd);
 * ```
 */
export const POLLOUT = 0x4;
const POLLNVAL = 0x20;

/**
 * An eventfd that, once signalled, makes every current and future {@linkcode waitFd} on it
 * return `false`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd } from "./libc.ts";
 * import { Canceller, POLLIN, waitFd } from "./poll.ts";
 * const fd = eventfd(); // never written: never readable
 * const c = new Canceller();
 * const ready = waitFd(fd, POLLIN, c);
 * c.cancel();
 * strictEqual(await ready, false);
 * c.close();
 * close(fd);
 * ```
 */
export class Canceller {
  /** The eventfd polled next to the watched descriptor. */
  readonly fd: number;
  #cancelled = false;
  #closed = false;

  /** Creates the eventfd. */
  constructor() {
    this.fd = eventfd();
  }

  /** True once {@linkcode Canceller.cancel} was called. */
  get cancelled(): boolean {
    return this.#cancelled;
  }

  /** Wakes all waits; idempotent. */
  cancel(): void {
    if (this.#cancelled || this.#closed) return;
    this.#cancelled = true;
    const one = new Uint8Array(8);
    one[0] = 1;
    writeFd(this.fd, one, "canceller eventfd");
  }

  /** Closes the eventfd; call only once no wait is pending. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    close(this.fd);
  }
}

/**
 * Waits until `fd` reports one of `events` (or an error or hang-up, which the next read or
 * write will surface). Resolves `true` when ready, `false` when `canceller` was cancelled.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { close, eventfd, readFd, writeFd } from "./libc.ts";
 * import { Canceller, POLLIN, waitFd } from "./poll.ts";
 * const fd = eventfd();
 * const canceller = new Canceller();
 * writeFd(fd, new Uint8Array(new BigUint64Array([1n]).buffer), "eventfd");
 * const buf = new Uint8Array(8);
 * strictEqual(await waitFd(fd, POLLIN, canceller), true);
 * strictEqual(readFd(fd, buf, "eventfd"), 8);
 * canceller.close();
 * close(fd);
 * ```
 */
export async function waitFd(fd: number, events: number, canceller: Canceller): Promise<boolean> {
  if (canceller.cancelled) return false;
  const fds = new Uint8Array(16);
  const view = new DataView(fds.buffer);
  view.setInt32(0, fd, true);
  view.setInt16(4, events, true);
  view.setInt32(8, canceller.fd, true);
  view.setInt16(12, POLLIN, true);
  // errno is unreadable for calls made on a worker thread; -1 is almost always EINTR
  // (signals such as SIGCHLD land on any thread), so retry, but not forever.
  for (let failures = 0; failures < 1000;) {
    const r = await libc().poll(fds, 2n, -1);
    if (r === -1) {
      failures++;
      continue;
    }
    if (r === 0) continue;
    if (view.getInt16(14, true) !== 0 || canceller.cancelled) return false;
    const revents = view.getInt16(6, true);
    if (revents & POLLNVAL) throw new Error(`poll fd ${fd}: descriptor is not open`);
    if (revents !== 0) return true;
  }
  throw new Error(`poll fd ${fd}: failed 1000 times in a row`);
}
