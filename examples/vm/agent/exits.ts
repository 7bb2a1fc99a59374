/**
 * Exits of the guest's container processes. `runc create` and `runc exec --detach` leave their
 * process re-parented to the agent (PID 1 of the guest, or a child subreaper when it runs
 * elsewhere); sdk/linux's reaper reaps them and this table hands each exit to the process that
 * registered its pid, keeping exits that arrive before the pid is known (runc writes the pid
 * file after the process started, and it may be gone already).
 *
 * @module
 */

import type { ProcessExit, Reaper } from "@skiff/shim/linux";

/** Exits held for pids nobody claimed yet; a guest runs few processes. */
const MAX_UNCLAIMED = 1024;

/** Matches reaped exits to the pids the agent registers. */
export class ExitTable {
  #unclaimed = new Map<number, ProcessExit>();
  #waiting = new Map<number, (exit: ProcessExit) => void>();
  #off: () => void;

  /**
   * Subscribes to `reaper` (before any container process starts).
   *
   * @param reaper the agent's reaper
   */
  constructor(reaper: Reaper) {
    this.#off = reaper.onExit((exit) => this.#deliver(exit));
  }

  /**
   * The exit of `pid`, once it comes (or the one that came before this call).
   *
   * @param pid a guest pid runc reported
   */
  exitOf(pid: number): Promise<ProcessExit> {
    const early = this.#unclaimed.get(pid);
    if (early) {
      this.#unclaimed.delete(pid);
      return Promise.resolve(early);
    }
    return new Promise((resolve) => this.#waiting.set(pid, resolve));
  }

  /** Forgets every held exit; stops listening. */
  close(): void {
    this.#off();
    this.#unclaimed.clear();
  }

  #deliver(exit: ProcessExit): void {
    const waiter = this.#waiting.get(exit.pid);
    if (waiter) {
      this.#waiting.delete(exit.pid);
      waiter(exit);
      return;
    }
    if (this.#unclaimed.size >= MAX_UNCLAIMED) {
      const oldest = this.#unclaimed.keys().next().value;
      if (oldest !== undefined) this.#unclaimed.delete(oldest);
    }
    this.#unclaimed.set(exit.pid, exit);
  }
}
