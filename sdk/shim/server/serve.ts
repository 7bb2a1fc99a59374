/**
 * The long-running shim server: composes the Linux platform, the services and the extensions
 * (`./extension.ts`: the operations endpoint, the warm spare) and serves until it shuts down.
 *
 * @module
 */

import { exitWhenAbandoned } from "./abandoned.ts";
import { TtrpcServer } from "../../ttrpc/server.ts";
import { Reaper } from "../../linux/reaper.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { EventPublisher } from "./events.ts";
import type { Shim } from "../shim.ts";
import { linuxPlatform } from "./linux_platform.ts";
import { shimSocketAddress, socketPath } from "../contract/socket_address.ts";
import { groupKey } from "../contract/server_socket.ts";
import { formatTaskApiEndpoint, type TaskApiEndpoint } from "../endpoint.ts";
import { trimMemoryLater } from "../../linux/memory_trim.ts";
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
  takeUpgradeState,
} from "./upgrade.ts";
import type { ContainerCarry } from "./carry.ts";
import { takeAccepted } from "./fd_conn.ts";
import type { UpgradeState } from "../contract/upgrade.ts";
import type { Logger } from "../logger.ts";
import { adoptChild } from "../../linux/adopted_child.ts";
import { setCloseOnExec } from "../../linux/descriptors.ts";

/** How a server came to run, for {@linkcode serveShim}. */
export interface ServeOptions {
  /** "cold" (spawned by `start`, the default) or "spare" (a warm spare adopted by `start`). */
  origin?: "cold" | "spare";
  /** What plugs into the server, in order (`runShim` passes the spare and ops). */
  extensions?: readonly ServerExtension[];
  /** Called once the socket accepts connections (a spare answers its `start` then). */
  onListening?: () => Promise<void> | void;
  /** A reaper already started (a spare starts its own while it waits). Default: a new one. */
  reaper?: Reaper;
  /** The container's socket, already bound at `-socket` (by an adopted spare). */
  listener?: Deno.UnixListener;
  /**
   * How an adopted spare's `start` reached it, for the log: "socket" (Deno's `start`) or "door"
   * (the launcher's shell, no Deno `start`: sdk/shim/spare/door.ts).
   */
  handoff?: "socket" | "door";
}

/**
 * Runs the server until it shuts down. Never returns normally: the process exits.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(new RuncShim(), parseShimFlags(Deno.args), { extensions });
 * ```
 */
export async function serveShim<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  options: ServeOptions = {},
): Promise<void> {
  // A live upgrade's new code: the state the old code left (sdk/shim/server/upgrade.ts).
  const resumed = takeUpgradeState();
  const bundle = resumed?.bundle ?? Deno.cwd();
  // Leave the bundle: containerd removes it when that container is deleted, while a shim that
  // serves a group of containers lives on, and Deno cannot spawn runc from a deleted cwd.
  Deno.chdir("/");
  const logger = serverLogger(shim.runtimeName, flags, bundle);
  const socket = flags.socket ||
    socketPath(shimSocketAddress(flags.address, flags.namespace, groupKey(bundle, flags.id)));
  const endpoint: TaskApiEndpoint = {
    address: `unix://${socket}`,
    version: shim.taskApiVersion,
    protocol: "ttrpc",
  };
  const origin = options.origin ?? "cold";
  const setup = { shim, flags, logger, origin, socket, bundle };
  const hooks = await composeExtensions(options.extensions ?? [], setup);
  // After an upgrade, the exits of the window wait as zombies until their processes are known.
  const reaper = options.reaper ?? Reaper.start({ held: resumed !== undefined });
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
  const platform = linuxPlatform(reaper);
  const shutdown = serverShutdown({
    logger,
    extensions: hooks.onShutdown,
    server,
    socket,
    publisher,
    release: () => (services.tasks.close(), reaper.close()),
  });
  const deps = { shim, flags, logger, bundle, endpoint, socket, platform, events: publisher };
  let services!: ReturnType<typeof registerServices<T>>;
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
    ...(resumed ? { resumed } : {}),
  });

  // From here on the new code serves: there is no way back.
  uncaught?.();
  if (resumed) await resumeUpgrade(resumed, { server, logger }, reaper);
  else if (options.listener) void server.serve(options.listener);
  else await server.listen(socket);
  if (!resumed) await options.onListening?.();
  trimMemoryLater(); // idle memory back to the kernel once the first requests are done
  await hooks.onServing({
    spawn: (cmd) => reaper.spawn(cmd),
    containers: () => services.tasks.containers,
    sandboxes: services.sandboxes,
    events: () => publisher.stats,
    options: services.options,
  });
  exitWhenAbandoned({
    bundle,
    claimed: services.claimed,
    onAbandoned: () => void shutdown("abandoned: the bundle is gone and nothing was created"),
  });
  const served = formatTaskApiEndpoint(endpoint);
  logger.info("serving", {
    id: flags.id,
    endpoint: served,
    pid: Deno.pid,
    origin: resumed ? "upgrade" : origin,
    ...(options.handoff && !resumed ? { handoff: options.handoff } : {}),
  });
  await server.closed;
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
