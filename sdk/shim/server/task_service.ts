/**
 * The Task API, written once and served as both `containerd.task.v2.Task` and
 * `containerd.task.v3.Task`. It resolves each call's options and container and dispatches: the
 * work on a container's processes is its {@link Container}'s, which exit is whose is the
 * {@link ExitRouter}'s; the runtime specifics come from the {@link Shim} and the OS mechanics
 * from a {@link ShimPlatform}.
 *
 * @module
 */

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Any } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { Code, statusError } from "../../ttrpc/status_error.ts";
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
import type { Status } from "../../../proto/gen/containerd/types/task/task_pb.ts";
import { packShimAny, shimCodec, TASK_STATUS, timestampOf } from "../../../proto/shim_wire.ts";
import { abortable } from "./abortable.ts";
import { Container } from "./container.ts";
import {
  adoptProcess,
  carryContainer,
  type ContainerCarry,
  type ProcessCarry,
  stdioSettled,
} from "./carry.ts";
import type { ContainerRuntime } from "../runtime.ts";
import { createContainer } from "./create.ts";
import type { EventPublisher } from "./events.ts";
import { ExitRouter } from "./exits.ts";
import { SpawnedExits } from "./spawned.ts";
import type { Logger } from "../logger.ts";
import { resolveOptions } from "../options.ts";
import type { ShimPlatform } from "./platform.ts";
import type { ShimProcess } from "./process.ts";
import type { Shim } from "../shim.ts";
import type { TaskApiEndpoint } from "../endpoint.ts";

type TaskImpl = ServiceImpl<typeof Task>;
type Out<M extends keyof TaskImpl> = MessageInitShape<
  (typeof Task)["method"][M]["output"]
>;

/** containerd's identifier rule (`pkg/identifiers`): alphanumerics joined by `.`, `_`, `-`. */
const IDENTIFIER = /^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$/;

