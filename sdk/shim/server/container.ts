/**
 * A container the shim serves: its bundle, runtime, init process and execs.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { ContainerRuntime, RuntimeStdio } from "../runtime.ts";
import type { ShimProcess } from "./process.ts";

/** Mount as containerd passes it in `CreateTaskRequest.rootfs`. */
export interface RootfsMount {
  /** Filesystem type, e.g. "overlay" or "bind". */
  type: string;
  /** Mount source. */
  source: string;
  /** Target below the rootfs ("" for the rootfs itself). */
  target: string;
  /** Mount options. */
  options: string[];
}

/**
 * A container served by the shim.
 *
 * @example Usage
 * ```ts ignore
 * const c = new Container({ id, namespace, bundle, runtime, init, options, rootfsMounted: false });
 * c.exec("e1");
 * ```
 */
export class Container<T = unknown> {
  /** Container id. */
  readonly id: string;
  /** containerd namespace. */
  readonly namespace: string;
  /** Bundle directory. */
  readonly bundle: string;
  /** The runtime driving this container. */
  readonly runtime: ContainerRuntime;
  /** The init process. */
  readonly init: ShimProcess;
  /** Runtime options in effect for this container. */
  readonly options: T;
  /** Whether the shim mounted the rootfs (and must unmount it). */
  rootfsMounted: boolean;
  /** Additional processes by exec id. */
  readonly execs: Map<string, ShimProcess> = new Map();
  /** Set once the init's exit has been taken in (by the reaper or the runtime's `wait`). */
  exitReported = false;
  /** Releases the OOM watch and other per-container resources. */
  cleanups: (() => void | Promise<void>)[] = [];
  /**
   * Whether the init shares its pid namespace (its other processes outlive it), read from the
   * bundle's spec once, when the container is created, rather than on the init's exit path.
   */
  sharesPidNamespace?: Promise<boolean>;
  /**
   * Kill RPCs of the init still being answered. The init's exit waits for them (as the Go
   * shim's, whose exit takes the lock its Kill holds): containerd deletes the task on that exit
   * and closes the connection, which would otherwise lose a Kill reply still on its way.
   */
  readonly initKills: Set<Promise<void>> = new Set();
  /**
   * Set when containerd created the task from a checkpoint: Start restores the init from
   * this image (as the Go runc shim does) instead of starting a created one.
   */
  restoreFrom?: {
    imagePath: string;
    io: { stdio?: RuntimeStdio; consoleSocket?: string; ready(): Promise<void> };
  };

  /** Creates a container record. */
  constructor(init: {
    id: string;
    namespace: string;
    bundle: string;
    runtime: ContainerRuntime;
    process: ShimProcess;
    options: T;
    rootfsMounted: boolean;
  }) {
    this.id = init.id;
    this.namespace = init.namespace;
    this.bundle = init.bundle;
    this.runtime = init.runtime;
    this.init = init.process;
    this.options = init.options;
    this.rootfsMounted = init.rootfsMounted;
  }

  /** The process for an exec id ("" is init); NotFound when there is none. */
  process(execId: string): ShimProcess {
    if (execId === "") return this.init;
    const p = this.execs.get(execId);
    if (!p) {
      throw new ConnectError(
        `exec "${execId}" of container "${this.id}" not found`,
        Code.NotFound,
      );
    }
    return p;
  }

  /** Execs that have started and not yet exited. */
  runningExecs(): ShimProcess[] {
    return [...this.execs.values()].filter((p) => p.pid !== 0 && p.state !== "stopped");
  }
}
