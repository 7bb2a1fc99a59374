/**
 * One process of a container (its init, or an exec) as the Task API sees it: a small state
 * machine plus the exit that every `Wait` fans out to.
 *
 * @module
 */

import type { ProcessIoCarry } from "../../linux/process_io_carry.ts";
import { Code, statusError } from "../../ttrpc/status_error.ts";
import type { RuntimeProcess, RuntimeStreams } from "../runtime.ts";

/** Lifecycle states, as containerd's `Status` enum names them. */
export type ProcessState = "created" | "running" | "pausing" | "paused" | "stopped";

/** The stdio a process was created with, as containerd passed it. */
export interface ProcessStdioPaths {
  /** stdin FIFO path or URI ("" for none). */
  stdin: string;
  /** stdout FIFO path or URI. */
  stdout: string;
  /** stderr FIFO path or URI. */
  stderr: string;
  /** Whether the process has a terminal. */
  terminal: boolean;
}

/** How a process ended. */
export interface ProcessExitInfo {
  /** Exit code, or 128+signal. */
  status: number;
  /** When it exited. */
  exitedAt: Date;
}

/** Handles the base class keeps for a process's I/O; closed on delete. */
export interface ProcessIoHandle {
  /** Closes the writer to the process's stdin (CloseIO). */
  closeStdin(): Promise<void>;
  /** Waits (bounded) for output to be copied. */
  drain(timeoutMs?: number): Promise<void>;
  /**
   * Once the process exited, waits until what it wrote has been copied (`ProcessIo.landed`);
   * without it, a reaped exit waits a short, fixed time for the output's end.
   */
  landed?(): Promise<void>;
  /** Releases everything. */
  close(): Promise<void>;
  /** Resizes the terminal, when there is one. */
  resize?(width: number, height: number): void;
  /** The descriptors a live upgrade hands on; throws saying why when it cannot. */
  carry?(): ProcessIoCarry;
  /** True while a chunk has been read and not yet written. */
  inHand?(): boolean;
  /** containerd's ends as web streams (a runtime that moves the bytes itself); once. */
  streams?(): RuntimeStreams;
}

/**
 * A container process tracked by the shim.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ShimProcess } from "./process.ts";
 * const p = new ShimProcess("c1", "", { stdin: "", stdout: "", stderr: "", terminal: false });
 * p.started({ pid: 42 }, undefined);
 * p.markStarted();
 * p.markExited({ status: 3, exitedAt: new Date() });
 * strictEqual(p.state, "stopped");
 * strictEqual(p.exit?.status, 3);
 * ```
 */
export class ShimProcess {
  /** The container id. */
  readonly containerId: string;
  /** The exec id, "" for the init process. */
  readonly execId: string;
  /** Stdio as containerd described it. */
  readonly stdio: ProcessStdioPaths;
  /** OCI process spec (execs only). */
  readonly spec: unknown;
  #pid = 0;
  #startTime: number | undefined;
  #io: ProcessIoHandle | undefined;
  #runtime: RuntimeProcess | undefined;
  #state: ProcessState = "created";
  #exit: ProcessExitInfo | undefined;
  #exited: PromiseWithResolvers<ProcessExitInfo> = Promise.withResolvers();
  // Exits that arrive while Start is in flight wait here, so /tasks/start is always
  // published before /tasks/exit (containerd requires that order).
  #starting: PromiseWithResolvers<void> | undefined;
  /**
   * CloseIO and ResizePty are remembered, not only passed on: an exec's client finishes
   * writing its stdin and sends CloseIO as soon as Start has opened the stdin FIFO, before
   * its I/O is attached or the runtime has reported the process, and the terminal's size
   * can come as early. Whatever is attached later takes them on attach.
   */
  #stdinClosed = false;
  /** The I/O handles and runtime reports whose stdin this has closed: each exactly once. */
  #stdinClosedOn = new WeakSet<object>();
  #size: { width: number; height: number } | undefined;

  /** Creates a process record in the "created" state. */
  constructor(containerId: string, execId: string, stdio: ProcessStdioPaths, spec?: unknown) {
    this.containerId = containerId;
    this.execId = execId;
    this.stdio = stdio;
    this.spec = spec;
  }

  /**
   * Continues a process that a live upgrade carried over (sdk/shim/server/carry.ts): its pid,
   * start time, state and exit as the previous code left them, and its stdio.
   *
   * @param s the carried state
   * @param io the adopted stdio
   * @param runtime the runtime's report of it, when the runtime reports its exit
   */
  resume(
    s: { pid: number; startTime?: number; state: ProcessState; exit?: ProcessExitInfo },
    io: ProcessIoHandle | undefined,
    runtime?: RuntimeProcess,
  ): void {
    this.#pid = s.pid;
    this.#startTime = s.startTime;
    if (s.pid !== 0) this.#runtime = runtime ?? { pid: s.pid };
    this.#io = io;
    this.#state = s.state;
    if (s.exit) {
      this.#exit = s.exit;
      this.#exited.resolve(s.exit);
    }
  }

  /** The process's id as containerd names it in events (exec id, or the container id). */
  get id(): string {
    return this.execId || this.containerId;
  }

