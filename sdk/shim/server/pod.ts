/**
 * One pod's server inside a shim server process: its socket, ttrpc server, services, event
 * publisher, log, extensions and shutdown. A process serves one pod (the default) or, shared
 * (`./sharing.ts`), several; what the process shares (reaper, platform) is passed in.
 *
 * @module
 */

import { exitWhenAbandoned } from "./abandoned.ts";
import { TtrpcServer } from "../../ttrpc/server.ts";
import type { Reaper } from "../../linux/reaper.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { EventPublisher } from "./events.ts";
import type { Shim } from "../shim.ts";
import { formatTaskApiEndpoint, type TaskApiEndpoint } from "../endpoint.ts";
import type { ServerExtension } from "./extension.ts";
import { composeExtensions } from "./compose.ts";
import { serverLogger } from "./server_logger.ts";
import { registerServices } from "./services.ts";
import type { SandboxCarry } from "./sandbox_service.ts";
import { serverShutdown } from "./shutdown.ts";
import {
  registerUpgradeService,
  resumeUpgrade,
  rollBackOnUncaught,
  rollBackUpgrade,
} from "./upgrade.ts";
import type { ContainerCarry } from "./carry.ts";
import { takeAccepted } from "./fd_conn.ts";
import type { UpgradeState } from "../contract/upgrade.ts";
import type { Logger } from "../logger.ts";
import { adoptChild } from "../../linux/adopted_child.ts";
import { setCloseOnExec } from "../../linux/descriptors.ts";
import type { ShimPlatform } from "./platform.ts";

/** What every pod of a process shares. */
export interface PodProcess<T extends object> {
  /** The runtime definition. */
  shim: Shim<T>;
  /** The process's reaper. */
  reaper: Reaper;
  /** Linux mechanics over that reaper. */
  platform: ShimPlatform;
  /** What plugs into each pod's server, in order. */
  extensions: readonly ServerExtension[];
  /** Why a live upgrade is refused here (a shared server's), when it is. */
  upgradeRefusal?: () => string | undefined;
  /** A pod has shut down (its socket is gone, its services closed). */
  ended(pod: ServedPod): void;
  /** Pods the process serves now. */
  pods(): number;
  /**
   * Asks for the process's idle trim (`idleTrim` of sdk/linux/memory_trim.ts): once after the
   * last of the pods that start in quick succession, not once per pod.
   */
  trimLater(): void;
  /** The most pods a shared server serves; unset for a server of one pod. */
  sharedPods?: number;
}

/** How one pod came to this process. */
export interface PodStart {
  /** The pod's server flags (`socket`: its socket). */
  flags: ShimFlags;
  /** The bundle `start` ran in. */
  bundle: string;
  /** The pod's socket path. */
  socket: string;
  /** "cold", "spare" (the process is an adopted spare) or "shared" (joined a shared server). */
  origin: "cold" | "spare" | "shared";
  /** The socket, already bound (an adopted spare's, a joined pod's). */
  listener?: Deno.UnixListener;
  /** How an adopted spare's or a joined pod's `start` came, for the log. */
  handoff?: "socket" | "door";
  /** Called once the socket accepts connections. */
  onListening?: () => Promise<void> | void;
  /** A live upgrade's state: this pod's server is the previous code's, taken back. */
  resumed?: UpgradeState;
  /** Fields for the `serving` line. */
  serving?: Record<string, unknown>;
}

/** A pod being served. */
export interface ServedPod {
  /** The id `start` was run for (the pod's sandbox, or its first container). */
  readonly id: string;
  /** Its socket. */
  readonly socket: string;
  /** Its log. */
  readonly logger: Logger;
  /** Containers and sandboxes served. */
  size(): number;
  /** Shuts the pod's server down (once). */
  shutdown(why: string): Promise<void>;
}

/**
 * Serves one pod; resolves once it serves. Throws when it cannot (a live upgrade's state this
 * code cannot take rolls back instead).
 *
 * @example Usage
 * ```ts ignore
 * const pod = await servePod(process, { flags, bundle, socket, origin: "cold" });
 * ```
 */
