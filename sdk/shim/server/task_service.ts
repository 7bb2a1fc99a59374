/**
 * The Task API, written once and served as both `containerd.task.v2.Task` and
 * `containerd.task.v3.Task`. It owns the containers, their processes and the order of their
 * events; the runtime specifics come from the {@link Shim} and the OS mechanics from a
 * {@link ShimPlatform}.
 *
 * @module
 */

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Any } from "@bufbuild/protobuf/wkt";
import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import type {
  CheckpointTaskRequest,
  CloseIORequest,
  ConnectRequest,
  CreateTaskRequest,
  DeleteRequest,
  ExecProcessRequest,
  KillRequest,
  PauseRequest,
  PidsRequest,
  ResizePtyRequest,
  ResumeRequest,
  ShutdownRequest,
  StartRequest,
  StateRequest,
  StatsRequest,
  UpdateTaskRequest,
  WaitRequest,
} from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Status } from "../../../proto/gen/containerd/types/task/task_pb.ts";
import {
  TaskCreateSchema,
  TaskDeleteSchema,
  TaskExecAddedSchema,
  TaskExecStartedSchema,
  TaskExitSchema,
  TaskOOMSchema,
  TaskPausedSchema,
  TaskResumedSchema,
  TaskStartSchema,
} from "../../../proto/gen/containerd/events/task_pb.ts";
import {
  CheckpointOptionsSchema,
  ProcessDetailsSchema,
} from "../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { abortable } from "./abortable.ts";
import { Container } from "./container.ts";
import type { EventPublisher } from "./events.ts";
import { packAny } from "../../../proto/any.ts";
import type { Logger } from "../logger.ts";
import { resolveOptions } from "../options.ts";
import type { ReapedExit, ShimPlatform } from "./platform.ts";
import { type ProcessExitInfo, ShimProcess } from "./process.ts";
import { ExitWindow, isExitOf } from "./exit_window.ts";
import { sharesPidNamespace } from "./bundle_spec.ts";
import type { Shim } from "../shim.ts";
import type { TaskApiEndpoint } from "../endpoint.ts";
import { DEAD_SHIM_EXIT_STATUS, RUNTIME_DELETED_FILE } from "../boot/bundle_files.ts";
import { encodeDeleteResponse } from "../../../proto/wire.ts";

type TaskImpl = ServiceImpl<typeof Task>;
type Out<M extends keyof TaskImpl> = MessageInitShape<
  (typeof Task)["method"][M]["output"]
>;

/** Longest an init's exit waits for a Kill reply of that init ({@link Container.initKills}). */
const KILL_REPLY_WAIT_MS = 10_000;

/** containerd's identifier rule (`pkg/identifiers`): alphanumerics joined by `.`, `_`, `-`. */
const IDENTIFIER = /^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$/;

/** Validates a container or exec id; InvalidArgument naming the value otherwise. */
export function validateId(kind: string, id: string): void {
  if (id.length === 0 || id.length > 76 || !IDENTIFIER.test(id)) {
    throw new ConnectError(
      `invalid ${kind} id "${id}": must be 1-76 alphanumerics separated by ".", "_" or "-"`,
      Code.InvalidArgument,
    );
  }
}

/** Everything the Task service depends on. */
export interface TaskServiceDeps<T extends object> {
  /** The runtime definition. */
  shim: Shim<T>;
  /** OS mechanics. */
  platform: ShimPlatform;
  /** Event sink. */
  events: Pick<EventPublisher, "publish">;
  /** Logger. */
  logger: Logger;
  /** Namespace from the command line (containerd also sends it per call). */
  namespace: string;
  /** Options the shim already has (from `start` or a sandbox); defaults otherwise. */
  inheritedOptions?: () => T | undefined;
  /** Called when Shutdown asks the shim to exit (no containers left). */
  onShutdown: () => void;
  /** Records an endpoint handed over by containerd in a legacy carrier. */
  onEndpoint?: (ep: TaskApiEndpoint, containerId: string) => void;
}

