/**
 * A container the shim serves, and the work on its processes: starting its init (or restoring
 * it from a checkpoint) and its execs, signalling them, their terminals and stdin, deleting
 * them with what the container holds (runtime state, OOM watch, rootfs). Creating one (rootfs,
 * stdio, the runtime's create, rollback) is create.ts's. Every start goes through
 * `ExitRouter.track` (exits.ts), which owns which exit is whose and when it is published; the Task
 * service finds the container and dispatches.
 *
 * @module
 */

import { asStatusError, Code, isStatusError, statusError } from "../../ttrpc/status_error.ts";
import type { Any, Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampOf } from "../../../proto/shim_wire.ts";
import { encodeDeleteResponse } from "../../../proto/wire.ts";
import { DEAD_SHIM_EXIT_STATUS, RUNTIME_DELETED_FILE } from "../contract/bundle_files.ts";
import type { ContainerRuntime } from "../runtime.ts";
import type { Logger } from "../logger.ts";
import type { EventPublisher } from "./events.ts";
import type { ExitRouter } from "./exits.ts";
import type { CgroupMembership, ProcessIoSetup, ShimPlatform } from "./platform.ts";
import { refuseShimCgroup } from "./shim_cgroup.ts";
import { sharesPidNamespace } from "./bundle_spec.ts";
import { type ProcessStdioPaths, ShimProcess } from "./process.ts";

export type { RootfsMount } from "./platform.ts";

/** What a container's work needs from the shim. */
export interface ContainerDeps {
  /** OS mechanics: mounts, stdio, signals, default stats and OOM watch. */
  platform: ShimPlatform;
  /** Event sink. */
  events: Pick<EventPublisher, "publish">;
  /** Logger, scoped to the container. */
  logger: Logger;
  /** Exit routing. */
  exits: ExitRouter;
}

/** Where a Delete leaves a process: containerd's `DeleteResponse`. */
export interface DeletedProcess {
  /** The process's pid. */
  pid: number;
  /** Its exit status (0 for one that never ran). */
  exitStatus: number;
  /** When it exited (now, for one that never ran). */
  exitedAt: Timestamp;
}

