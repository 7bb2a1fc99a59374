/**
 * Cancellable waiting for a raw descriptor to become readable or writable.
 *
 * One `poll(2)` for every pending wait of the process runs in a worker thread (a `nonblocking`
 * FFI call), on each descriptor and on an eventfd owned by its {@linkcode Canceller};
 * signalling the eventfd wakes every wait it guards, so a descriptor is never closed while the
 * poll still watches it and nothing can wedge shutdown.
 *
 * @module
 */

import { close, eventfd, libc, readFd, writeFd } from "./libc.ts";

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
export function waitFd(fd: number, events: number, canceller: Canceller): Promise<boolean> {
  if (canceller.cancelled) return Promise.resolve(false);
  const w = Promise.withResolvers<boolean>();
  poller.add({ fd, events, canceller, resolve: w.resolve, reject: w.reject });
  return w.promise;
}

/** One pending {@linkcode waitFd}. */
interface Waiter {
  fd: number;
  events: number;
  canceller: Canceller;
  resolve(ready: boolean): void;
  reject(e: Error): void;
}

/**
 * Every wait of the process in one `poll(2)` on one worker thread. Deno runs at most 32
 * `nonblocking` FFI calls at once; a poll per wait stalled the 33rd (a shim serving seven
 * containers has that many: stdio pipes and FIFOs, OOM watches, connections) until another
 * ended. A wait added while the poll runs wakes it through an eventfd, and the next round
 * polls the new set.
 */
class Poller {
  #waiters = new Set<Waiter>();
  #wake: number | undefined;
  #running = false;
  #polling = false;

  add(w: Waiter): void {
    this.#waiters.add(w);
    if (!this.#running) void this.#run();
    else if (this.#polling) this.#kick();
  }

  #kick(): void {
    // Only while polling, and the poll loop made the eventfd before its first poll.
    if (this.#wake === undefined) return;
    const one = new Uint8Array(8);
    one[0] = 1;
    try {
      writeFd(this.#wake, one, "poller eventfd");
    } catch { /* the counter is full: the poll wakes anyway */ }
  }

  async #run(): Promise<void> {
    this.#running = true;
    this.#wake ??= eventfd();
    let failures = 0;
    try {
      while (this.#waiters.size > 0) {
        const list = [...this.#waiters];
        // Slot 0: the wake eventfd; then each wait's descriptor and its canceller's eventfd.
        const fds = new Uint8Array(8 * (1 + 2 * list.length));
        const view = new DataView(fds.buffer);
        view.setInt32(0, this.#wake, true);
        view.setInt16(4, POLLIN, true);
        list.forEach((w, i) => {
          const at = 8 * (1 + 2 * i);
          view.setInt32(at, w.fd, true);
          view.setInt16(at + 4, w.events, true);
          view.setInt32(at + 8, w.canceller.fd, true);
          view.setInt16(at + 12, POLLIN, true);
        });
        this.#polling = true;
        const r = await libc().poll(fds, BigInt(1 + 2 * list.length), -1);
        this.#polling = false;
        if (view.getInt16(6, true) !== 0) drain(this.#wake);
        if (r === -1) {
          // errno is unreadable for calls made on a worker thread; -1 is almost always EINTR
          // (signals such as SIGCHLD land on any thread), so retry, but not forever.
          if (++failures >= 1000) {
            for (const w of list) {
              this.#waiters.delete(w);
              w.reject(new Error(`poll fd ${w.fd}: failed 1000 times in a row`));
            }
          }
          continue;
        }
        failures = 0;
        list.forEach((w, i) => {
          const at = 8 * (1 + 2 * i);
          if (view.getInt16(at + 14, true) !== 0 || w.canceller.cancelled) {
            this.#waiters.delete(w);
            w.resolve(false);
            return;
          }
          const revents = view.getInt16(at + 6, true);
          if (revents === 0) return;
          this.#waiters.delete(w);
          if (revents & POLLNVAL) w.reject(new Error(`poll fd ${w.fd}: descriptor is not open`));
          else w.resolve(true);
        });
      }
    } finally {
      this.#running = false;
      this.#polling = false;
    }
  }
}

/** Empties an eventfd's counter (non-blocking: nothing to read is fine). */
function drain(fd: number): void {
  try {
    readFd(fd, new Uint8Array(8), "poller eventfd");
  } catch { /* nothing to read */ }
}

const poller = new Poller();
