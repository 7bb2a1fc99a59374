/**
 * When a process's output has landed: what {@linkcode ProcessIo} waits for before the process's
 * exit goes out.
 *
 * @module
 */

/**
 * A copy's source that counts what it has read and what waits in it unread (a pipe:
 * `FIONREAD`). The count must be taken as the bytes leave the descriptor: counted later, a
 * chunk read and not yet handed on would be in neither figure.
 */
export interface UnreadSource {
  /** Bytes read from the source so far. */
  readonly bytesRead: number;
  /** Bytes written into the source that no read has taken yet. */
  unread(): number;
}

/**
 * How long {@linkcode OutputLanding.landed} keeps waiting with no byte moving: a copy whose
 * reader stopped reading (a client that stopped, or never opened its FIFO) must not hold the exit
 * for long. A pipe's copy waits only while the process's own bytes are still on their way, so
 * it can wait longer than a terminal's, which waits for its end (a background process holding
 * the terminal is common) and cannot count what the kernel still holds for it.
 */
const PIPE_QUIET_MS = 2_000;
const END_QUIET_MS = 500;

/**
 * How long a FIFO holding output waits for its client's first read before the client counts as
 * gone. A client seen reading gets {@linkcode PIPE_QUIET_MS}.
 */
const FIRST_READ_MS = 500;

/**
 * A FIFO holding bytes that no read has taken for this long before the exit (since its first
 * write, or the last read seen) has no client: `ctr run -d` opens its FIFOs and leaves. Its exit
 * does not wait for a read at all.
 */
const UNREAD_FOR_MS = 500;

/** A target whose reader must take everything (a FIFO), as {@linkcode OutputLanding.watch} sees it. */
export interface WatchedTarget {
  /** Bytes it holds that its reader has not taken; 0 once it is closed. */
  unread(): number;
  /**
   * When (`performance.now()`) its reader was last seen taking bytes, or its first byte was
   * written if none was seen; undefined before any write.
   */
  readonly activeAt: number | undefined;
}

/** Longest {@linkcode OutputLanding.landed} waits in all, as the runc shim's Delete waits. */
const LANDING_MAX_MS = 10_000;

/** How often a FIFO the client is still reading is looked at (nothing signals its emptying). */
const TARGET_LOOK_MS = 10;

/**
 * One output copy's progress: bytes settled (written to the target, or discarded after the
 * target failed), and whether the source ended.
 */
export class CopyProgress {
  #landing: OutputLanding;
  /** The source, when it can count its unread bytes; else the copy lands only at its end. */
  readonly source: UnreadSource | undefined;
  /** Bytes written to the target or discarded. */
  settled = 0;
  /** The source reached its end (or the copy stopped). */
  ended = false;

  /** @internal use {@linkcode OutputLanding.track} */
  constructor(landing: OutputLanding, source: UnreadSource | undefined) {
    this.#landing = landing;
    this.source = source;
  }

  /**
   * Counts `n` bytes written to the target (or discarded).
   *
   * @param n the chunk's length
   */
  settle(n: number): void {
    this.settled += n;
    this.#landing.moved();
  }

  /** The source ended, or the copy was stopped. */
  end(): void {
    this.ended = true;
    this.#landing.moved();
  }
}

/**
 * The output copies of one process, and the wait for its output to land before its exit goes
 * out: containerd's client closes its FIFOs as soon as it has the exit (containerd 1.6's task
 * Delete closes them before it waits for its copies), so bytes still on their way are lost.
 *
 * A copy has landed when its source ended, or, for a pipe, when every byte that was in the pipe
 * or in hand when {@linkcode OutputLanding.landed} began has been written: those are all the
 * process wrote before it exited; bytes written later come from something else holding the pipe.
 * Then every watched target (a FIFO) must have been read empty: containerd's `ctr` (1.6, and 2.1
 * as measured) loses what its FIFOs still hold when it closes them at the exit. The wait is as long
 * as the client takes to read (a slow client, a loaded node), and gives up only when no byte moved
 * for a while or after {@linkcode LANDING_MAX_MS}. A FIFO whose reader took nothing for
 * {@linkcode UNREAD_FOR_MS} before the exit is not waited for: nobody reads it (`ctr run -d`
 * opens its FIFOs and leaves), and the exit goes out as promptly as the Go shim's.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { OutputLanding } from "./output_landing.ts";
 * const landing = new OutputLanding();
 * const pipe = { bytesRead: 0, unread: () => 3 - pipe.bytesRead }; // the process wrote 3 bytes
 * const copy = landing.track(pipe);
 * const landed = landing.landed();
 * pipe.bytesRead = 3; // the copy read them…
 * copy.settle(3); // …and wrote them to the target: the process's output has landed
 * strictEqual(await landed, true);
 * ```
 */