/** Validates a container or exec id; InvalidArgument naming the value otherwise. */
export function validateId(kind: string, id: string): void {
  if (id.length === 0 || id.length > 76 || !IDENTIFIER.test(id)) {
    throw statusError(
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
 * server.registerWire(TASK_SERVICE.typeName, wireMethods(TASK_SERVICE, svc.impl()), ...TASK_SERVICE_NAMES); // services.ts
 * ```
 */
export class TaskService<T extends object> {
  #d: TaskServiceDeps<T>;
  #containers = new Map<string, Container<T>>();
  #exits: ExitRouter;

  /** Creates the service and subscribes to exits. */
  constructor(deps: TaskServiceDeps<T>) {
    this.#d = deps;
    this.#exits = new ExitRouter({
      platform: deps.platform,
      events: deps.events,
      logger: deps.logger,
      containers: () => this.#containers.values(),
    });
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
    this.#exits.close();
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
    if (!c) throw statusError(`container "${id}" not found`, Code.NotFound);
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
      ...(p.exit ? { exitedAt: timestampOf(p.exit.exitedAt) } : {}),
      execId: p.execId,
    };
  }

  /** Creates a container: its options and runtime, then {@link createContainer}. */
  async create(r: CreateTaskRequest, ctx?: HandlerContext): Promise<Out<"create">> {
    validateId("container", r.id);
    if (this.#containers.has(r.id)) {
      throw statusError(`container "${r.id}" already exists`, Code.AlreadyExists);
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
    // A small file on Create's path: sync, without a thread-pool round trip.
    Deno.writeTextFileSync(`${r.bundle}/options.json`, JSON.stringify(resolved.options));

    const clog = logger.with({ id: r.id, namespace });
    const runtime = this.#runtimeFor(r.id, namespace, r.bundle, resolved.options, clog);
    if (r.checkpoint && !runtime.restore) {
      throw statusError(
        `restoring container "${r.id}" from checkpoint "${r.checkpoint}" is not supported`,
        Code.Unimplemented,
      );
    }
    const c = await createContainer<T>(r, {
      namespace,
      runtime,
      options: resolved.options,
      deps: { platform, events: this.#d.events, logger: clog, exits: this.#exits },
      list: (c) => this.#containers.set(c.id, c),
    });
    return { pid: c.init.pid };
  }

  #runtimeFor(
    id: string,
    namespace: string,
    bundle: string,
    options: T,
    logger: Logger,
  ): ContainerRuntime {
    const { shim, platform } = this.#d;
    // A process the runtime spawned itself and reported by pid gets its exit from Deno.
    const spawned = new SpawnedExits(
      (cmd) => platform.spawn(cmd),
      platform.unseenExit && ((pid) => platform.unseenExit!(pid)),
    );
    return spawned.wrap(shim.runtime({
      id,
      namespace,
      bundle,
      options,
      spawn: (cmd) => spawned.spawn(cmd),
      logger,
    }));
  }

  /**
   * True when a live upgrade may replace the process image now: no exit is being settled and
   * no stdio chunk is in hand.
   */
  get settled(): boolean {
    if (this.#exits.settling > 0 || !stdioSettled(this.#containers.values())) return false;
    for (const c of this.#containers.values()) if (c.runtime.settled === false) return false;
    return true;
  }

  /**
   * Every container's state for the next code (sdk/shim/upgrade).
   *
   * @throws {Error} when one cannot be carried now, saying why
   */
  carry(): ContainerCarry[] {
    return [...this.#containers.values()].map((c) =>
      carryContainer(c, (p) => this.#exits.reapedAside(p))
    );
  }

  /**
   * Continues the containers a live upgrade carried over: each with its runtime (from its
   * options, as create built it), processes, stdio and OOM watch; exits are routed to them
   * from now on.
   *
   * @param carried what the previous code handed over
   */
  async adopt(carried: readonly ContainerCarry[]): Promise<void> {
    const { platform, logger } = this.#d;
    for (const cc of carried) {
      const clog = logger.with({ id: cc.id, namespace: cc.namespace });
      const options = cc.options as T;
      const runtime = this.#runtimeFor(cc.id, cc.namespace, cc.bundle, options, clog);
      const c = new Container<T>({
        id: cc.id,
        namespace: cc.namespace,
        bundle: cc.bundle,
        runtime,
        process: adoptProcess(cc.id, cc.init, platform, runtime),
        options,
        deps: { platform, events: this.#d.events, logger: clog, exits: this.#exits },
      });
      for (const e of cc.execs) c.execs.set(e.execId, adoptProcess(cc.id, e, platform, runtime));
      this.#containers.set(c.id, c);
      await c.resume(cc.rootfsMounted);
      const pairs: [ShimProcess, ProcessCarry][] = [
        [c.init, cc.init],
        ...cc.execs.map((e): [ShimProcess, ProcessCarry] => [c.execs.get(e.execId)!, e]),
      ];
      for (const [p, carried] of pairs) {
        const r = carried.reaped;
        this.#exits.adopt(
          c,
          p,
          r && {
            pid: p.pid,
            status: r.status,
            exitedAt: new Date(r.exitedAt),
            ...(r.startTime !== undefined ? { startTime: r.startTime } : {}),
          },
        );
      }
    }
  }

  /** Starts the init process or an exec. */
  async start(r: StartRequest): Promise<Out<"start">> {
    return { pid: await this.#container(r.id).start(r.execId) };
  }

  /** Deletes an exec, or the container (init) with its rootfs and I/O. */
  async delete(r: DeleteRequest): Promise<Out<"delete">> {
    const c = this.#container(r.id);
    return await c.delete(r.execId, () => this.#containers.delete(c.id));
  }

  /** Pids of the container's processes; execs carry `containerd.runc.v1.ProcessDetails`. */
  async pids(r: PidsRequest): Promise<Out<"pids">> {
    const pids = await this.#container(r.id).pids();
    return {
      processes: pids.map(({ pid, execId }) =>
        execId
          ? { pid, info: packShimAny("containerd.runc.v1.ProcessDetails", { execId }) }
          : { pid }
      ),
    };
  }

  /** Freezes the container. */
  async pause(r: PauseRequest): Promise<Out<"pause">> {
    const c = this.#container(r.id);
    if (c.init.state !== "running") {
      throw statusError(
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
    this.#d.events.publish("/tasks/paused", "containerd.events.TaskPaused", { containerId: c.id });
    return {};
  }

  /** Thaws the container. */
  async resume(r: ResumeRequest): Promise<Out<"resume">> {
    const c = this.#container(r.id);
    if (c.init.state !== "paused") {
      throw statusError(
        `cannot resume container "${c.id}": it is ${c.init.state}`,
        Code.FailedPrecondition,
      );
    }
    await c.runtime.resume(c.id);
    c.init.setPaused("running");
    this.#d.events.publish("/tasks/resumed", "containerd.events.TaskResumed", {
      containerId: c.id,
    });
    return {};
  }

  /** Checkpoints the container (runc checkpoint; needs a working criu). */
  async checkpoint(r: CheckpointTaskRequest): Promise<Out<"checkpoint">> {
    const c = this.#container(r.id);
    if (c.init.state !== "running" && c.init.state !== "paused") {
      throw statusError(
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
    await this.#container(r.id).kill(r.execId, r.signal, r.all);
    return {};
  }

  /** Registers an exec (started later by Start); publishes `/tasks/exec-added`. */
  exec(r: ExecProcessRequest): Out<"exec"> {
    const c = this.#container(r.id);
    validateId("exec", r.execId);
    const stdio = { stdin: r.stdin, stdout: r.stdout, stderr: r.stderr, terminal: r.terminal };
    c.addExec(r.execId, stdio, () => decodeJsonAny(r.spec, "exec process spec"));
    return {};
  }

  /** Resizes a process's terminal. */
  async resizePty(r: ResizePtyRequest): Promise<Out<"resizePty">> {
    await this.#container(r.id).resize(r.execId, r.width, r.height);
    return {};
  }

  /** Closes a process's stdin. */
  async closeIO(r: CloseIORequest): Promise<Out<"closeIO">> {
    const c = this.#container(r.id);
    c.process(r.execId);
    if (r.stdin) await c.closeStdin(r.execId);
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
    return { exitStatus: exit.status, exitedAt: timestampOf(exit.exitedAt) };
  }

  /** Statistics of the container (its cgroup's, or its runtime's own). */
  async stats(r: StatsRequest): Promise<Out<"stats">> {
    return { stats: await this.#container(r.id).stats() };
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
}

/**
 * `containerd.v1.types.Status` by process state, from the generated value table (the generated
 * enum is a value in a descriptor module the server does not load).
 */
const STATUS: Record<ShimProcess["state"], Status> = {
  created: TASK_STATUS.CREATED as Status,
  running: TASK_STATUS.RUNNING as Status,
  stopped: TASK_STATUS.STOPPED as Status,
  paused: TASK_STATUS.PAUSED as Status,
  pausing: TASK_STATUS.PAUSING as Status,
};

function statusOf(p: ShimProcess): Status {
  return STATUS[p.state];
}

function decodeJsonAny(any: Any | undefined, what: string): unknown {
  if (!any || any.value.length === 0) return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(any.value));
  } catch (e) {
    throw statusError(
      `${what} of type "${any.typeUrl}" is not JSON: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

function decodeCheckpointOptions(any: Any) {
  try {
    return shimCodec("containerd.runc.v1.CheckpointOptions").decode(any.value);
  } catch (e) {
    throw statusError(
      `checkpoint options of type "${any.typeUrl}" do not decode: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}
