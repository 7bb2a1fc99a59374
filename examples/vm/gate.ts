/**
 * The agent connection's calls, counted, and its long polls paused for a live upgrade: before
 * the shim replaces its process image, nothing may be in flight to the guest (an answer the
 * agent wrote would be lost with the old code). {@linkcode AgentGate.pause} stops new long
 * polls; the agent's Release answers the pending ones at once, with nothing taken from it.
 *
 * @module
 */

import type { Interceptor } from "@connectrpc/connect";

/** Counts the agent calls in flight and holds long polls while paused. */
export class AgentGate {
  #inflight = 0;
  #paused: PromiseWithResolvers<void> | undefined;

  /** Counts every call made through the connection. */
  readonly interceptor: Interceptor = (next) => async (req) => {
    this.#inflight++;
    try {
      return await next(req);
    } finally {
      this.#inflight--;
    }
  };

  /** Agent calls in flight. */
  get inflight(): number {
    return this.#inflight;
  }

  /** Whether long polls are paused. */
  get paused(): boolean {
    return this.#paused !== undefined;
  }

  /** Resolves when a long poll may be made (at once unless paused). */
  async open(): Promise<void> {
    while (this.#paused) await this.#paused.promise;
  }

  /** Holds every long poll at its next {@linkcode AgentGate.open}. */
  pause(): void {
    this.#paused ??= Promise.withResolvers();
  }

  /** Lets the held long polls go on. */
  resume(): void {
    const p = this.#paused;
    this.#paused = undefined;
    p?.resolve();
  }
}