/**
 * A container served by the shim.
 *
 * @example Usage
 * ```ts ignore
 * const c = await createContainer(request, { namespace, runtime, options, deps, list });
 * await c.start("");
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
  /** Additional processes by exec id. */
  readonly execs: Map<string, ShimProcess> = new Map();
  #rootfsMounted = false;
  /** Releases the OOM watch and other per-container resources. */
  #cleanups: (() => void | Promise<void>)[] = [];
  /**
   * Whether the init shares its pid namespace (its other processes outlive it), read from the
   * bundle's spec once, when the container is created, rather than on the init's exit path.
   */
  #sharesPid?: Promise<boolean>;
  /**
   * Kill RPCs of the init still being answered. The init's exit waits for them (as the Go
   * shim's, whose exit takes the lock its Kill holds): containerd deletes the task on that exit
   * and closes the connection, which would otherwise lose a Kill reply still on its way.
   */
  readonly #initKills: Set<Promise<void>> = new Set();
  /**
   * Set when containerd created the task from a checkpoint: Start restores the init from
   * this image (as the Go runc shim does) instead of starting a created one.
   */
  #restoreFrom?: { imagePath: string; io: Pick<ProcessIoSetup, "io" | "ready"> };
  /**
   * The init's cgroups, read once it runs, when the platform reads this container's stats: they
   * outlive the init until the runtime deletes the container, and containerd 2.4 reads an exited
   * task's metrics to tell an OOM kill (as the Go shim, which keeps its cgroup until Delete).
   */
  #initCgroup?: CgroupMembership;
  readonly #d: ContainerDeps;

  /** Creates a container record; `createContainer` (create.ts) creates the container itself. */
  constructor(init: {
    id: string;
    namespace: string;
    bundle: string;
    runtime: ContainerRuntime;
    process: ShimProcess;
    options: T;
    deps: ContainerDeps;
  }) {
    this.id = init.id;
    this.namespace = init.namespace;
    this.bundle = init.bundle;
    this.runtime = init.runtime;
    this.init = init.process;
    this.options = init.options;
    this.#d = init.deps;
  }

  /** Whether the shim mounted the rootfs (and unmounts it on delete). */
  get rootfsMounted(): boolean {
    return this.#rootfsMounted;
  }

  /** Kill RPCs of the init still being answered; the init's exit waits for them. */
  get initKills(): ReadonlySet<Promise<void>> {
    return this.#initKills;
  }

  /** Whether the task was created from a checkpoint and Start has not restored it yet. */
  get restoring(): boolean {
    return this.#restoreFrom !== undefined;
  }

  /** Whether the init shares its pid namespace, from the bundle's spec (read once). */
  sharesPidNamespace(): Promise<boolean> {
    return this.#sharesPid ??= sharesPidNamespace(this.bundle);
  }

  /**
   * What create set up for the container: the rootfs the shim mounted (unmounted on delete), the
   * checkpoint Start restores from.
   *
   * @param held what was set up
   */
  hold(
    held: {
      rootfsMounted?: true;
      restoreFrom?: { imagePath: string; io: Pick<ProcessIoSetup, "io" | "ready"> };
    },
  ): void {
    if (held.rootfsMounted) this.#rootfsMounted = true;
    if (held.restoreFrom) this.#restoreFrom = held.restoreFrom;
  }

  /**
   * Publishes this container's OOM kills from now on, watched by the runtime or in the init's
   * cgroup; nothing where neither can watch. Once, after the init is created or restored.
   */
  async #watchOom(): Promise<void> {
    const { platform, events, logger } = this.#d;
    const onOom = () =>
      events.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: this.id });
    try {
      if (!this.runtime.watchOom) {
        refuseShimCgroup(platform, "OOM events", this.id, this.init.pid, this.#initCgroup);
      }
      const watch = this.runtime.watchOom
        ? await this.runtime.watchOom(this.id, onOom)
        : await platform.watchOom(this.init.pid, onOom);
      this.#cleanups.push(() => watch.close());
    } catch (e) {
      logger.debug("oom watch unavailable", { error: (e as Error).message });
    }
  }

  /** The process for an exec id ("" is init); NotFound when there is none. */
  process(execId: string): ShimProcess {
    if (execId === "") return this.init;
    const p = this.execs.get(execId);
    if (!p) {
      throw statusError(
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

  /**
   * Starts the init (restoring it when created from a checkpoint) or a registered exec, and
   * publishes its start event.
   *
   * @param execId "" for the init
   * @returns the process's pid
   */
  async start(execId: string): Promise<number> {
    const p = this.process(execId);
    if (p.starting) {
      throw statusError(`cannot start ${p.describe()}: it is starting`, Code.FailedPrecondition);
    }
    if (p.state !== "created") {
      throw statusError(
        `cannot start ${p.describe()}: it is ${p.state}`,
        Code.FailedPrecondition,
      );
    }
    if (p.execId) {
      // The init's exit may be taken in but held back for an exec mid-start.
      if (this.init.state === "stopped" || this.#d.exits.initExitTaken(this)) {
        throw statusError(
          `cannot start ${p.describe()}: the container's init process has exited`,
          Code.FailedPrecondition,
        );
      }
      return await this.#startExec(p);
    }
    const from = this.#restoreFrom;
    const announce = () =>
      this.#d.events.publish("/tasks/start", "containerd.events.TaskStart", {
        containerId: this.id,
        pid: p.pid,
      });
    if (!from) {
      await this.#d.exits.track(this, p, {
        run: () => this.runtime.start(this.id),
        announce,
      });
      return p.pid;
    }
    // From a checkpoint: the runtime's restore, then the restored init's OOM watch, as Create
    // does for a fresh one.
    await this.#d.exits.track(this, p, {
      run: async () => {
        const restored = await this.runtime.restore!(this.id, {
          bundle: this.bundle,
          imagePath: from.imagePath,
          workPath: `${this.bundle}/work/criu-work`,
          noSubreaper: true,
          io: from.io.io,
        });
        await from.io.ready();
        return restored;
      },
      prepare: async () => {
        this.#restoreFrom = undefined;
        await this.prepareInit();
      },
      announce,
    });
    return p.pid;
  }

  /**
   * After a live upgrade: what create had set up and the previous code held in memory (the
   * rootfs to unmount on Delete, the init's cgroups, the OOM watch).
   *
   * @param rootfsMounted whether create mounted the rootfs
   */
  async resume(rootfsMounted: boolean): Promise<void> {
    if (rootfsMounted) this.#rootfsMounted = true;
    if (this.init.pid !== 0 && this.init.state !== "stopped") await this.prepareInit();
  }

  /** Why this container cannot cross a live upgrade now, or `undefined` when it can. */
  uncarriable(): string | undefined {
    if (this.#restoreFrom) return `container "${this.id}" waits to be restored from a checkpoint`;
    if (this.#initKills.size > 0) return `container "${this.id}" has a kill in flight`;
    return undefined;
  }

  /** Once the init runs: keeps its cgroups when the platform reads stats, and watches for OOM. */
  async prepareInit(): Promise<void> {
    this.#keepInitCgroup();
    await this.#watchOom();
  }

  async #startExec(p: ShimProcess): Promise<number> {
    const { platform, events } = this.#d;
    await this.#d.exits.track(this, p, {
      run: async () => {
        const io = await platform.openIo(p.stdio, {
          containerId: this.id,
          namespace: this.namespace,
        });
        p.attachIo(io.handle);
        try {
          const started = await this.runtime.exec(this.id, p.execId, p.spec, { io: io.io });
          await io.ready();
          return started;
        } catch (e) {
          await io.handle.close().catch(() => {});
          p.attachIo(undefined);
          throw e;
        }
      },
      announce: () =>
        events.publish("/tasks/exec-started", "containerd.events.TaskExecStarted", {
          containerId: this.id,
          execId: p.execId,
          pid: p.pid,
        }),
    });
    return p.pid;
  }

  /**
   * Registers an exec (started later by {@link Container.start}); publishes
   * `/tasks/exec-added`.
   *
   * @param execId the exec's id (validated by the caller)
   * @param stdio its stdio as containerd passed it
   * @param decodeSpec its OCI process spec, decoded once the exec may be added
   */
  addExec(execId: string, stdio: ProcessStdioPaths, decodeSpec: () => unknown): void {
    if (this.execs.has(execId)) {
      throw statusError(
        `exec "${execId}" already exists in container "${this.id}"`,
        Code.AlreadyExists,
      );
    }
    if (this.init.state === "stopped") {
      throw statusError(
        `cannot exec in container "${this.id}": its init process has exited`,
        Code.FailedPrecondition,
      );
    }
    const spec = decodeSpec();
    if (spec && typeof spec === "object") {
      (spec as { terminal?: boolean }).terminal = stdio.terminal;
    }
    this.execs.set(execId, new ShimProcess(this.id, execId, stdio, spec));
    this.#d.events.publish("/tasks/exec-added", "containerd.events.TaskExecAdded", {
      containerId: this.id,
      execId,
    });
  }

  /**
   * Signals a process. A finished process is NotFound, an unstarted exec FailedPrecondition.
   *
   * @param execId "" for the init
   * @param signal the signal number
   * @param all with the init: every process of the container
   */
  async kill(execId: string, signal: number, all: boolean): Promise<void> {
    const p = this.process(execId);
    // An exec mid-start has no pid yet: its Kill waits for the start, as the Go shim's does
    // (its Start holds the exec's lock), instead of failing as "not started".
    if (p.execId && p.starting) await p.startSettled();
    if (p.state === "stopped") {
      throw statusError(`process already finished: ${p.describe()}`, Code.NotFound);
    }
    if (p.execId) return await this.#killExec(p, signal);
    // Until this returns, the init's exit is held back (see initKills).
    const answered = Promise.withResolvers<void>();
    this.#initKills.add(answered.promise);
    try {
      await this.runtime.kill(this.id, signal, { all });
    } finally {
      this.#initKills.delete(answered.promise);
      answered.resolve();
    }
  }

  async #killExec(p: ShimProcess, signal: number): Promise<void> {
    if (p.pid === 0) {
      throw statusError(`cannot kill ${p.describe()}: not started`, Code.FailedPrecondition);
    }
    try {
      if (p.runtime?.kill) await p.runtime.kill(signal);
      else this.#d.platform.kill(p.pid, signal);
    } catch (e) {
      if (isStatusError(e)) throw e;
      throw statusError(
        `kill ${p.describe()} (pid ${p.pid}): ${(e as Error).message}`,
        /ESRCH|no such process/i.test(String(e)) ? Code.NotFound : Code.Unknown,
      );
    }
  }

  /**
   * Resizes a process's terminal: the runtime's, when it owns it, else the pty's.
   *
   * @param execId "" for the init
   * @param width columns
   * @param height rows
   */
  async resize(execId: string, width: number, height: number): Promise<void> {
    const p = this.process(execId);
    if (!p.stdio.terminal) {
      throw statusError(`${p.describe()} has no terminal`, Code.FailedPrecondition);
    }
    await p.resize(width, height);
  }

  /**
   * Closes a process's stdin: the shim's end of the FIFO, then the runtime's, if it has one;
   * at any moment after Exec or Create, an end not attached yet is closed when it is
   * ({@link ShimProcess.closeStdin}).
   *
   * @param execId "" for the init
   */
  async closeStdin(execId: string): Promise<void> {
    await this.process(execId).closeStdin();
  }

  /** Keeps the init's cgroups when the platform reads stats. */
  #keepInitCgroup(): void {
    if (!this.runtime.stats && !this.init.runtime?.exited) {
      this.#initCgroup = this.#d.platform.cgroupOf?.(this.init.pid);
    }
  }

  /**
   * Statistics: the runtime's own, or the cgroup of the init's host pid, which an exited init's
   * container keeps until Delete (as the Go shim answers). NotFound when there is none.
   */
  async stats(): Promise<Any> {
    const exited = this.init.state === "stopped";
    if (this.init.pid === 0 || exited && (this.runtime.stats || !this.#initCgroup)) {
      throw statusError(`container "${this.id}" is not running: no cgroup`, Code.NotFound);
    }
    const { platform } = this.#d;
    if (!this.runtime.stats) {
      refuseShimCgroup(platform, "stats", this.id, this.init.pid, this.#initCgroup);
    }
    try {
      return this.runtime.stats
        ? await this.runtime.stats(this.id)
        : await platform.stats(this.init.pid, this.#initCgroup);
    } catch (e) {
      // A runtime's own status (Unimplemented, Unavailable, ...) reaches the client as it is;
      // anything else means the cgroup could not be read: gone, as containerd's shim says.
      if (isStatusError(e)) throw e;
      throw statusError(
        `stats of container "${this.id}": ${(e as Error).message}`,
        Code.NotFound,
      );
    }
  }

  /**
   * The container's pids: the runtime's `ps`, plus the init and the running execs it does not
   * list, each exec with its id.
   *
   * @returns pids, and the exec id of those that are execs
   */
  async pids(): Promise<{ pid: number; execId?: string }[]> {
    const pids = await this.runtime.ps(this.id);
    // A dead init leaves its cgroup before the reaper has collected it, so `runc ps` may miss
    // an init that is still running as far as State says. containerd 1.7+ take an empty list
    // on reconnect for a leaked shim and Delete it (FailedPrecondition: running), leaving the
    // shim behind; so the init stays listed until its exit has been handled.
    if (this.init.pid !== 0 && this.init.state !== "stopped" && !pids.includes(this.init.pid)) {
      pids.unshift(this.init.pid);
    }
    // Likewise for execs; and a runtime whose `ps` sees only its own pid space (gVisor) lists
    // none of the host pids the shim reports for its processes.
    const byPid = new Map<number, string>();
    for (const p of this.execs.values()) {
      if (p.pid === 0) continue;
      byPid.set(p.pid, p.execId);
      if (p.state !== "stopped" && !pids.includes(p.pid)) pids.push(p.pid);
    }
    return pids.map((pid) => {
      const execId = byPid.get(pid);
      return execId ? { pid, execId } : { pid };
    });
  }

  /**
   * Deletes an exec, or the container (its init) with the runtime's state, the OOM watch, the
   * rootfs and the I/O; `unlist` removes it from the service before `/tasks/delete` goes out.
   *
   * @param execId "" for the init
   * @param unlist called once the container is gone
   * @returns containerd's DeleteResponse
   */
  async delete(execId: string, unlist: () => void): Promise<DeletedProcess> {
    const p = this.process(execId);
    // A process mid-start is neither created nor running yet: Delete waits for the start (as
    // the Go shim's, behind the process's lock) and then judges its state.
    if (p.starting) await p.startSettled();
    p.assertDeletable();
    if (p.io) {
      await p.io.drain(10_000).catch(() => {});
      await p.io.close().catch(() => {});
    }
    const out: DeletedProcess = {
      pid: p.pid,
      exitStatus: p.exit?.status ?? 0,
      exitedAt: timestampOf(p.exit?.exitedAt ?? new Date()),
    };
    if (p.execId) {
      this.execs.delete(p.execId);
      return out;
    }
    if (this.runningExecs().length > 0) {
      throw statusError(
        `cannot delete container "${this.id}": it has running execs`,
        Code.FailedPrecondition,
      );
    }
    await this.#release(p.state === "created");
    unlist();
    this.#d.events.publish("/tasks/delete", "containerd.events.TaskDelete", {
      containerId: this.id,
      pid: p.pid,
      exitStatus: out.exitStatus,
      exitedAt: out.exitedAt,
      id: "",
    });
    this.#d.logger.info("deleted");
    return out;
  }

  /** The runtime's delete, the cleanups, the rootfs, and the note the `delete` action reads. */
  async #release(force: boolean): Promise<void> {
    try {
      await this.runtime.delete(this.id, { force });
    } catch (e) {
      if (asStatusError(e).code !== Code.NotFound && !/does not exist/i.test(String(e))) {
        throw e;
      }
    }
    for (const fn of this.#cleanups) await Promise.resolve(fn()).catch(() => {});
    if (this.#rootfsMounted) await this.#d.platform.unmount(`${this.bundle}/rootfs`);
    // Tells the `delete` action the runtime has nothing left to delete, and what to answer: it
    // (or the launcher, without starting deno) prints this DeleteResponse.
    await Deno.writeFile(
      `${this.bundle}/${RUNTIME_DELETED_FILE}`,
      // As containerd's shims answer `delete`, whatever the init's own status was.
      encodeDeleteResponse({
        pid: this.init.pid,
        exitStatus: DEAD_SHIM_EXIT_STATUS,
        exitedAt: new Date(),
      }),
    ).catch(() => {});
  }
}
