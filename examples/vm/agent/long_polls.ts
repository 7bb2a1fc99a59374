/**
 * The long polls the agent holds for the host (ReadStdout, ReadStderr, Wait, OomEvent), so that
 * `Release` can answer them all at once: before a live upgrade re-executes the host's shim, its
 * connection to the agent must have no call pending.
 *
 * A released poll answers without taking anything: the bytes, the exit or the OOM event it
 * would have returned stay for the next call. A poll whose answer was already due when Release
 * came answers with it (and is not counted).
 *
 * @module
 */

/** One held poll: its release, and whether its answer was the released one. */
interface Held {
  release: AbortController;
  released: Promise<boolean>;
}

/** The agent's pending long polls, on every connection. */
export class LongPolls {
  #held = new Set<Held>();

  /**
   * Holds one long poll until it answers.
   *
   * @param poll the poll; `release` aborts when Release comes, and the poll must then answer at
   *   once, taking nothing
   * @param isReleased whether an answer is the released one (counted by Release)
   * @returns the poll's answer
   */
  async hold<T>(
    poll: (release: AbortSignal) => Promise<T>,
    isReleased: (answer: T) => boolean,
  ): Promise<T> {
    const release = new AbortController();
    const released = Promise.withResolvers<boolean>();
    const held = { release, released: released.promise };
    this.#held.add(held);
    try {
      const answer = await poll(release.signal);
      released.resolve(release.signal.aborted && isReleased(answer));
      return answer;
    } catch (e) {
      released.resolve(false);
      throw e;
    } finally {
      this.#held.delete(held);
    }
  }

  /**
   * Answers every held poll; resolves once they have answered.
   *
   * @returns how many answered with the released answer
   */
  async release(): Promise<number> {
    const held = [...this.#held];
    // Taken: a second Release at the same time neither waits for nor counts these again.
    this.#held.clear();
    for (const h of held) h.release.abort();
    const outcomes = await Promise.all(held.map((h) => h.released));
    // One macrotask: the released handlers' answers are encoded and queued in microtasks, so
    // they go out before this Release's answer.
    await new Promise((r) => setTimeout(r, 0));
    return outcomes.filter((r) => r).length;
  }
}

/**
 * `promise`'s value, or `undefined` once `signal` aborted first.
 *
 * @param promise what the poll waits for
 * @param signal ends the wait
 */
export function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const abort = () => resolve(undefined);
    signal.addEventListener("abort", abort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}
