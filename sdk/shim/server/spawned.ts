/**
 * The exits of processes a runtime spawned itself with `ctx.spawn` and reported as a container's
 * init or exec (`{ pid: child.pid }`), without an `exited` of its own.
 *
 * The reaper leaves `ctx.spawn`'s children to Deno (it must: Deno reaps them through a pidfd), so
 * no reaped exit ever comes for such a pid and, unhandled, Wait would hang forever. Here the base
 * takes the exit from Deno instead (`child.status`, whose code is already 128 + signal for a
 * signal), so the seam has one rule: a runtime either reports `exited`, or its process is a host
 * process the base sees exit, whether re-parented (runc's init) or spawned through `ctx.spawn`.
 *
 * A child matches only while it runs, or when it ended during the very create, exec or restore
 * call that reported it: a pid that a finished child once had may belong to anyone later.
 *
 * The shapes left that could hang Wait are refused where they happen: a pid reported without
 * `exited` that is neither such a child nor a process the reaper will see (one re-parented to the
 * shim, as runc's init is once `runc create` exits): another process's child, or a child spawned
 * with `Deno.Command` outside `ctx.spawn` (Deno reaps it and tells only its owner). Create, exec
 * or restore then fails with FailedPrecondition saying why, and what the runtime made is undone
 * (a created container deleted, an exec killed through its `kill`).
 *
 * @module
 */

import { Code, statusError } from "../../ttrpc/status_error.ts";
import type { ContainerRuntime, RuntimeProcess } from "../runtime.ts";

/** The calls whose result is a {@link RuntimeProcess}. */
type StartingCall = "create" | "exec" | "restore";

/**
 * Tracks one container's `ctx.spawn` children and gives a reported process the exit of the child
 * that has its pid.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { SpawnedExits } from "./spawned.ts";
 * import type { ContainerRuntime } from "@skiff/shim";
 *
 * const spawned = new SpawnedExits((cmd) => cmd.spawn());
 * // A runtime that runs its container as a plain child and reports only its pid.
 * const runtime = {
 *   create: () => {
 *     const child = spawned.spawn(new Deno.Command("sh", { args: ["-c", "exit 3"] }));
 *     return Promise.resolve({ pid: child.pid });
 *   },
 * } as unknown as ContainerRuntime;
 * const init = await spawned.wrap(runtime).create("c1", {} as never);
 * strictEqual(await init.exited, 3);
 * ```
 */
export class SpawnedExits {
  #spawn: (cmd: Deno.Command) => Deno.ChildProcess;
  /** Children that run, by pid. */
  #running = new Map<number, Promise<number>>();
  /** Children that ended while a starting call was in flight, kept until the last one returns. */
  #endedDuringCall = new Map<number, Promise<number>>();
  #calls = 0;
  #unseenExit: ((pid: number) => string | undefined) | undefined;

  /**
   * @param spawn the platform's spawn, which keeps the reaper off the child
   * @param unseenExit the platform's reason it could never see a pid exit; without it nothing
   *   is refused
   */
  constructor(
    spawn: (cmd: Deno.Command) => Deno.ChildProcess,
    unseenExit?: (pid: number) => string | undefined,
  ) {
    this.#spawn = spawn;
    this.#unseenExit = unseenExit;
  }

  /**
   * Spawns `cmd` (the runtime's `ctx.spawn`) and remembers the child while it runs.
   *
   * @param cmd the command
   */
  spawn(cmd: Deno.Command): Deno.ChildProcess {
    const child = this.#spawn(cmd);
    const pid = child.pid;
    const status = child.status.then((s) => s.code);
    this.#running.set(pid, status);
    const ended = (): void => {
      if (this.#running.get(pid) !== status) return;
      this.#running.delete(pid);
      if (this.#calls > 0) this.#endedDuringCall.set(pid, status);
    };
    status.then(ended, ended);
    return child;
  }

  /**
   * The runtime, with create, exec and restore reporting the exit of a `ctx.spawn` child whose
   * pid they return without `exited`. Every other member is the runtime's own.
   *
   * @param runtime the runtime the shim built
   */
  wrap(runtime: ContainerRuntime): ContainerRuntime {
    const undoContainer = (id: string) => () => runtime.delete(id, { force: true });
    const own: Partial<Record<StartingCall, unknown>> = {
      create: (...a: Parameters<ContainerRuntime["create"]>) =>
        this.#starting(`container "${a[0]}"`, () => runtime.create(...a), undoContainer(a[0])),
      exec: (...a: Parameters<ContainerRuntime["exec"]>) =>
        this.#starting(`exec "${a[1]}" of container "${a[0]}"`, () => runtime.exec(...a)),
    };
    if (runtime.restore) {
      const restore = runtime.restore.bind(runtime);
      own.restore = (...a: Parameters<typeof restore>) =>
        this.#starting(`restored container "${a[0]}"`, () => restore(...a), undoContainer(a[0]));
    }
    return new Proxy(runtime, {
      get(target, key) {
        if (typeof key === "string" && key in own) return own[key as StartingCall];
        const value = Reflect.get(target, key, target);
        // Bound, so a class runtime's private fields work through the proxy.
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }

  async #starting(
    what: string,
    call: () => Promise<RuntimeProcess>,
    undo?: () => Promise<void>,
  ): Promise<RuntimeProcess> {
    this.#calls++;
    try {
      const rp = await call();
      if (rp.exited) return rp;
      const exited = this.#running.get(rp.pid) ?? this.#endedDuringCall.get(rp.pid);
      if (exited) return withExit(rp, exited);
      const why = this.#unseenExit?.(rp.pid);
      if (why !== undefined) {
        await (undo ? undo() : rp.kill?.(9))?.catch(() => {});
        throw statusError(
          `${what}: the runtime reported pid ${rp.pid} without an exit, and the shim could ` +
            `never see it exit: ${why}. Report RuntimeProcess.exited, or start the process ` +
            `with ctx.spawn`,
          Code.FailedPrecondition,
        );
      }
      return rp;
    } finally {
      if (--this.#calls === 0) this.#endedDuringCall.clear();
    }
  }
}

/** `rp` with `exited`, its methods still called on `rp`. */
function withExit(rp: RuntimeProcess, exited: Promise<number>): RuntimeProcess {
  return {
    pid: rp.pid,
    exited,
    ...(rp.kill ? { kill: rp.kill.bind(rp) } : {}),
    ...(rp.resize ? { resize: rp.resize.bind(rp) } : {}),
    ...(rp.closeStdin ? { closeStdin: rp.closeStdin.bind(rp) } : {}),
  };
}
