/**
 * One process in the guest (a container's init or an exec): its pid, its stdio as the host
 * sees it through the agent (the pipes runc's child inherited, or a terminal), and its exit.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { Pty } from "@skiff/shim/linux";
import { Output } from "./output.ts";
import { shutdownAtExit } from "./terminal.ts";

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
  /** What the host calls it, for errors. */
  readonly what: string;
  #stdout = new Output();
  #stderr = new Output();
  #stdin: WritableStreamDefaultWriter<Uint8Array> | undefined;
  #pty: Pty | undefined;
  #ptyStdin = false;
  #ptyOpen = false;
  #exit = Promise.withResolvers<Exit>();
  #exited: Exit | undefined;

  /**
   * A process with no stdio yet: runc is about to create it; attach its pipes or terminal.
   *
   * @param what the process as errors name it ("exec e1 of container web")
   */
  constructor(what: string) {
    this.what = what;
  }

  /** Its stdout (or terminal output). */
  get stdout(): Output {
    return this.#stdout;
  }

  /** Its stderr (none with a terminal). */
  get stderr(): Output {
    return this.#stderr;
  }

  /**
   * Takes the pipes of the runc command that creates the process; the process inherits them.
   *
   * @param child the `runc create` or `runc exec --detach` child
   * @param pipes which of the child's streams are pipes
   */
  attachPipes(
    child: Deno.ChildProcess,
    pipes: { stdin: boolean; stdout: boolean; stderr: boolean },
  ): void {
    this.#stdout = new Output(pipes.stdout ? child.stdout : undefined);
    this.#stderr = new Output(pipes.stderr ? child.stderr : undefined);
    this.#stdin = pipes.stdin ? child.stdin.getWriter() : undefined;
  }

  /**
   * Takes the process's terminal: the master's output is its stdout (a terminal has one output,
   * read into the buffer the host's ReadStdout drains), the host's stdin goes in.
   *
   * @param pty the master runc sent
   * @param stdin whether the host writes stdin (its end then closes the terminal)
   */
  attachTerminal(pty: Pty, stdin: boolean): void {
    this.#pty = pty;
    this.#ptyOpen = true;
    this.#ptyStdin = stdin;
    this.#stdout = new Output(pty.readable);
    if (this.#exited) this.#shutdownAtExit();
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
    if (this.#pty) this.#shutdownAtExit();
  }

  #shutdownAtExit(): void {
    const t = { pty: this.#pty!, open: () => this.#ptyOpen, close: () => this.#closePty() };
    void shutdownAtExit(t, this.#stdout.ended);
  }

  async #closePty(): Promise<void> {
    this.#ptyOpen = false;
    await this.#pty?.close();
  }

  /**
   * Writes into the process's stdin (its terminal, if it has one).
   *
   * @param data the bytes
   * @returns how many were written (all of them)
   * @throws {ConnectError} FailedPrecondition when the process has no stdin or it was closed
   */
  async writeStdin(data: Uint8Array): Promise<number> {
    if (this.#pty && this.#ptyStdin && this.#ptyOpen) await this.#pty.write(data);
    else if (this.#stdin) await this.#stdin.write(data);
    else throw new ConnectError(`${this.what}: no open stdin`, Code.FailedPrecondition);
    return data.length;
  }

  /**
   * The host's stdin ended (CloseIO): closes the pipe, so the process reads end of file, or, as
   * containerd's shim does at its stdin's end, the terminal (the process gets a hangup).
   * Idempotent.
   */
  async closeStdin(): Promise<void> {
    const w = this.#stdin;
    this.#stdin = undefined;
    await w?.close().catch(() => {});
    if (this.#ptyStdin) {
      this.#ptyStdin = false;
      await this.#closePty();
    }
  }

  /**
   * Sets the terminal's window size.
   *
   * @param width columns
   * @param height rows
   * @throws {ConnectError} FailedPrecondition without a terminal
   */
  resize(width: number, height: number): void {
    if (!this.#pty) {
      throw new ConnectError(`${this.what}: has no terminal to resize`, Code.FailedPrecondition);
    }
    // A terminal closed already (its stdin ended, or its exit shut it down) has no size to set.
    if (this.#ptyOpen) this.#pty.resize(width, height);
  }

  /** Releases the stdio (Delete, a failed create): stdin and the terminal. Idempotent. */
  async close(): Promise<void> {
    await this.closeStdin();
    await this.#closePty();
  }
}
