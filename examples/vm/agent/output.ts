/**
 * One output stream of a guest process (its stdout or stderr), held for the host's long polls
 * (`ReadStdout`/`ReadStderr`): the agent reads the pipe into a bounded buffer and hands out what
 * it holds; while the buffer is full it stops reading, so a host that does not read makes the
 * process block on its writes rather than the agent grow.
 *
 * @module
 */

/** Bytes held before the agent stops reading the pipe. */
const HIGH_WATER = 1 << 20;
/** What one read hands out when the host asks for no particular size. */
export const DEFAULT_READ_BYTES = 64 * 1024;

/** A process's stdout or stderr, read ahead into a bounded buffer. */
export class Output {
  #chunks: Uint8Array[] = [];
  #held = 0;
  #eof = false;
  #waiters: (() => void)[] = [];
  #drained: (() => void) | undefined;
  #ended = Promise.withResolvers<void>();

  /**
   * Starts reading `stream` (absent: an output the host did not ask for, at end of file).
   *
   * @param stream the pipe's readable side
   */
  constructor(stream?: ReadableStream<Uint8Array>) {
    if (stream) void this.#pump(stream);
    else {
      this.#eof = true;
      this.#ended.resolve();
    }
  }

  /** Resolves once the stream reached end of file (what it held may not be read yet). */
  get ended(): Promise<void> {
    return this.#ended.promise;
  }

  /** True once the stream ended and everything held was handed out. */
  get done(): boolean {
    return this.#eof && this.#held === 0;
  }

  /**
   * The next bytes, waiting for some when none are held; `eof` once the stream ended and all
   * was read. An aborted `signal` answers at once with no data (the host went away).
   *
   * @param maxBytes at most this many bytes (0: {@linkcode DEFAULT_READ_BYTES})
   * @param signal the call's signal
   */
  async read(maxBytes: number, signal?: AbortSignal): Promise<{ data: Uint8Array; eof: boolean }> {
    while (this.#held === 0 && !this.#eof) {
      if (signal?.aborted) return { data: new Uint8Array(), eof: false };
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal?.removeEventListener("abort", wake);
          resolve();
        };
        this.#waiters.push(wake);
        signal?.addEventListener("abort", wake, { once: true });
      });
    }
    if (this.#held === 0) return { data: new Uint8Array(), eof: true };
    const limit = maxBytes > 0 ? maxBytes : DEFAULT_READ_BYTES;
    const parts: Uint8Array[] = [];
    let size = 0;
    while (this.#chunks.length > 0 && size < limit) {
      const head = this.#chunks[0];
      const take = Math.min(head.length, limit - size);
      parts.push(head.subarray(0, take));
      size += take;
      if (take === head.length) this.#chunks.shift();
      else this.#chunks[0] = head.subarray(take);
    }
    this.#held -= size;
    const drained = this.#drained;
    this.#drained = undefined;
    drained?.();
    const data = parts.length === 1 ? parts[0] : concat(parts, size);
    return { data, eof: false };
  }

  async #pump(stream: ReadableStream<Uint8Array>): Promise<void> {
    const reader = stream.getReader();
    try {
      for (;;) {
        if (this.#held >= HIGH_WATER) await new Promise<void>((r) => this.#drained = r);
        const { value, done } = await reader.read();
        if (done) break;
        if (value.length === 0) continue;
        this.#chunks.push(value);
        this.#held += value.length;
        this.#wake();
      }
    } catch {
      // A broken pipe ends the stream like end of file does.
    } finally {
      reader.releaseLock();
      this.#eof = true;
      this.#ended.resolve();
      this.#wake();
    }
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }
}

function concat(parts: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
