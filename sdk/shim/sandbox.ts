/**
 * The narrow hook a runtime may give its `Shim` for what it must do to create, start and
 * stop a sandbox (a VM runtime boots its VM there). Without one, the sandbox is the shim process
 * and its containers; the Sandbox API itself is served by `server/sandbox_service.ts`.
 *
 * @module
 */

import type { Logger } from "./logger.ts";

/** What a sandbox hook gets. Endpoint-free by design, like `RuntimeContext`. */
export interface SandboxContext<T> {
  /** Sandbox id. */
  readonly id: string;
  /** containerd namespace. */
  readonly namespace: string;
  /** The sandbox's bundle directory. */
  readonly bundle: string;
  /** Network namespace path ("" for the host's). */
  readonly netnsPath: string;
  /** Annotations from containerd. */
  readonly annotations: Readonly<Record<string, string>>;
  /** The runtime options in effect for the sandbox. */
  readonly options: T;
  /** Logger with the sandbox's fields. */
  readonly logger: Logger;
}

/** What a started sandbox reports to the Sandbox API. */
export interface SandboxStarted {
  /** The pid that represents it (StartSandbox, SandboxStatus); default: the shim's. */
  pid?: number;
  /**
   * Resolves with the sandbox's exit status once it has ended, whether `stop` ended it or it
   * died on its own (a VM whose hypervisor exited), after the runtime has released what it
   * held. The Sandbox API then reports it: WaitSandbox returns this status, SandboxStatus says
   * `SANDBOX_NOTREADY` with the exit time. Without it the sandbox ends only at StopSandbox
   * (status 0).
   */
  exited?: Promise<number>;
}

/** The narrow hook for runtimes whose sandbox is more than the shim process (e.g. a VM). */
export interface SandboxRuntime<T> {
  /** Prepares the sandbox. */
  create?(ctx: SandboxContext<T>): Promise<void>;
  /** Starts it; returns the pid that represents it and, optionally, its end. */
  start?(ctx: SandboxContext<T>): Promise<SandboxStarted>;
  /**
   * Stops it (after its containers have been killed): StopSandbox, or ShutdownSandbox of a
   * sandbox not stopped yet. Not called for a sandbox whose `exited` has resolved.
   */
  stop?(ctx: SandboxContext<T>): Promise<void>;
  /**
   * After a live upgrade, in the code that now runs: the end of a started sandbox whose
   * `exited` the previous code was waiting for, reported again (as {@link SandboxStarted.exited}).
   * Optional: without it, a shim with such a sandbox refuses to upgrade.
   */
  resumeEnd?(ctx: SandboxContext<T>): Promise<number>;
}
