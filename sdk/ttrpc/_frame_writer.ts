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

/**
 * Writes whole frames in order; reports the first write failure once. A write that makes no
 * progress for `timeoutMs` counts as a failure (the peer stopped reading).
 */
export class FrameWriter {
  #sink: FrameSink;
  #onError: (err: unknown) => void;
  #timeoutMs: number;
  #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #flushing = false;
  #failed = false;
  #waiters: Array<() => void> = [];

  constructor(sink: FrameSink, onError: (err: unknown) => void, timeoutMs: number = Infinity) {
    this.#sink = sink;
    this.#onError = onError;
    this.#timeoutMs = timeoutMs;
  }

  /** Drops what is queued and accepts nothing more (the connection is closed). */
  close(): void {
    this.#failed = true;
    this.#queue = [];
    this.#queuedBytes = 0;
    if (!this.#flushing) this.#wake();
  }

  /** Bytes accepted but not yet written. */
  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /** True when nothing is queued and no write is under way. */
  get idle(): boolean {
    return this.#queuedBytes === 0 && !this.#flushing;
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
        while (written < buf.length && !this.#failed) {
          written += await this.#write(buf.subarray(written));
        }
        if (!this.#failed) this.#queuedBytes -= size;
      }
    } catch (err) {
      const reported = this.#failed;
      this.#failed = true;
      this.#queue = [];
      this.#queuedBytes = 0;
      if (!reported) this.#onError(err);
    } finally {
      this.#flushing = false;
      this.#wake();
    }
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  /** One write, failing when it makes no progress for the timeout. */
  #write(buf: Uint8Array): Promise<number> {
    if (!Number.isFinite(this.#timeoutMs)) return this.#sink.write(buf);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stuck = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(`ttrpc write made no progress for ${this.#timeoutMs} ms (peer not reading)`),
          ),
        this.#timeoutMs,
      );
      Deno.unrefTimer(timer as unknown as number);
    });
    const write = this.#sink.write(buf);
    write.catch(() => {}); // once the connection closes after a timeout, its write rejects too
    return Promise.race([write, stuck]).finally(() => clearTimeout(timer));
  }
}
