/**
 * Internal: serialises frame writes on one connection. Frames queued while a write is in
 * progress are coalesced into a single write, so many concurrent calls cost few syscalls.
 *
 * @module
 */

/** Largest single write when coalescing queued frames. */
const COALESCE_LIMIT = 256 * 1024;

/** The part of `Deno.Conn` the writer needs. */
export interface FrameSink {
  write(p: Uint8Array): Promise<number>;
}

/** Writes whole frames in order; reports the first write failure once. */
export class FrameWriter {
  #sink: FrameSink;
  #onError: (err: unknown) => void;
  #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #flushing = false;
  #failed = false;
  #waiters: Array<() => void> = [];

  constructor(sink: FrameSink, onError: (err: unknown) => void) {
    this.#sink = sink;
    this.#onError = onError;
  }

  /** Bytes accepted but not yet written. */
  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /** Queues an encoded frame; dropped silently once the connection has failed. */
  send(frame: Uint8Array): void {
    if (this.#failed) return;
    this.#queue.push(frame);
    this.#queuedBytes += frame.length;
    if (!this.#flushing) void this.#flush();
  }

  /** Resolves once everything queued so far is written (or the writer failed). */
  drained(): Promise<void> {
    if (this.#queuedBytes === 0 && !this.#flushing) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  async #flush(): Promise<void> {
    this.#flushing = true;
    try {
      while (this.#queue.length > 0 && !this.#failed) {
        let n = 0;
        let size = 0;
        while (
          n < this.#queue.length && (n === 0 || size + this.#queue[n].length <= COALESCE_LIMIT)
        ) {
          size += this.#queue[n].length;
          n++;
        }
        const batch = this.#queue.splice(0, n);
        let buf: Uint8Array;
        if (batch.length === 1) {
          buf = batch[0];
        } else {
          buf = new Uint8Array(size);
          let off = 0;
          for (const f of batch) {
            buf.set(f, off);
            off += f.length;
          }
        }
        let written = 0;
        while (written < buf.length) {
          written += await this.#sink.write(buf.subarray(written));
        }
        this.#queuedBytes -= size;
      }
    } catch (err) {
      this.#failed = true;
      this.#queue = [];
      this.#queuedBytes = 0;
      this.#onError(err);
    } finally {
      this.#flushing = false;
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const w of waiters) w();
    }
  }
}