  /** The process id once known, else 0. */
  get pid(): number {
    return this.#pid;
  }

  /** The process's start time in clock ticks since boot, when it could be read with the pid. */
  get startTime(): number | undefined {
    return this.#startTime;
  }

  /** I/O plumbing, once set up. */
  get io(): ProcessIoHandle | undefined {
    return this.#io;
  }

  /** What the runtime reported for this process once created (its exit, signals, terminal). */
  get runtime(): RuntimeProcess | undefined {
    return this.#runtime;
  }

  /** Current state. */
  get state(): ProcessState {
    return this.#state;
  }

  /** Exit information once stopped. */
  get exit(): ProcessExitInfo | undefined {
    return this.#exit;
  }

  /** Resolves when the process has exited (Wait). */
  get exited(): Promise<ProcessExitInfo> {
    return this.#exited.promise;
  }

  /**
   * Keeps the I/O set up for the process (closed on delete), or forgets it when its start failed.
   *
   * @param io the handles; undefined to forget them
   */
  attachIo(io: ProcessIoHandle | undefined): void {
    this.#io = io;
    if (!io) return;
    if (this.#stdinClosed) void this.#closeStdinOf(io).catch(() => {});
    if (this.#size && !this.#runtime?.resize) io.resize?.(this.#size.width, this.#size.height);
  }

  /** Whether CloseIO has been asked for this process's stdin. */
  get stdinClosed(): boolean {
    return this.#stdinClosed;
  }

  /**
   * Closes the process's stdin (CloseIO): the shim's end of the FIFO, then the runtime's when
   * it has one. What is not attached yet is closed when it is ({@link ShimProcess.attachIo},
   * {@link ShimProcess.started}); each end is closed once, however many CloseIOs come.
   */
  async closeStdin(): Promise<void> {
    this.#stdinClosed = true;
    await this.#closeStdinOf(this.#io);
    await this.#closeStdinOf(this.#runtime);
  }

  #closeStdinOf(end: { closeStdin?(): Promise<void> } | undefined): Promise<void> {
    if (!end?.closeStdin || this.#stdinClosedOn.has(end)) return Promise.resolve();
    this.#stdinClosedOn.add(end);
    return end.closeStdin();
  }

  /**
   * Resizes the process's terminal (ResizePty): the runtime's, when it owns it, else the pty's.
   * The size is kept, and given to a runtime report or I/O attached later.
   *
   * @param width columns
   * @param height rows
   */
  async resize(width: number, height: number): Promise<void> {
    this.#size = { width, height };
    if (this.#runtime?.resize) await this.#runtime.resize(width, height);
    else this.#io?.resize?.(width, height);
  }

  /**
   * Holds back exits until {@link ShimProcess.endStart} (only `ExitRouter.track` (exits.ts) calls it).
   */
  beginStart(): void {
    this.#starting = Promise.withResolvers();
  }

  /** Ends Start (after the start event is published, or on failure). */
  endStart(): void {
    this.#starting?.resolve();
    this.#starting = undefined;
  }

  /** Whether a Start (or Create) of this process is in flight. */
  get starting(): boolean {
    return this.#starting !== undefined;
  }

  /** Waits for an in-flight Start to finish publishing its event. */
  async startSettled(): Promise<void> {
    await this.#starting?.promise;
  }

  /**
   * Records what the runtime created or started (only `ExitRouter.track` (exits.ts) calls it).
   *
   * @param rp the runtime's report: the pid, and where the exit comes from
   * @param startTime the pid's start time, when it could be read
   */
  started(rp: RuntimeProcess, startTime: number | undefined): void {
    this.#runtime = rp;
    this.#pid = rp.pid;
    this.#startTime = startTime;
    if (this.#stdinClosed) void this.#closeStdinOf(rp).catch(() => {});
    if (this.#size && rp.resize) {
      void rp.resize(this.#size.width, this.#size.height).catch(() => {});
    }
  }

  /** The process is running. */
  markStarted(): void {
    if (this.#state === "created") this.#state = "running";
  }

  /** Pause requested / done / undone. */
  setPaused(state: "pausing" | "paused" | "running"): void {
    if (this.#state !== "stopped") this.#state = state;
  }

  /** Records the exit once; later calls are ignored. */
  markExited(exit: ProcessExitInfo): void {
    if (this.#exit) return;
    this.#exit = exit;
    this.#state = "stopped";
    this.#exited.resolve(exit);
  }

  /** Throws FailedPrecondition unless the process may be deleted (created or stopped). */
  assertDeletable(): void {
    if (this.#state === "running") {
      throw statusError(
        `cannot delete a running process: ${this.describe()}`,
        Code.FailedPrecondition,
      );
    }
    if (this.#state === "paused" || this.#state === "pausing") {
      throw statusError(
        `cannot delete a paused process: ${this.describe()}`,
        Code.FailedPrecondition,
      );
    }
  }

  /** `container "c1"` or `exec "e1" of container "c1"`, for messages. */
  describe(): string {
    return this.execId
      ? `exec "${this.execId}" of container "${this.containerId}"`
      : `container "${this.containerId}"`;
  }
}