/**
 * The Task service implementation.
 *
 * @example Usage
 * ```ts ignore
 * const svc = new TaskService({ shim, platform, events, logger, namespace, onShutdown });
 * server.register(createServiceImplSpec(TaskV2, svc.impl()), "containerd.task.v2.Task", "containerd.task.v3.Task");
 * ```
 */
export class TaskService<T extends object> {
  #d: TaskServiceDeps<T>;
  #containers = new Map<string, Container<T>>();
  /** Processes being started whose pid is not known yet; see {@link ExitWindow}. */
  #windows = new Set<ExitWindow>();
  /** Execs whose exit has been claimed (their exit event may still be on its way). */
  #claimed = new WeakSet<ShimProcess>();
  #unsubscribe: () => void;

  /** Creates the service and subscribes to exits. */
  constructor(deps: TaskServiceDeps<T>) {
    this.#d = deps;
    this.#unsubscribe = deps.platform.onExit((e) => this.#onExit(e));
  }

  /** Containers currently served. */
  get containers(): ReadonlyMap<string, Container<T>> {
    return this.#containers;
  }

  /** SIGKILLs every container and waits (bounded) for their exits; used by StopSandbox. */
  async killAll(graceMs: number): Promise<void> {
    const live = [...this.#containers.values()].filter((c) => c.init.state !== "stopped");
    await Promise.all(live.map((c) => c.runtime.kill(c.id, 9, { all: true }).catch(() => {})));
    await Promise.race([
      Promise.all(live.map((c) => c.init.pid ? c.init.exited : undefined)),
      new Promise((r) => setTimeout(r, graceMs)),
    ]);
  }

  /** Stops listening for exits. */
  close(): void {
    this.#unsubscribe();
  }

  /** The Connect implementation (every RPC bound to this instance). */
  impl(): TaskImpl {
    return {
      state: (r) => this.state(r),
      create: (r, c) => this.create(r, c),
      start: (r) => this.start(r),
      delete: (r) => this.delete(r),
      pids: (r) => this.pids(r),
      pause: (r) => this.pause(r),
      resume: (r) => this.resume(r),
      checkpoint: (r) => this.checkpoint(r),
      kill: (r) => this.kill(r),
      exec: (r) => this.exec(r),
      resizePty: (r) => this.resizePty(r),
      closeIO: (r) => this.closeIO(r),
      update: (r) => this.update(r),
      wait: (r, c) => this.wait(r, c),
      stats: (r) => this.stats(r),
      connect: (r) => this.connect(r),
      shutdown: (r) => this.shutdown(r),
    };
  }

  #container(id: string): Container<T> {
    const c = this.#containers.get(id);
    if (!c) throw new ConnectError(`container "${id}" not found`, Code.NotFound);
    return c;
  }

  /** State of a process. */
  state(r: StateRequest): Out<"state"> {
    const c = this.#container(r.id);
    const p = c.process(r.execId);
    return {
      id: p.id,
      bundle: c.bundle,
      pid: p.pid,
      status: statusOf(p),
      stdin: p.stdio.stdin,
      stdout: p.stdio.stdout,
      stderr: p.stdio.stderr,
      terminal: p.stdio.terminal,
      exitStatus: p.exit?.status ?? 0,
      ...(p.exit ? { exitedAt: timestampFromDate(p.exit.exitedAt) } : {}),
      execId: p.execId,
    };
  }

  /** Creates a container: options, rootfs, stdio, `runtime create`, then `/tasks/create`. */
  create(r: CreateTaskRequest, ctx?: HandlerContext): Promise<Out<"create">> {
    return this.#create(r, ctx);
  }

  async #create(r: CreateTaskRequest, ctx?: HandlerContext): Promise<Out<"create">> {
    validateId("container", r.id);
    if (this.#containers.has(r.id)) {
      throw new ConnectError(`container "${r.id}" already exists`, Code.AlreadyExists);
    }
    const { shim, platform, logger } = this.#d;
    const namespace = ctx?.requestHeader.get("containerd-namespace-ttrpc") || this.#d.namespace;
    const resolved = resolveOptions(
      shim.options,
      r.options,
      this.#d.inheritedOptions?.(),
      shim.runtimeName,
    );
    for (const w of resolved.warnings) logger.warn(w, { id: r.id });
    if (resolved.endpoint) this.#d.onEndpoint?.(resolved.endpoint, r.id);
    const bundle = r.bundle;
    // A small file on Create's path: sync, without a thread-pool round trip.
    Deno.writeTextFileSync(`${bundle}/options.json`, JSON.stringify(resolved.options));

