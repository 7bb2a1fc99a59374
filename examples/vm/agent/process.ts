/**
 * One process in the guest (a container's init or an exec): its pid, its stdio as the host
 * sees it through the agent, and its exit.
 *
 * @module
 */

import { Output } from "./output.ts";

/** How a process ended. */
export interface Exit {
  /** The exit code, or 128 + the signal number. */
  status: number;
  exitedAt: Date;
}

/** A process the agent started (through runc) and watches. */
export class GuestProcess {
  /** The guest pid, once runc reported it (0 before). */
  pid = 0;
  /** Its stdout (or terminal output). */
  readonly stdout: Output;
  /** Its stderr. */
  readonly stderr: Output;
  #stdin: WritableStreamDefaultWriter<Uint8Array> | undefined;
  #exit = Promise.withResolvers<Exit>();
  #exited: Exit | undefined;

  /**
   * Takes the pipes of the runc command that created the process; the process inherited them.
   *
   * @param child the `runc create` or `runc exec --detach` child
   */
  constructor(
    child: Deno.ChildProcess,
    pipes: { stdin: boolean; stdout: boolean; stderr: boolean },
  ) {
    this.stdout = new Output(pipes.stdout ? child.stdout : undefined);
    this.stderr = new Output(pipes.stderr ? child.stderr : undefined);
    this.#stdin = pipes.stdin ? child.stdin.getWriter() : undefined;
  }

  /** The exit, once the process has ended. */
  get exited(): Exit | undefined {
    return this.#exited;
  }

  /** Resolves with the exit. */
  wait(): Promise<Exit> {
    return this.#exit.promise;
  }

  /**
   * Records the exit (from the reaper).
   *
   * @param exit how it ended
   */
  setExit(exit: Exit): void {
    if (this.#exited) return;
    this.#exited = exit;
    this.#exit.resolve(exit);
  }

  /**
   * Writes into the process's stdin.
   *
   * @param data the bytes
   * @returns how many were written (all of them)
   * @throws {Error} when the process has no stdin or it was closed
   */
  async writeStdin(data: Uint8Array): Promise<number> {
    if (!this.#stdin) throw new Error("the process has no open stdin");
    await this.#stdin.write(data);
    return data.length;
  }

  /** Closes stdin (idempotent); the process reads end of file. */
  async closeStdin(): Promise<void> {
    const w = this.#stdin;
    this.#stdin = undefined;
    await w?.close().catch(() => {});
  }
}
