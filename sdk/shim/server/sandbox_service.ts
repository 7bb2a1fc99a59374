/**
 * The Sandbox API (`containerd.runtime.sandbox.v1.Sandbox`), served by the base class beside
 * the Task API on the same socket. containerd 2.x's `shim` sandboxer drives it: it runs the
 * shim's `start` for the sandbox, then CreateSandbox, StartSandbox, and later routes the pod's
 * containers to this shim's task-API endpoint (version 3: no per-container `start`).
 *
 * A runtime may supply a narrow `SandboxRuntime` hook (`sdk/shim/sandbox.ts`) for what it must do
 * to create, start and stop a sandbox (a VM runtime boots its VM there), and report the
 * sandbox's end (`SandboxStarted.exited`: a VM that dies is an exited sandbox); without one, the
 * sandbox is this shim process and its containers.
 *
 * @module
 */

import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type {
  CreateSandboxRequest,
  PingRequest,
  PlatformRequest,
  Sandbox,
  SandboxMetricsRequest,
  SandboxStatusRequest,
  ShutdownSandboxRequest,
  StartSandboxRequest,
  StopSandboxRequest,
  WaitSandboxRequest,
} from "../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import { Code, statusError } from "../../ttrpc/status_error.ts";
import { abortable } from "./abortable.ts";
import type { Logger } from "../logger.ts";
import { resolveOptions } from "../options.ts";
import type { ShimPlatform } from "./platform.ts";
import type { Shim } from "../shim.ts";
import type { SandboxContext, SandboxRuntime } from "../sandbox.ts";
import { validateId } from "./task_service.ts";
import type { TaskService } from "./task_service.ts";

type SandboxImpl = ServiceImpl<typeof Sandbox>;
type Out<M extends keyof SandboxImpl> = MessageInitShape<
  (typeof Sandbox)["method"][M]["output"]
>;

/** How long StopSandbox waits for a stopped runtime to report its sandbox's end. */
const EXIT_REPORT_MS = 30_000;

interface SandboxRecord<T> {
  ctx: SandboxContext<T>;
  /** The runtime's hook, asked once at CreateSandbox. */
  hook: SandboxRuntime<T> | undefined;
  state: "created" | "ready" | "stopped";
  /** The runtime's report of the sandbox's end (`SandboxStarted.exited`). */
  ends?: Promise<number>;
  stopping?: Promise<void>;
  pid: number;
  createdAt: Date;
  exit: PromiseWithResolvers<{ status: number; exitedAt: Date }>;
  exited?: { status: number; exitedAt: Date };
}

/** Dependencies of the Sandbox service. */
/**
 * One sandbox as a live upgrade hands it over (sdk/shim/server/upgrade.ts): its context (the
 * hook is made again from it), state, pid, times and exit.
 */
export interface SandboxCarry {
  /** The context's plain parts. */
  ctx: {
    id: string;
    namespace: string;
    bundle: string;
    netnsPath: string;
    annotations: Record<string, string>;
    options: unknown;
  };
  /** Its state. */
  state: "created" | "ready" | "stopped";
  /** Its pid (the shim's own when the runtime has no sandbox process). */
  pid: number;
  /** When it was created or started (ISO 8601). */
  createdAt: string;
  /** Once stopped: status and time (ISO 8601). */
  exited?: { status: number; exitedAt: string };
  /** Its end is the runtime's to report (`SandboxRuntime.resumeEnd` reports it again). */
  ends?: boolean;
}

export interface SandboxServiceDeps<T extends object> {
  /** The runtime definition (its optional `sandbox` hook). */
  shim: Shim<T>;
  /** The Task service of the same shim (a sandbox's containers live there). */
  tasks: TaskService<T>;
  /** OS mechanics (stats). */
  platform: ShimPlatform;
  /** Logger. */
  logger: Logger;
  /** Namespace from the command line. */
  namespace: string;
  /** Options the shim already has (from `start`). */
  inheritedOptions?: () => T | undefined;
  /** Makes these options the shim's options for containers created later. */
  adoptOptions?: (options: T) => void;
  /** Exits the shim when nothing is left to serve. */
  onShutdown: () => void;
}