    const clog = logger.with({ id: r.id, namespace });
    const runtime = shim.runtime({
      id: r.id,
      namespace,
      bundle,
      options: resolved.options,
      spawn: (cmd) => platform.spawn(cmd),
      logger: clog,
    });
    if (r.checkpoint && !runtime.restore) {
      throw new ConnectError(
        `restoring container "${r.id}" from checkpoint "${r.checkpoint}" is not supported`,
        Code.Unimplemented,
      );
    }
    const init = new ShimProcess(r.id, "", {
      stdin: r.stdin,
      stdout: r.stdout,
      stderr: r.stderr,
      terminal: r.terminal,
    });

    let mounted = false;
    let restoreFrom: Container<T>["restoreFrom"];
    const rootfs = `${bundle}/rootfs`;
    const undo: (() => Promise<void>)[] = [];
    // Open before the runtime starts the init: it may exit before its pid is known.
    const window = this.#openWindow();
    try {
      if (r.rootfs.length > 0) {
        await Deno.mkdir(rootfs, { recursive: true, mode: 0o711 });
        await platform.mount(r.rootfs, rootfs);
        mounted = true;
        undo.push(() => platform.unmount(rootfs));
      }
      const io = await platform.openIo(init.stdio, { containerId: r.id, namespace });
      init.io = io.handle;
      undo.push(() => io.handle.close());
      // From a checkpoint, Start restores the init (as the Go shim does): nothing runs yet.
      if (r.checkpoint) restoreFrom = { imagePath: r.checkpoint, io };
      else {await runtime.create(r.id, {
          bundle,
          pidFile: `${bundle}/init.pid`,
          ...(io.consoleSocket ? { consoleSocket: io.consoleSocket } : {}),
          ...(io.stdio ? { io: io.stdio } : {}),
        });}
      if (!restoreFrom) {
        undo.push(() => runtime.delete(r.id, { force: true }).catch(() => {}));
        await io.ready();
        init.setPid(await platform.readPidFile(`${bundle}/init.pid`));
        init.startTime = platform.startTimeOf?.(init.pid);
      }
    } catch (e) {
      this.#windows.delete(window);
      for (const u of undo.reverse()) await u().catch(() => {});
      throw e;
    }