export async function servePod<T extends object>(
  proc: PodProcess<T>,
  start: PodStart,
): Promise<ServedPod> {
  const { shim, reaper, platform } = proc;
  const { flags, bundle, socket, resumed } = start;
  const logger = serverLogger(shim.runtimeName, flags, bundle);
  const endpoint: TaskApiEndpoint = {
    address: `unix://${socket}`,
    version: shim.taskApiVersion,
    protocol: "ttrpc",
  };
  const origin = start.origin;
  const setup = {
    shim,
    flags,
    logger,
    origin,
    socket,
    bundle,
    ...(proc.sharedPods ? { sharedPods: proc.sharedPods } : {}),
  };
  const hooks = await composeExtensions(proc.extensions, setup);
  const publisher = new EventPublisher({
    address: Deno.env.get("TTRPC_ADDRESS") ?? `${flags.address}.ttrpc`,
    namespace: flags.namespace,
    logger,
    onQueued: hooks.onEvent,
  });
  const server = new TtrpcServer({
    requireSameUser: true, // as the Go shims: only containerd's uid/gid may connect
    onError: (e) => logger.debug("ttrpc connection error", { error: String(e) }),
    interceptors: hooks.interceptors,
    // Every read of containerd's connections asked for by JS: a live upgrade hands them on.
    takeConnection: takeAccepted,
  });
  let services!: ReturnType<typeof registerServices<T>>;
  const pod: ServedPod = {
    id: flags.id,
    socket,
    logger,
    size: () => services ? services.tasks.containers.size + services.sandboxes() : 0,
    shutdown: (why) => shutdown(why),
  };
  let stopWatch = () => {};
  const shutdown = serverShutdown({
    logger,
    extensions: hooks.onShutdown,
    server,
    socket,
    publisher,
    release: () => (stopWatch(), services?.tasks.close()),
    ended: () => proc.ended(pod),
  });
  const deps = { shim, flags, logger, bundle, endpoint, socket, platform, events: publisher };
  const uncaught = resumed ? rollBackOnUncaught(resumed, logger) : undefined;
  try {
    if (resumed?.runtime) await adoptShimState(shim, resumed.runtime, logger, reaper);
    services = registerServices(server, {
      ...deps,
      shutdown: (why) => void shutdown(why),
      ...(resumed?.inheritedOptions != null
        ? { inheritedOptions: resumed.inheritedOptions as T }
        : {}),
      ...(resumed ? { carriedSandboxes: resumed.sandboxes as SandboxCarry[] } : {}),
    });
    if (resumed) await services.tasks.adopt(resumed.containers as ContainerCarry[]);
  } catch (e) {
    // This code cannot take what the previous one carried: that code takes it back.
    if (resumed) rollBackUpgrade(resumed, e, logger);
    throw e;
  }
  registerUpgradeService({
    flags,
    socket,
    bundle,
    server,
    tasks: services.tasks,
    publisher,
    carrySandboxes: services.carrySandboxes,
    inheritedOptions: services.options,
    logger,
    shim,
    ...(proc.upgradeRefusal ? { refusal: proc.upgradeRefusal } : {}),
    ending: () => shutdown.reason,
    ...(resumed ? { resumed } : {}),
  });

  // From here on the new code serves: there is no way back.
  uncaught?.();
  if (resumed) await resumeUpgrade(resumed, { server, logger }, reaper);
  else if (start.listener) void server.serve(start.listener);
  else await server.listen(socket);
  if (!resumed) await start.onListening?.();
  proc.trimLater(); // idle memory back to the kernel once the first requests are done
  await hooks.onServing({
    spawn: (cmd) => reaper.spawn(cmd),
    containers: () => services.tasks.containers,
    sandboxes: services.sandboxes,
    events: () => publisher.stats,
    options: services.options,
    pods: proc.pods,
  });
  stopWatch = exitWhenAbandoned({
    bundle,
    claimed: services.claimed,
    onAbandoned: () => void shutdown("abandoned: the bundle is gone and nothing was created"),
  });
  logger.info("serving", {
    id: flags.id,
    endpoint: formatTaskApiEndpoint(endpoint),
    pid: Deno.pid,
    origin: resumed ? "upgrade" : origin,
    ...(start.handoff && !resumed ? { handoff: start.handoff } : {}),
    ...start.serving,
  });
  return pod;
}

/** The shim's own carried state, back to its `adoptUpgrade` (before its containers). */
async function adoptShimState<T extends object>(
  shim: Shim<T>,
  carried: NonNullable<UpgradeState["runtime"]>,
  logger: Logger,
  reaper: Reaper,
): Promise<void> {
  if (!shim.adoptUpgrade) {
    throw new Error(
      `the previous code carried ${shim.runtimeName}'s own state, and this code has no adoptUpgrade to take it`,
    );
  }
  // Inherited without close-on-exec: the runtime's later children must not get them.
  for (const fd of Object.values(carried.descriptors ?? {})) setCloseOnExec(fd, true);
  await shim.adoptUpgrade({ ...carried }, {
    logger,
    adoptChild: (pid, startTime, exitCode) => adoptChild(pid, startTime, reaper, exitCode),
  });
}
