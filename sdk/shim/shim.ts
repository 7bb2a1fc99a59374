/**
 * The `Shim` base class: what a runtime author extends. It declares the runtime's name, its
 * {@link RuntimeOptions} hook and how to build a {@link ContainerRuntime} for one container;
 * everything else (bootstrap, Task API v2+v3, Sandbox API, events, exits, stdio, logging,
 * the task-API endpoint) is the base class's job.
 *
 * This module is deliberately light: `start` and `delete` import it without pulling in the
 * ttrpc server or the Linux mechanics.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import type { RuntimeOptions } from "./options.ts";
import type { ContainerRuntime, RuntimeCarry } from "./runtime.ts";
import type { AdoptedChild } from "../linux/adopted_child.ts";
import type { Logger } from "./logger.ts";
import type { TaskApiVersion } from "./endpoint.ts";
import type { SandboxContext, SandboxRuntime } from "./sandbox.ts";

/** What a runtime hook gets to build a container's runtime. Endpoint-free by design. */
export interface RuntimeContext<T> {
  /** Container (or sandbox) id. */
  readonly id: string;
  /** containerd namespace. */
  readonly namespace: string;
  /** Bundle directory. */
  readonly bundle: string;
  /** The runtime options in effect for this container. */
  readonly options: T;
  /**
   * Spawns a child process safely with respect to the shim's reaper (Deno reaps it). A runtime
   * that reports such a child as a container's init or exec (`{ pid: child.pid }`) gets its exit
   * reported by the shim; nothing else is needed.
   */
  readonly spawn: (cmd: Deno.Command) => Deno.ChildProcess;
  /** Logger with the container's fields. */
  readonly logger: Logger;
}

/**
 * Base class of every skiff shim.
 *
 * @typeParam T the runtime's options type (JSON-serialisable, no endpoint fields)
 * @example A runc shim
 * ```ts ignore
 * import { OciRuntimeCli, type RuntimeContext, runShim, Shim } from "@skiff/shim";
 * class RuncShim extends Shim<{ binary: string }> {
 *   readonly runtimeName = "io.containerd.skiff-runc.v2";
 *   readonly options = { defaults: () => ({ binary: "runc" }) };
 *   runtime(ctx: RuntimeContext<{ binary: string }>): OciRuntimeCli {
 *     return new OciRuntimeCli({ binary: ctx.options.binary, spawn: ctx.spawn });
 *   }
 * }
 * await runShim(new RuncShim());
 * ```
 */
export abstract class Shim<T extends object = object> {
  /** containerd runtime name, e.g. `io.containerd.skiff-runc.v2`. */
  abstract readonly runtimeName: string;
  /** The runtime-specific options hook. */
  abstract readonly options: RuntimeOptions<T>;
  /** Builds the runtime that drives one container. */
  abstract runtime(ctx: RuntimeContext<T>): ContainerRuntime;
  /**
   * Your shim's version, printed by `-v` (beside skiff's) and returned by `-info`. Empty until
   * you set it: `-v` then says it is unset rather than passing skiff's version off as yours.
   */
  readonly version: string = "";
  /**
   * The Task API version advertised at `start`. Version 3 lets containerd 2.x route a pod's
   * containers to one shim without a per-container `start`; both v2 and v3 are served anyway.
   */
  readonly taskApiVersion: TaskApiVersion = 3;
  /**
   * Whether several pods may share one server process when the operator asks for it
   * (`SKIFF_SHARED_PODS`, docs/containerd-config.md). Say true only when this object keeps
   * nothing of one pod's: every pod of the process calls the same `Shim`. `OciShim` says true;
   * a shim that holds a pod's VM in its own fields keeps the default, one pod per process.
   */
  readonly sharedServers: boolean = false;
  /**
   * Optional sandbox hook (Sandbox API): what the runtime must do to create, start and stop a
   * sandbox. Without it the sandbox is this shim process and the containers it serves.
   */
  sandbox?(ctx: SandboxContext<T>): SandboxRuntime<T> | undefined;
  /**
   * Optional: what the runtime supports, for `-info`'s `RuntimeInfo.features` (containerd 2.x
   * asks; CRI reads e.g. recursive read-only mounts from it). An OCI runtime answers with its
   * `features` document: `ociFeaturesAny(await cli.features())`. Return undefined (or throw)
   * when the runtime cannot tell; `-info` then answers without features, as containerd's runc
   * shim does for a runtime without a `features` command.
   *
   * @param options the options `-info` was given, resolved through the options hook
   */
  features?(options: T): Promise<Any | undefined>;
  /**
   * Live upgrade, in the running code, once containerd's new requests are held: stop starting
   * calls that wait for long (an agent's long polls) and resolve once none is pending, so that
   * nothing is in flight when the process image is replaced; the upgrade then also waits for
   * every runtime's `settled`. Bounded by the upgrade's settle timeout (a rejection or the
   * timeout refuses the upgrade, and {@linkcode Shim.upgradeCancelled} follows, after a timeout
   * while this may still be pending: going on must not depend on it having finished).
   * Optional: shims whose runtimes keep nothing of their own in flight need none.
   */
  prepareUpgrade?(): Promise<void>;
  /** Live upgrade, in the running code: the upgrade prepared for did not happen; go on. */
  upgradeCancelled?(): void;
  /**
   * Live upgrade, in the running code, after {@linkcode Shim.prepareUpgrade}: this shim's own
   * state for the next code (a VM: its hypervisor's pid and start time, its console's pipes).
   * The descriptors named stay open across `execve`. Throw, saying why, to refuse: it is also
   * asked once before requests are held, and a throw there refuses with nothing touched.
   */
  carryUpgrade?(): RuntimeCarry | undefined;
  /**
   * Live upgrade, in the code it started, before any container or sandbox is taken back: what
   * {@linkcode Shim.carryUpgrade} returned (its descriptors are close-on-exec again). Throwing
   * rolls the upgrade back to the previous code.
   */
  adoptUpgrade?(carried: RuntimeCarry, ctx: UpgradeContext): void | Promise<void>;
}

/**
 * What {@linkcode Shim.adoptUpgrade} gets.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { UpgradeContext } from "@skiff/shim";
 * // What a VM shim's adoptUpgrade does with it: continue the hypervisor the old code started.
 * function hypervisorExit(ctx: UpgradeContext, pid: number, startTime: number): Promise<number> {
 *   return ctx.adoptChild(pid, startTime).status.then((s) => s.code);
 * }
 * strictEqual(typeof hypervisorExit, "function");
 * ```
 */
export interface UpgradeContext {
  /** The shim's logger. */
  readonly logger: Logger;
  /**
   * Continues a child process the previous code started (a hypervisor): its exit comes from
   * the shim's reaper, matched by pid and start time (read there with `processStartTime`).
   * A child already gone reports `exitCode`, else 255.
   */
  adoptChild(pid: number, startTime: number, exitCode?: number): AdoptedChild;
}
