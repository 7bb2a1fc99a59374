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

/** The narrow hook for runtimes whose sandbox is more than the shim process (e.g. a VM). */
export interface SandboxRuntime<T> {
  /** Prepares the sandbox. */
  create?(ctx: SandboxContext<T>): Promise<void>;
  /** Starts it; returns the pid that represents it (default: the shim's). */
  start?(ctx: SandboxContext<T>): Promise<{ pid?: number }>;
  /** Stops it (after its containers have been killed). */
  stop?(ctx: SandboxContext<T>): Promise<void>;
}