/**
 * The Sandbox service implementation.
 *
 * @example Usage
 * ```ts ignore
 * const sandboxes = new SandboxService({ shim, tasks, platform, logger, namespace, onShutdown });
 * server.register(createServiceImplSpec(Sandbox, sandboxes.impl()), "containerd.runtime.sandbox.v1.Sandbox");
 * ```
 */
export class SandboxService<T extends object> {
  #d: SandboxServiceDeps<T>;
  #sandboxes = new Map<string, SandboxRecord<T>>();
  /** The sandbox whose CreateSandbox is under way (its runtime's `create` not yet done). */
  #creating: string | undefined;

  /** Creates the service. */
  constructor(deps: SandboxServiceDeps<T>) {
    this.#d = deps;
  }

  /** Number of sandboxes not yet shut down. */
  get size(): number {
    return this.#sandboxes.size;
  }

  /** The Connect implementation. */
  /**
   * Every sandbox's state for the next code.
   *
   * @throws {Error} when one cannot be carried now, saying why
   */
  carry(): SandboxCarry[] {
    return [...this.#sandboxes.values()].map((s) => {
      const id = s.ctx.id;
      if (s.stopping && !s.exited) throw new Error(`sandbox "${id}" is stopping`);
      const ends = s.ends !== undefined && !s.exited;
      if (ends && !s.hook?.resumeEnd) {
        throw new Error(
          `sandbox "${id}": its end is reported by the runtime's sandbox hook, which has no resumeEnd to report it again after an upgrade`,
        );
      }
      const { logger: _, ...ctx } = s.ctx;
      return {
        ctx: { ...ctx, annotations: { ...ctx.annotations } },
        state: s.state,
        pid: s.pid,
        createdAt: s.createdAt.toISOString(),
        ...(ends ? { ends: true } : {}),
        ...(s.exited
          ? { exited: { status: s.exited.status, exitedAt: s.exited.exitedAt.toISOString() } }
          : {}),
      };
    });
  }

  /**
   * Continues the sandboxes a live upgrade carried over; each one's hook is made again from its
   * context.
   *
   * @param carried what the previous code handed over
   */
  adopt(carried: readonly SandboxCarry[]): void {
    for (const c of carried) {
      const ctx: SandboxContext<T> = {
        ...c.ctx,
        options: c.ctx.options as T,
        logger: this.#d.logger.with({ sandbox: c.ctx.id }),
      };
      const exit = Promise.withResolvers<{ status: number; exitedAt: Date }>();
      const exited = c.exited
        ? { status: c.exited.status, exitedAt: new Date(c.exited.exitedAt) }
        : undefined;
      if (exited) exit.resolve(exited);
      const hook = this.#d.shim.sandbox?.(ctx);
      const s: SandboxRecord<T> = {
        ctx,
        hook,
        state: c.state,
        pid: c.pid,
        createdAt: new Date(c.createdAt),
        exit,
        ...(exited ? { exited } : {}),
      };
      this.#sandboxes.set(c.ctx.id, s);
      if (c.ends && !exited) {
        if (!hook?.resumeEnd) {
          throw new Error(`sandbox "${c.ctx.id}": this code's sandbox hook has no resumeEnd`);
        }
        this.#watchEnd(s, hook.resumeEnd(ctx));
      }
    }
  }

  impl(): SandboxImpl {
    return {
      createSandbox: (r, c) => this.createSandbox(r, c),
      startSandbox: (r) => this.startSandbox(r),
      platform: (r) => this.platform(r),
      stopSandbox: (r) => this.stopSandbox(r),
      waitSandbox: (r, c) => this.waitSandbox(r, c),
      sandboxStatus: (r) => this.sandboxStatus(r),
      pingSandbox: (r) => this.pingSandbox(r),
      shutdownSandbox: (r) => this.shutdownSandbox(r),
      sandboxMetrics: (r) => this.sandboxMetrics(r),
    };
  }

  #get(id: string): SandboxRecord<T> {
    const s = this.#sandboxes.get(id);
    if (!s) throw statusError(`sandbox "${id}" not found`, Code.NotFound);
    return s;
  }

  /**
   * Records the sandbox and runs the hook's `create`. A shim hosts one sandbox: containerd's
   * `shim` sandboxer starts a shim for each sandbox id and creates that sandbox on it, so a
   * second CreateSandbox, of the same id or another, is `AlreadyExists` (containerd's shimtest,
   * CreateTwiceRejected). "A shim" is this service: one per socket, so a shared server's pods
   * (sdk/shim/server/pod.ts), each with its own services, hold one sandbox each.
   */
  async createSandbox(r: CreateSandboxRequest, c?: HandlerContext): Promise<Out<"createSandbox">> {
    validateId("sandbox", r.sandboxId);
    const held = this.#creating ?? this.#sandboxes.keys().next().value;
    if (held === r.sandboxId) {
      throw statusError(`sandbox "${r.sandboxId}" already exists`, Code.AlreadyExists);
    }
    if (held !== undefined) {
      throw statusError(
        `cannot create sandbox "${r.sandboxId}": this shim already hosts sandbox "${held}" (one sandbox per shim)`,
        Code.AlreadyExists,
      );
    }
    // Held from here, across the runtime's `create`: a concurrent CreateSandbox is refused too.
    this.#creating = r.sandboxId;
    try {
      await this.#create(r, c);
    } finally {
      this.#creating = undefined;
    }
    return {};
  }

  async #create(r: CreateSandboxRequest, c?: HandlerContext): Promise<void> {
    const { shim, logger } = this.#d;
    const namespace = c?.requestHeader.get("containerd-namespace-ttrpc") || this.#d.namespace;
    // CRI puts its PodSandboxConfig here; only an options type the runtime accepts counts.
    let options = this.#d.inheritedOptions?.() ?? (shim.options.defaults() as T);
    try {
      const resolved = resolveOptions(shim.options, r.options, options, shim.runtimeName);
      if (resolved.fromCarrier) options = resolved.options;
    } catch {
      logger.debug("sandbox options are not runtime options", {
        id: r.sandboxId,
        type: r.options?.typeUrl ?? "",
      });
    }
    this.#d.adoptOptions?.(options);
    const ctx: SandboxContext<T> = {
      id: r.sandboxId,
      namespace,
      bundle: r.bundlePath,
      netnsPath: r.netnsPath,
      annotations: { ...r.annotations },
      options,
      logger: logger.with({ sandbox: r.sandboxId }),
    };
    const hook = shim.sandbox?.(ctx);
    await hook?.create?.(ctx);
    this.#sandboxes.set(r.sandboxId, {
      ctx,
      hook,
      state: "created",
      pid: 0,
      createdAt: new Date(),
      exit: Promise.withResolvers(),
    });
    ctx.logger.info("sandbox created");
  }

  /** Starts the sandbox. */
  async startSandbox(r: StartSandboxRequest): Promise<Out<"startSandbox">> {
    const s = this.#sandboxes.get(r.sandboxId);
    if (!s) {
      // Not NotFound: CreateSandbox comes first, and this shim is not in that state yet
      // (containerd's shimtest, StartWithoutCreateRejected).
      const why = this.#creating === r.sandboxId
        ? "its CreateSandbox has not finished"
        : "CreateSandbox was not called for it";
      const held = this.#sandboxes.keys().next().value;
      throw statusError(
        `cannot start sandbox "${r.sandboxId}": ${why}${
          held === undefined ? "" : ` (this shim hosts sandbox "${held}")`
        }`,
        Code.FailedPrecondition,
      );
    }
    if (s.state !== "created") {
      throw statusError(
        `cannot start sandbox "${r.sandboxId}": it is ${s.state}`,
        Code.FailedPrecondition,
      );
    }
    const started = await s.hook?.start?.(s.ctx);
    s.pid = started?.pid ?? Deno.pid;
    s.state = "ready";
    s.createdAt = new Date();
    if (started?.exited) this.#watchEnd(s, started.exited);
    return { pid: s.pid, createdAt: timestampFromDate(s.createdAt) };
  }

  /** The platform the sandbox runs containers for. */
  platform(r: PlatformRequest): Out<"platform"> {
    this.#get(r.sandboxId);
    return {
      platform: {
        os: Deno.build.os,
        architecture: Deno.build.arch === "x86_64" ? "amd64" : "arm64",
      },
    };
  }

  /** Kills the sandbox's containers and stops it. */
  async stopSandbox(r: StopSandboxRequest): Promise<Out<"stopSandbox">> {
    const s = this.#get(r.sandboxId);
    s.stopping ??= this.#stop(s, (r.timeoutSecs || 10) * 1000);
    await s.stopping;
    return {};
  }

  async #stop(s: SandboxRecord<T>, graceMs: number): Promise<void> {
    if (s.state === "stopped") return;
    await this.#d.tasks.killAll(graceMs);
    if (!s.exited) await s.hook?.stop?.(s.ctx);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const status = await Promise.race([
      s.ends?.catch(() => 255) ?? 0,
      new Promise<number>((r) => timer = setTimeout(() => r(255), EXIT_REPORT_MS)),
    ]).finally(() => clearTimeout(timer));
    this.#ended(s, status);
  }

  /** Takes the runtime's report of the sandbox's end. */
  #watchEnd(s: SandboxRecord<T>, ends: Promise<number>): void {
    s.ends = ends;
    ends.then((status) => this.#ended(s, status), (e) => {
      s.ctx.logger.warn("sandbox ended with an error", { error: String(e) });
      this.#ended(s, 255);
    });
  }

  /** The sandbox has ended (stopped, or died on its own): Wait returns, Status says so. */
  #ended(s: SandboxRecord<T>, status: number): void {
    if (s.exited) return;
    s.state = "stopped";
    s.exited = { status, exitedAt: new Date() };
    s.exit.resolve(s.exited);
    s.ctx.logger.info("sandbox stopped", { status });
  }

  /** Blocks until the sandbox has stopped. */
  async waitSandbox(r: WaitSandboxRequest, c?: HandlerContext): Promise<Out<"waitSandbox">> {
    const s = this.#get(r.sandboxId);
    const exit = await abortable(s.exit.promise, c?.signal);
    return { exitStatus: exit.status, exitedAt: timestampFromDate(exit.exitedAt) };
  }

  /**
   * The sandbox's state, as CRI names it. The verbose info (CRI passes it through as
   * PodSandboxStatus's info, asked for only when verbose) also carries the pid (decimal) and the
   * state, which containerd's shimtest requires there (StatusReportsPidAndCreatedAt).
   */
  sandboxStatus(r: SandboxStatusRequest): Out<"sandboxStatus"> {
    const s = this.#get(r.sandboxId);
    const state = s.state === "ready" ? "SANDBOX_READY" : "SANDBOX_NOTREADY";
    return {
      sandboxId: r.sandboxId,
      pid: s.pid,
      state,
      info: r.verbose
        ? {
          runtime: this.#d.shim.runtimeName,
          bundle: s.ctx.bundle,
          pid: String(s.pid),
          state,
        }
        : {},
      createdAt: timestampFromDate(s.createdAt),
      ...(s.exited ? { exitedAt: timestampFromDate(s.exited.exitedAt) } : {}),
    };
  }

  /** Liveness probe. */
  pingSandbox(r: PingRequest): Out<"pingSandbox"> {
    this.#get(r.sandboxId);
    return {};
  }

  /**
   * Forgets the sandbox, stopping it first if it is not stopped (containerd shuts down a
   * sandbox whose start failed without stopping it); the shim exits when nothing is left.
   */
  async shutdownSandbox(r: ShutdownSandboxRequest): Promise<Out<"shutdownSandbox">> {
    const s = this.#get(r.sandboxId);
    s.stopping ??= this.#stop(s, 10_000);
    await s.stopping;
    this.#sandboxes.delete(r.sandboxId);
    if (this.#sandboxes.size === 0 && this.#d.tasks.containers.size === 0) this.#d.onShutdown();
    return {};
  }

  /** cgroup statistics of the sandbox process. */
  async sandboxMetrics(r: SandboxMetricsRequest): Promise<Out<"sandboxMetrics">> {
    const s = this.#get(r.sandboxId);
    if (s.state !== "ready") {
      throw statusError(`sandbox "${r.sandboxId}" is not running`, Code.FailedPrecondition);
    }
    try {
      return {
        metrics: {
          timestamp: timestampFromDate(new Date()),
          id: r.sandboxId,
          data: await this.#d.platform.stats(s.pid),
        },
      };
    } catch (e) {
      throw statusError(
        `metrics of sandbox "${r.sandboxId}": ${(e as Error).message}`,
        Code.NotFound,
      );
    }
  }
}