    try {
      // The OOM watch comes first: until the container is listed, the init's exit waits in the
      // window, so /tasks/create is always published before /tasks/exit.
      const oomWatch = restoreFrom ? undefined : await this.#watchOom(r.id, init.pid, clog);
      const container = new Container<T>({
        id: r.id,
        namespace,
        bundle,
        runtime,
        process: init,
        options: resolved.options,
        rootfsMounted: mounted,
      });
      if (oomWatch) container.cleanups.push(() => oomWatch.close());
      container.sharesPidNamespace = sharesPidNamespace(bundle);
      if (restoreFrom) container.restoreFrom = restoreFrom;
      this.#containers.set(r.id, container);
      this.#d.events.publish("/tasks/create", TaskCreateSchema, {
        containerId: r.id,
        bundle,
        rootfs: r.rootfs,
        io: { stdin: r.stdin, stdout: r.stdout, stderr: r.stderr, terminal: r.terminal },
        checkpoint: r.checkpoint,
        pid: init.pid,
      });
      // The init may already have died (reaped before we knew its pid): only an exit from inside
      // the window can be its own.
      const early = window.take(init.pid, init.startTime);
      if (early) void this.#initExited(container, early);
    } finally {
      this.#windows.delete(window);
    }
    clog.info("created", { pid: init.pid });
    return { pid: init.pid };
  }

  /** Starts the init process or an exec. */
  async start(r: StartRequest): Promise<Out<"start">> {
    const c = this.#container(r.id);
    const p = c.process(r.execId);
    if (p.state !== "created") {
      throw new ConnectError(
        `cannot start ${p.describe()}: it is ${p.state}`,
        Code.FailedPrecondition,
      );
    }
    if (p.execId) {
      // exitReported: the init's exit is seen but held back for an exec mid-start (below).
      if (c.init.state === "stopped" || c.exitReported) {
        throw new ConnectError(
          `cannot start ${p.describe()}: the container's init process has exited`,
          Code.FailedPrecondition,
        );
      }
      return await this.#startExec(c, p);
    }
    p.beginStart();
    try {
      if (c.restoreFrom) await this.#restore(c, c.restoreFrom);
      else await c.runtime.start(c.id);
      p.markStarted();
      this.#d.events.publish("/tasks/start", TaskStartSchema, { containerId: c.id, pid: p.pid });
    } finally {
      p.endStart();
    }
    if (c.runtime.initExit === "wait") void this.#waitInit(c);
    return { pid: p.pid };
  }

  /** OOM events for a container whose init is `pid`; undefined where it cannot be watched. */
  async #watchOom(id: string, pid: number, log: Logger): Promise<{ close(): void } | undefined> {
    try {
      return await this.#d.platform.watchOom(pid, () => {
        this.#d.events.publish("/tasks/oom", TaskOOMSchema, { containerId: id });
      });
    } catch (e) {
      log.debug("oom watch unavailable", { error: (e as Error).message });
      return undefined;
    }
  }

  /**
   * Start of a task created from a checkpoint: `runtime restore`, then the restored init's pid
   * and its OOM watch, as Create does for a fresh one. An exit of the restored init before its
   * pid is known waits in the window, as at Create.
   */
  async #restore(c: Container<T>, from: NonNullable<Container<T>["restoreFrom"]>): Promise<void> {
    const { platform } = this.#d;
    const pidFile = `${c.bundle}/init.pid`;
    const window = this.#openWindow();
    try {
      await c.runtime.restore!(c.id, {
        bundle: c.bundle,
        pidFile,
        imagePath: from.imagePath,
        workPath: `${c.bundle}/work/criu-work`,
        noSubreaper: true,
        ...(from.io.consoleSocket ? { consoleSocket: from.io.consoleSocket } : {}),
        ...(from.io.stdio ? { io: from.io.stdio } : {}),
      });
      await from.io.ready();
      c.init.setPid(await platform.readPidFile(pidFile));
      c.init.startTime = platform.startTimeOf?.(c.init.pid);
      c.restoreFrom = undefined;
      const oomWatch = await this.#watchOom(c.id, c.init.pid, this.#d.logger.with({ id: c.id }));
      if (oomWatch) c.cleanups.push(() => oomWatch.close());
      const early = window.take(c.init.pid, c.init.startTime);
      if (early) void this.#initExited(c, early);
    } finally {
      this.#windows.delete(window);
    }
  }

  /**
   * For runtimes whose init may not be a process the shim can reap (a gVisor pod member runs
   * inside its sandbox's process): ask the runtime. A root container's exit may still arrive
   * through the reaper first (its sandbox process exits); whichever comes first counts.
   */
  async #waitInit(c: Container<T>): Promise<void> {
    let status: number;
    try {
      status = await c.runtime.wait!(c.id);
    } catch (e) {
      // `wait` fails when the sandbox is already gone: give the reaper a moment to report it.
      await Promise.race([c.init.exited, new Promise((r) => setTimeout(r, 2_000))]);
      if (c.exitReported) return;
      this.#d.logger.error("waiting for the init failed; reporting status 255", {
        id: c.id,
        error: (e as Error).message,
      });
      status = 255;
    }
    await this.#initExited(c, { status, exitedAt: new Date() });
  }

  async #startExec(c: Container<T>, p: ShimProcess): Promise<Out<"start">> {
    const { platform } = this.#d;
    const pidFile = `${c.bundle}/${p.execId}.pid`;
    p.beginStart();
    const window = this.#openWindow();
    try {
      const io = await platform.openIo(p.stdio, { containerId: c.id, namespace: c.namespace });
      p.io = io.handle;
      try {
        await c.runtime.exec(c.id, p.spec, {
          pidFile,
          ...(io.consoleSocket ? { consoleSocket: io.consoleSocket } : {}),
          ...(io.stdio ? { io: io.stdio } : {}),
        });
        await io.ready();
      } catch (e) {
        await io.handle.close().catch(() => {});
        p.io = undefined;
        throw e;
      }
      const pid = await platform.readPidFile(pidFile);
      p.startTime = platform.startTimeOf?.(pid);
      p.markStarted(pid);
      this.#d.events.publish("/tasks/exec-started", TaskExecStartedSchema, {
        containerId: c.id,
        execId: p.execId,
        pid: p.pid,
      });
    } finally {
      this.#windows.delete(window);
      p.endStart();
    }
    // From markStarted on, exits reach the exec directly; one from before is in the window.
    const early = window.take(p.pid, p.startTime);
    if (early) {
      this.#claimed.add(p);
      void this.#execExited(c, p, early);
    }
    return { pid: p.pid };
  }

  /** Deletes an exec, or the container (init) with its rootfs and I/O. */
  async delete(r: DeleteRequest): Promise<Out<"delete">> {
    const c = this.#container(r.id);
    const p = c.process(r.execId);
    p.assertDeletable();
    if (p.io) {
      await p.io.drain(10_000).catch(() => {});
      await p.io.close().catch(() => {});
    }
    const exit = p.exit;
    const out: Out<"delete"> = {
      pid: p.pid,
      exitStatus: exit?.status ?? 0,
      exitedAt: timestampFromDate(exit?.exitedAt ?? new Date()),
    };
    if (p.execId) {
      c.execs.delete(p.execId);
      await Deno.remove(`${c.bundle}/${p.execId}.pid`).catch(() => {});
      return out;
    }
    if (c.runningExecs().length > 0) {
      throw new ConnectError(
        `cannot delete container "${c.id}": it has running execs`,
        Code.FailedPrecondition,
      );
    }
    try {
      await c.runtime.delete(c.id, { force: p.state === "created" });
    } catch (e) {
      if (ConnectError.from(e).code !== Code.NotFound && !/does not exist/i.test(String(e))) {
        throw e;
      }
    }
    for (const fn of c.cleanups) await Promise.resolve(fn()).catch(() => {});
    if (c.rootfsMounted) await this.#d.platform.unmount(`${c.bundle}/rootfs`);
    // Tells the `delete` action the runtime has nothing left to delete, and what to answer: it
    // (or the launcher, without starting deno) prints this DeleteResponse.
    await Deno.writeFile(
      `${c.bundle}/${RUNTIME_DELETED_FILE}`,
      // As containerd's shims answer `delete`, whatever the init's own status was.
      encodeDeleteResponse({ pid: p.pid, exitStatus: DEAD_SHIM_EXIT_STATUS, exitedAt: new Date() }),
    ).catch(() => {});
    this.#containers.delete(c.id);
    this.#d.events.publish("/tasks/delete", TaskDeleteSchema, {
      containerId: c.id,
      pid: p.pid,
      exitStatus: out.exitStatus,
      exitedAt: out.exitedAt,
      id: "",
    });
    this.#d.logger.info("deleted", { id: c.id });
    return out;
  }

  /** Pids of the container's processes; execs carry `containerd.runc.v1.ProcessDetails`. */
  async pids(r: PidsRequest): Promise<Out<"pids">> {
    const c = this.#container(r.id);
    const pids = await c.runtime.ps(c.id);
    // A dead init leaves its cgroup before the reaper has collected it, so `runc ps` may miss
    // an init that is still running as far as State says. containerd 1.7+ take an empty list
    // on reconnect for a leaked shim and Delete it (FailedPrecondition: running), leaving the
    // shim behind; so the init stays listed until its exit has been handled.
    if (c.init.pid !== 0 && c.init.state !== "stopped" && !pids.includes(c.init.pid)) {
      pids.unshift(c.init.pid);
    }
    // Likewise for execs; and a runtime whose `ps` sees only its own pid space (gVisor) lists
    // none of the host pids the shim reports for its processes.
    const byPid = new Map<number, string>();
    for (const p of c.execs.values()) {
      if (p.pid === 0) continue;
      byPid.set(p.pid, p.execId);
      if (p.state !== "stopped" && !pids.includes(p.pid)) pids.push(p.pid);
    }
    return {
      processes: pids.map((pid) => {
        const execId = byPid.get(pid);
        return execId ? { pid, info: packAny(ProcessDetailsSchema, { execId }) } : { pid };
      }),
    };
  }

  /** Freezes the container. */
  async pause(r: PauseRequest): Promise<Out<"pause">> {
    const c = this.#container(r.id);
    if (c.init.state !== "running") {
      throw new ConnectError(
        `cannot pause container "${c.id}": it is ${c.init.state}`,
        Code.FailedPrecondition,
      );
    }
    c.init.setPaused("pausing");
    try {
      await c.runtime.pause(c.id);
    } catch (e) {
      c.init.setPaused("running");
      throw e;
    }
    c.init.setPaused("paused");
    this.#d.events.publish("/tasks/paused", TaskPausedSchema, { containerId: c.id });
    return {};
  }

  /** Thaws the container. */
  async resume(r: ResumeRequest): Promise<Out<"resume">> {
    const c = this.#container(r.id);
    if (c.init.state !== "paused") {
      throw new ConnectError(
        `cannot resume container "${c.id}": it is ${c.init.state}`,
        Code.FailedPrecondition,
      );
    }
    await c.runtime.resume(c.id);
    c.init.setPaused("running");
    this.#d.events.publish("/tasks/resumed", TaskResumedSchema, { containerId: c.id });
    return {};
  }

  /** Checkpoints the container (runc checkpoint; needs a working criu). */
  async checkpoint(r: CheckpointTaskRequest): Promise<Out<"checkpoint">> {
    const c = this.#container(r.id);
    if (c.init.state !== "running" && c.init.state !== "paused") {
      throw new ConnectError(
        `cannot checkpoint container "${c.id}": it is ${c.init.state}`,
        Code.FailedPrecondition,
      );
    }
    const o = r.options ? decodeCheckpointOptions(r.options) : undefined;
    await c.runtime.checkpoint(c.id, {
      imagePath: o?.imagePath || r.path,
      workPath: o?.workPath || `${c.bundle}/work/criu-work`,
      ...(o?.parentPath ? { parentPath: o.parentPath } : {}),
      leaveRunning: o ? !o.exit : true,
      tcpEstablished: o?.openTcp ?? false,
      extUnixSk: o?.externalUnixSockets ?? false,
      shellJob: o?.terminal ?? false,
      fileLocks: o?.fileLocks ?? false,
      emptyNs: o?.emptyNamespaces ?? [],
      ...(o?.cgroupsMode ? { cgroupsMode: o.cgroupsMode } : {}),
    });
    return {};
  }

  /** Signals a process. A finished process is NotFound, an unstarted exec FailedPrecondition. */
  async kill(r: KillRequest): Promise<Out<"kill">> {
    const c = this.#container(r.id);
    const p = c.process(r.execId);
    if (p.state === "stopped") {
      throw new ConnectError(`process already finished: ${p.describe()}`, Code.NotFound);
    }
    if (p.execId) {
      if (p.pid === 0) {
        throw new ConnectError(`cannot kill ${p.describe()}: not started`, Code.FailedPrecondition);
      }
      try {
        this.#d.platform.kill(p.pid, r.signal);
      } catch (e) {
        throw new ConnectError(
          `kill ${p.describe()} (pid ${p.pid}): ${(e as Error).message}`,
          /ESRCH|no such process/i.test(String(e)) ? Code.NotFound : Code.Unknown,
        );
      }
      return {};
    }
    // Until this returns, the init's exit is held back (see Container.initKills).
    let answered!: () => void;
    const inFlight = new Promise<void>((r) => answered = r);
    c.initKills.add(inFlight);
    try {
      await c.runtime.kill(c.id, r.signal, { all: r.all });
      return {};
    } finally {
      c.initKills.delete(inFlight);
      answered();
    }
  }

  /**
   * Waits until no Kill of `c`'s init is being answered, then one more turn of the event loop
   * so the last reply is written before the exit that may close its connection goes out.
   * Bounded: a runtime's kill that hangs must not hold the exit forever.
   */
  async #killsAnswered(c: Container<T>): Promise<void> {
    if (c.initKills.size === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      (async () => {
        while (c.initKills.size > 0) await Promise.all(c.initKills);
      })(),
      new Promise((r) => timer = setTimeout(r, KILL_REPLY_WAIT_MS)),
    ]);
    clearTimeout(timer);
    await new Promise((r) => setTimeout(r, 0));
  }

  /** Registers an exec (started later by Start); publishes `/tasks/exec-added`. */
  exec(r: ExecProcessRequest): Out<"exec"> {
    const c = this.#container(r.id);
    validateId("exec", r.execId);
    if (c.execs.has(r.execId)) {
      throw new ConnectError(
        `exec "${r.execId}" already exists in container "${c.id}"`,
        Code.AlreadyExists,
      );
    }
    if (c.init.state === "stopped") {
      throw new ConnectError(
        `cannot exec in container "${c.id}": its init process has exited`,
        Code.FailedPrecondition,
      );
    }
    const spec = decodeJsonAny(r.spec, "exec process spec");
    if (spec && typeof spec === "object") (spec as { terminal?: boolean }).terminal = r.terminal;
    c.execs.set(
      r.execId,
      new ShimProcess(c.id, r.execId, {
        stdin: r.stdin,
        stdout: r.stdout,
        stderr: r.stderr,
        terminal: r.terminal,
      }, spec),
    );
    this.#d.events.publish("/tasks/exec-added", TaskExecAddedSchema, {
      containerId: c.id,
      execId: r.execId,
    });
    return {};
  }

  /** Resizes a process's terminal. */
  resizePty(r: ResizePtyRequest): Out<"resizePty"> {
    const p = this.#container(r.id).process(r.execId);
    if (!p.stdio.terminal) {
      throw new ConnectError(`${p.describe()} has no terminal`, Code.FailedPrecondition);
    }
    p.io?.resize?.(r.width, r.height);
    return {};
  }

  /** Closes a process's stdin. */
  async closeIO(r: CloseIORequest): Promise<Out<"closeIO">> {
    const p = this.#container(r.id).process(r.execId);
    if (r.stdin) await p.io?.closeStdin();
    return {};
  }

  /** Updates the container's resources (OCI LinuxResources JSON). */
  async update(r: UpdateTaskRequest): Promise<Out<"update">> {
    const c = this.#container(r.id);
    const resources = decodeJsonAny(r.resources, "resources");
    await c.runtime.update(c.id, resources);
    return {};
  }

  /** Blocks until the process exits. */
  async wait(r: WaitRequest, ctx?: HandlerContext): Promise<Out<"wait">> {
    const p = this.#container(r.id).process(r.execId);
    const exit = await abortable(p.exited, ctx?.signal);
    return { exitStatus: exit.status, exitedAt: timestampFromDate(exit.exitedAt) };
  }

  /** cgroup statistics of the container. */
  async stats(r: StatsRequest): Promise<Out<"stats">> {
    const c = this.#container(r.id);
    if (c.init.pid === 0 || c.init.state === "stopped") {
      throw new ConnectError(`container "${c.id}" is not running: no cgroup`, Code.NotFound);
    }
    try {
      return { stats: await this.#d.platform.stats(c.init.pid) };
    } catch (e) {
      throw new ConnectError(
        `stats of container "${c.id}": ${(e as Error).message}`,
        Code.NotFound,
      );
    }
  }

  /** The shim's and the task's pids. */
  connect(r: ConnectRequest): Out<"connect"> {
    const c = this.#containers.get(r.id);
    return { shimPid: Deno.pid, taskPid: c?.init.pid ?? 0, version: this.#d.shim.version };
  }

  /** Exits the shim once no container is left; a no-op otherwise. */
  shutdown(_r: ShutdownRequest): Out<"shutdown"> {
    if (this.#containers.size === 0) this.#d.onShutdown();
    return {};
  }

  /** Clock ticks when a process is about to be started; exits from then on may be its own. */
  #openWindow(): ExitWindow {
    const window = new ExitWindow(this.#d.platform.bootTicks?.());
    this.#windows.add(window);
    return window;
  }

  /**
   * Routes a reaped exit: to the known process it belongs to, else to every process being
   * started whose pid is not known yet. Synchronous, so no exit can slip between the two.
   */
  #onExit(exit: ReapedExit): void {
    if (this.#deliver(exit)) return;
    for (const window of this.#windows) window.add(exit);
  }

  /** Hands `exit` to the live processes it is the exit of; false when there are none. */
  #deliver(exit: ReapedExit): boolean {
    const inits: Container<T>[] = [];
    for (const c of this.#containers.values()) {
      // Several inits can share a pid (gVisor: a pod's containers run in the sandbox's
      // process); when it exits, they all have.
      const init = c.init;
      if (init.pid !== 0 && !c.exitReported && isExitOf(exit, init.pid, init.startTime)) {
        inits.push(c);
      }
      for (const p of c.execs.values()) {
        if (p.pid === 0 || p.state === "stopped" || this.#claimed.has(p)) continue;
        if (!isExitOf(exit, p.pid, p.startTime)) continue;
        this.#claimed.add(p);
        void this.#execExited(c, p, exit);
        return true;
      }
    }
    for (const c of inits) void this.#initExited(c, exit);
    return inits.length > 0;
  }

  async #execExited(c: Container<T>, p: ShimProcess, exit: ReapedExit): Promise<void> {
    await p.startSettled();
    p.markExited(exit);
    this.#publishExit(c, p);
  }

  async #initExited(c: Container<T>, exit: ProcessExitInfo): Promise<void> {
    // The reaper and a runtime's `wait` may both report the same exit: the first one counts.
    if (c.exitReported) return;
    c.exitReported = true;
    const p = c.init;
    await p.startSettled();
    // Like the Go shim, hold the init's exit while an exec is mid-start (containerd #10589):
    // until that Start settles, Exec still creates and Start refuses (FailedPrecondition).
    await Promise.all([...c.execs.values()].map((e) => e.startSettled()));
    // Without a pid namespace of its own, the init's other processes outlive it: kill them
    // (the Go shim does too). Execs die with a private one; kill them anyway if they did not.
    if (
      c.runningExecs().length > 0 ||
      await (c.sharesPidNamespace ??= sharesPidNamespace(c.bundle))
    ) {
      await c.runtime.kill(c.id, 9, { all: true }).catch(() => {});
      await Promise.race([
        Promise.all(c.runningExecs().map((e) => e.exited)),
        new Promise((r) => setTimeout(r, 5_000)),
      ]);
    }
    await this.#killsAnswered(c);
    p.markExited(exit);
    // The init's exit is always the last exit published for a container.
    this.#publishExit(c, p);
  }

  #publishExit(c: Container<T>, p: ShimProcess): void {
    const exit = p.exit!;
    this.#d.events.publish("/tasks/exit", TaskExitSchema, {
      containerId: c.id,
      id: p.id,
      pid: p.pid,
      exitStatus: exit.status,
      exitedAt: timestampFromDate(exit.exitedAt),
    });
    this.#d.logger.debug("process exited", { id: c.id, exec: p.execId, status: exit.status });
  }
}

function statusOf(p: ShimProcess): Status {
  switch (p.state) {
    case "created":
      return Status.CREATED;
    case "running":
      return Status.RUNNING;
    case "pausing":
      return Status.PAUSING;
    case "paused":
      return Status.PAUSED;
    case "stopped":
      return Status.STOPPED;
  }
}

function decodeJsonAny(any: Any | undefined, what: string): unknown {
  if (!any || any.value.length === 0) return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(any.value));
  } catch (e) {
    throw new ConnectError(
      `${what} of type "${any.typeUrl}" is not JSON: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

function decodeCheckpointOptions(any: Any) {
  try {
    return fromBinary(CheckpointOptionsSchema, any.value);
  } catch (e) {
    throw new ConnectError(
      `checkpoint options of type "${any.typeUrl}" do not decode: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}
