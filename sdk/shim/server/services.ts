/**
 * The services a shim server registers on its ttrpc server: the Task API under its v2 and v3
 * names, and the Sandbox API, whose code and descriptors are loaded on its first call
 * (containerd 1.6/1.7 and plain `ctr run` never make one, so most shims never pay for it).
 *
 * @module
 */

import type { HandlerContext } from "@connectrpc/connect";
import type { Sandbox } from "../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import { shimCodec, type ShimWireTypes, TASK_SERVICE } from "../../../proto/shim_wire.ts";
import type { TtrpcServer, WireMethod } from "../../ttrpc/server.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { formatTaskApiEndpoint, type TaskApiEndpoint } from "../endpoint.ts";
import type { Logger } from "../logger.ts";
import type { Shim } from "../shim.ts";
import type { EventPublisher } from "./events.ts";
import type { ShimPlatform } from "./platform.ts";
import type { SandboxCarry, SandboxService } from "./sandbox_service.ts";
import { TaskService } from "./task_service.ts";

/** Service names the Task implementation is registered under. */
export const TASK_SERVICE_NAMES: readonly string[] = [
  "containerd.task.v2.Task",
  "containerd.task.v3.Task",
];

/** What {@linkcode registerServices} needs. */
export interface ServicesDeps<T extends object> {
  /** The runtime definition. */
  shim: Shim<T>;
  /** containerd's flags. */
  flags: ShimFlags;
  /** The server's logger. */
  logger: Logger;
  /** The bundle the server was started in (its `options.json` holds `start`'s options). */
  bundle: string;
  /** The endpoint this server serves; containers routed here by a sandbox must name it. */
  endpoint: TaskApiEndpoint;
  /** The ttrpc socket (removed before Shutdown answers). */
  socket: string;
  /** Linux mechanics. */
  platform: ShimPlatform;
  /** The event publisher. */
  events: EventPublisher;
  /**
   * Ends the server (Shutdown with nothing left, or ShutdownSandbox): marked at once, run after
   * the call's answer is written.
   */
  shutdown(why: string): void;
  /** The options `start` handed over, when known already (a live upgrade carries them). */
  inheritedOptions?: T;
  /** Sandboxes a live upgrade carried over, taken back when the Sandbox API first loads. */
  carriedSandboxes?: readonly SandboxCarry[];
}

/** The registered services, as the server reads them. */
export interface Services<T extends object> {
  /** The Task service. */
  tasks: TaskService<T>;
  /** How many sandboxes are served (0 until the Sandbox API is first called). */
  sandboxes(): number;
  /** The sandboxes' state for a live upgrade; throws saying why one cannot be carried. */
  carrySandboxes(): SandboxCarry[];
  /** Shim-wide runtime options (from `start` or a sandbox), if any. */
  options(): T | undefined;
  /** Whether anything was ever created here (a container or a sandbox). */
  claimed(): boolean;
}

/**
 * Registers the Task API and (lazily) the Sandbox API on `server`.
 *
 * @example Usage
 * ```ts ignore
 * const services = registerServices(server, { shim, flags, logger, bundle, endpoint, socket, platform, events, shutdown });
 * ```
 */
export function registerServices<T extends object>(
  server: TtrpcServer,
  d: ServicesDeps<T>,
): Services<T> {
  let inherited: T | undefined = d.inheritedOptions;
  if (inherited === undefined) {
    try {
      inherited = JSON.parse(Deno.readTextFileSync(`${d.bundle}/options.json`)) as T;
    } catch { /* start had no options */ }
  }
  let sandboxes: SandboxService<T> | undefined;
  // Carried sandboxes count before the Sandbox API is loaded (by their first call).
  const carried = d.carriedSandboxes ?? [];
  const sandboxCount = () => sandboxes?.size ?? carried.length;
  const tasks = new TaskService<T>({
    shim: d.shim,
    platform: d.platform,
    events: d.events,
    logger: d.logger,
    namespace: d.flags.namespace,
    inheritedOptions: () => inherited,
    onEndpoint: (handed, id) => {
      if (handed.address !== d.endpoint.address) {
        d.logger.warn("containerd handed over a task API endpoint that is not this shim's", {
          id,
          endpoint: formatTaskApiEndpoint(handed),
          served: formatTaskApiEndpoint(d.endpoint),
        });
      }
    },
    onShutdown: () => {
      if (sandboxCount() !== 0) return;
      // Gone before Shutdown answers: containerd runs the `delete` action as soon as the
      // connection closes, and a launcher answers it without deno only when no socket is left.
      try {
        Deno.removeSync(d.socket);
      } catch { /* already gone */ }
      d.shutdown("Shutdown");
    },
  });
  // The Task API from wire codecs: a cold server evaluates no protobuf-es descriptor.
  server.registerWire(
    TASK_SERVICE.typeName,
    wireMethods(TASK_SERVICE, tasks.impl()),
    ...TASK_SERVICE_NAMES,
  );
  server.registerLazy(async () => {
    const [{ Sandbox }, { SandboxService }, { createServiceImplSpec }] = await Promise.all([
      import("../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts"),
      import("./sandbox_service.ts"),
      import("@connectrpc/connect"),
    ]);
    sandboxes = new SandboxService<T>({
      shim: d.shim,
      tasks,
      platform: d.platform,
      logger: d.logger,
      namespace: d.flags.namespace,
      inheritedOptions: () => inherited,
      adoptOptions: (o) => inherited = o,
      onShutdown: () => d.shutdown("ShutdownSandbox"),
    });
    sandboxes.adopt(carried);
    return createServiceImplSpec<typeof Sandbox>(Sandbox, sandboxes.impl());
  }, "containerd.runtime.sandbox.v1.Sandbox");
  return {
    tasks,
    sandboxes: sandboxCount,
    carrySandboxes: () => sandboxes?.carry() ?? [...carried],
    options: () => inherited,
    claimed: () => tasks.containers.size > 0 || sandboxCount() > 0,
  };
}

/** A service of the wire tables (`TASK_SERVICE`, `EVENTS_SERVICE`): its methods by local name. */
type WireService = { methods: Record<string, { name: string; input: string; output: string }> };

/**
 * A service's methods, each with its codecs and its handler in `impl` (by local name, as
 * Connect's `ServiceImpl` has them).
 *
 * @example Usage
 * ```ts ignore
 * server.registerWire(TASK_SERVICE.typeName, wireMethods(TASK_SERVICE, tasks.impl()), ...TASK_SERVICE_NAMES);
 * ```
 */
export function wireMethods<S extends WireService>(
  service: S,
  impl: { [K in keyof S["methods"]]: (request: never, context: HandlerContext) => unknown },
): WireMethod[] {
  return Object.entries(service.methods).map(([local, m]) => {
    const handler = impl[local as keyof S["methods"]];
    return {
      name: m.name,
      input: shimCodec(m.input as keyof ShimWireTypes),
      output: shimCodec(m.output as keyof ShimWireTypes),
      impl: (request, context) => handler(request as never, context),
    };
  });
}