export class OutputLanding {
  #copies = new Set<CopyProgress>();
  #targets = new Set<WatchedTarget>();
  #moved = Promise.withResolvers<void>();

  /**
   * Tracks a new output copy.
   *
   * @param source its source, when it can count unread bytes; a copy without one (a terminal,
   *   a stream) lands only when it ends
   */
  track(source?: UnreadSource): CopyProgress {
    const copy = new CopyProgress(this, source);
    this.#copies.add(copy);
    return copy;
  }

  /**
   * Watches a target whose reader must have taken everything before the output counts as
   * landed (a FIFO: its client may close it at the exit, losing what it holds).
   *
   * @param target the target
   */
  watch(target: WatchedTarget): void {
    this.#targets.add(target);
  }

  /** @internal a copy moved bytes or ended */
  moved(): void {
    this.#moved.resolve();
    this.#moved = Promise.withResolvers();
  }

  /**
   * Waits until every copy has landed what its source held now, and every watched target's
   * reader has taken it (or is gone: it took nothing for a while). Call it once the process has
   * exited.
   *
   * @param maxMs the overall bound
   * @returns `true` once landed, `false` when it gave up (bytes stopped moving, or `maxMs`)
   */
  async landed(maxMs: number = LANDING_MAX_MS): Promise<boolean> {
    const goals = [...this.#copies].map((copy) => ({
      copy,
      // Everything read (in hand or written) plus what the pipe holds.
      goal: copy.source ? copy.source.bytesRead + copy.source.unread() : Infinity,
    }));
    const deadline = performance.now() + maxMs;
    let lastMove = performance.now();
    let held = Infinity; // what the targets held at the last look
    let read = false; // a target's client was seen reading
    for (;;) {
      const pending = goals.filter(({ copy, goal }) => !copy.ended && copy.settled < goal);
      // The targets count once the copies have put the process's bytes into them.
      const holding = pending.length > 0 ? 0 : this.#held(read);
      if (pending.length === 0 && holding === 0) return true;
      if (holding < held && held !== Infinity) {
        lastMove = performance.now(); // the client took some
        read = true;
      }
      held = holding;
      const quiet = pending.some(({ goal }) => goal !== Infinity)
        ? PIPE_QUIET_MS
        : holding > 0
        ? (read ? PIPE_QUIET_MS : FIRST_READ_MS)
        : END_QUIET_MS;
      const left = Math.min(deadline, lastMove + quiet) - performance.now();
      if (left <= 0) return false;
      const wait = holding > 0 ? Math.min(left, TARGET_LOOK_MS) : left;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const moved = await Promise.race([
        this.#moved.promise.then(() => true),
        new Promise<false>((r) => timer = setTimeout(() => r(false), wait)),
      ]);
      clearTimeout(timer);
      if (moved) lastMove = performance.now();
    }
  }

  /**
   * Bytes the watched targets hold that their readers have not taken; a target whose reader
   * was idle for {@linkcode UNREAD_FOR_MS} counts for none, unless `reading` (seen since).
   */
  #held(reading: boolean): number {
    let n = 0;
    const now = performance.now();
    for (const t of this.#targets) {
      const unread = t.unread();
      const gone = !reading && t.activeAt !== undefined && now - t.activeAt >= UNREAD_FOR_MS;
      if (!gone) n += unread;
    }
    return n;
  }
}
