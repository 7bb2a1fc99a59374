/**
 * The long-running shim server: becomes the child subreaper, logs to the bundle's `log` FIFO,
 * serves the Task API (v2 and v3 names) over ttrpc, publishes events to containerd, and exits
 * on Shutdown (when no container is left) or SIGTERM.
 *
 * @module
 */

import { createServiceImplSpec } from "@connectrpc/connect";
import { Task as TaskV2 } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import type { Sandbox } from "../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import type { SandboxService } from "./sandbox_service.ts";
import { exitWhenAbandoned } from "./abandoned.ts";
import { O, open } from "../../linux/libc.ts";
import { FdStream } from "../../linux/fd_stream.ts";
import { TtrpcServer } from "../../ttrpc/server.ts";
import { Reaper } from "../../linux/reaper.ts";
import type { ShimFlags } from "../boot/flags.ts";
import { EventPublisher } from "./events.ts";
import { Logger } from "../logger.ts";
import type { Shim } from "../shim.ts";
import { linuxPlatform } from "./linux_platform.ts";
import { TaskService } from "./task_service.ts";
import { shimSocketAddress, socketPath } from "../boot/socket_address.ts";
import { groupKey } from "../boot/server_socket.ts";
import { formatTaskApiEndpoint, type TaskApiEndpoint } from "../endpoint.ts";
import { loadShimOps } from "../../ops/load.ts";
import { loadSpareConfig } from "../spare/config.ts";
import { spawnSpare } from "../spare/spawn.ts";
import { countServerStart } from "../spare/stats.ts";
import { trimMemoryLater } from "../../linux/memory_trim.ts";

/** Service names the Task implementation is registered under. */
export const TASK_SERVICE_NAMES: readonly string[] = [
  "containerd.task.v2.Task",
  "containerd.task.v3.Task",
];

/**
 * Opens the bundle's `log` FIFO for writing, without blocking. containerd holds it open for
 * reading before it runs the shim; when nobody does (a shim run by hand, or containerd died while
 * `start` was running), lines go nowhere instead of the server hanging in `open` for good, where
 * it could never notice that it was abandoned.
 */
export function openLogSink(path: string): ((line: string) => void) | undefined {
  let stream: FdStream;
  try {
    stream = new FdStream(open(path, O.WRONLY | O.NONBLOCK), `log fifo "${path}"`);
  } catch {
    return undefined; // ENXIO (no reader), ENOENT (no FIFO)
  }
  const enc = new TextEncoder();
  let pending = 0;
  let chain = Promise.resolve();
  return (line: string) => {
    // A stalled reader must not make the shim buffer without bound.
    if (pending > 1000) return;
    pending++;
    chain = chain.then(async () => {
      try {
        await stream.write(enc.encode(line));
      } catch { /* reader gone */ }
      pending--;
    });
  };
}

/** How a server came to run, for {@linkcode serveShim}. */
export interface ServeOptions {
  /** "cold" (spawned by `start`, the default) or "spare" (a warm spare adopted by `start`). */
  origin?: "cold" | "spare";
  /** Called once the socket accepts connections (a spare answers its `start` then). */
  onListening?: () => Promise<void> | void;
  /**
   * containerd's process (`<pid>:<start time>`), which the next warm spare watches. Default:
   * `SKIFF_SPARE_DAEMON` from the environment `start` gave a cold server.
   */
  daemon?: string;
  /** A reaper already started (a spare starts its own while it waits). Default: a new one. */
  reaper?: Reaper;
  /**
   * The container's socket, already bound at `-socket` (an adopted spare binds it before it
   * answers its `start`). Default: the server binds it.
   */
  listener?: Deno.UnixListener;
}

/**
 * Runs the server until it shuts down. Never returns normally: the process exits.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(new RuncShim(), parseShimFlags(Deno.args));
 * ```
 */
export async function serveShim<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  options: ServeOptions = {},
): Promise<void> {
  const bundle = Deno.cwd();
  // Ours, not the environment containerd gave: the runtime's processes must not see it.
  const daemon = options.daemon ?? Deno.env.get("SKIFF_SPARE_DAEMON") ?? "";
  Deno.env.delete("SKIFF_SPARE_DAEMON");
  // Leave the bundle: containerd removes it when that container is deleted, while a shim that
  // serves a group of containers lives on, and Deno cannot spawn runc from a deleted cwd
  // ("failed resolving cwd"). Everything below uses absolute paths.
  Deno.chdir("/");
  const logger = new Logger({
    level: flags.debug ? "debug" : "info",
    fields: { runtime: shim.runtimeName, namespace: flags.namespace },
  });
  const sink = openLogSink(`${bundle}/log`);
  if (sink) logger.setSink(sink);
  if (Deno.env.get("SKIFF_LOG_FORMAT") === "json") logger.setFormat("json");

  // ---- ops (sdk/ops): metrics, debug endpoint and per-RPC debug log. On with -debug or
  // SKIFF_OPS=1; its modules are imported only then, so a plain shim loads none of them.
  // Its hooks are the `ops?.` lines below; `ops` is undefined when everything is off.
  const ops = await loadShimOps({
    flags,
    logger,
    runtime: shim.runtimeName,
    version: shim.version,
  });
  // ---- end ops

  // A shim outlives any one call: a stray rejection is a bug to log, not a reason to take every
  // container's stdio and exit reporting down with the process.
  globalThis.addEventListener("unhandledrejection", (e) => {
    e.preventDefault();
    logger.error("unhandled rejection", { error: String(e.reason?.stack ?? e.reason) });
  });

  const reaper = options.reaper ?? Reaper.start();
  const platform = linuxPlatform(reaper);
  const publisher = new EventPublisher({
    address: Deno.env.get("TTRPC_ADDRESS") ?? `${flags.address}.ttrpc`,
    namespace: flags.namespace,
    logger,
    onQueued: ops?.onQueued,
  });
  let inherited: T | undefined;
  try {
    inherited = JSON.parse(Deno.readTextFileSync(`${bundle}/options.json`)) as T;
  } catch { /* start had no options */ }

  // The endpoint this shim serves; containers routed here by a sandbox must name it.
  const path = flags.socket ||
    socketPath(shimSocketAddress(flags.address, flags.namespace, groupKey(bundle, flags.id)));
  const endpoint: TaskApiEndpoint = {
    address: `unix://${path}`,
    version: shim.taskApiVersion,
    protocol: "ttrpc",
  };

  const server = new TtrpcServer({
    // Like the Go shims: only processes of our own uid/gid (containerd) may connect.
    requireSameUser: true,
    onError: (e) => logger.debug("ttrpc connection error", { error: String(e) }),
    interceptors: ops?.interceptors,
  });
  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    logger.info("shutting down", { reason: why });
    await ops?.close().catch(() => {});
    await server.close({ timeoutMs: 5_000 }).catch(() => {});
    try {
      Deno.removeSync(path); // a listener handed over is not the server's to remove
    } catch { /* removed */ }
    await publisher.close(3_000).catch(() => {});
    tasks.close();
    reaper.close();
    Deno.exit(0);
  };
  const tasks = new TaskService<T>({
    shim,
    platform,
    events: publisher,
    logger,
    namespace: flags.namespace,
    inheritedOptions: () => inherited,
    onEndpoint: (handed, id) => {
      if (handed.address !== endpoint.address) {
        logger.warn("containerd handed over a task API endpoint that is not this shim's", {
          id,
          endpoint: formatTaskApiEndpoint(handed),
          served: formatTaskApiEndpoint(endpoint),
        });
      }
    },
    onShutdown: () => {
      if ((sandboxes?.size ?? 0) !== 0) return;
      // Gone before Shutdown answers: containerd runs the `delete` action as soon as the
      // connection closes, and a launcher answers it without deno only when no socket is left.
      try {
        Deno.removeSync(path);
      } catch { /* already gone */ }
      setTimeout(() => void shutdown("Shutdown"), 0);
    },
  });
  server.register(
    createServiceImplSpec<typeof TaskV2>(TaskV2, tasks.impl()),
    ...TASK_SERVICE_NAMES,
  );
  // The Sandbox API (its service code and descriptors) is loaded on its first call: containerd
  // 1.6/1.7 and plain `ctr run` never make one, so most shims never pay for it.
  let sandboxes: SandboxService<T> | undefined;
  server.registerLazy(async () => {
    const [{ Sandbox }, { SandboxService }] = await Promise.all([
      import("../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts"),
      import("./sandbox_service.ts"),
    ]);
    sandboxes = new SandboxService<T>({
      shim,
      tasks,
      platform,
      logger,
      namespace: flags.namespace,
      inheritedOptions: () => inherited,
      adoptOptions: (o) => inherited = o,
      onShutdown: () => setTimeout(() => void shutdown("ShutdownSandbox"), 0),
    });
    return createServiceImplSpec<typeof Sandbox>(Sandbox, sandboxes.impl());
  }, "containerd.runtime.sandbox.v1.Sandbox");

  if (options.listener) void server.serve(options.listener);
  else await server.listen(path);
  await options.onListening?.();
  trimMemoryLater(); // idle memory back to the kernel once the first requests are done
  // The next container's warm spare, spawned from here rather than by `start`, which then
  // answers containerd sooner; it loads at low priority while this container is created.
  const spare = await loadSpareConfig(flags.address, path.slice(0, path.lastIndexOf("/")) || "/");
  if (spare) {
    setTimeout(() => {
      try {
        spawnSpare(spare, flags.address, flags.publishBinary, daemon, (c) => reaper.spawn(c));
      } catch (e) {
        logger.debug("no next spare", { error: (e as Error).message });
      }
    }, 0);
  }
  const origin = options.origin ?? "cold";
  // Node-wide counters of spares adopted and cold starts (when spares are on, for a containerd
  // that exists: a server run by hand or by a test harness leaves no counters behind).
  let daemonExists = false;
  try {
    daemonExists = Deno.statSync(flags.address.replace(/^unix:\/\//, "")) !== undefined;
  } catch { /* no containerd socket */ }
  const spareStats = daemonExists ? spare?.stats : undefined;
  if (spareStats) void countServerStart(spareStats, origin).catch(() => {});
  await ops?.attach({
    origin,
    spareStats,
    socket: path,
    bundle,
    containers: () => tasks.containers,
    sandboxes: () => sandboxes?.size ?? 0,
    events: () => publisher.stats,
    options: () => inherited,
  });
  Deno.addSignalListener("SIGTERM", () => void shutdown("SIGTERM"));
  Deno.addSignalListener("SIGINT", () => void shutdown("SIGINT"));
  exitWhenAbandoned({
    bundle,
    claimed: () => tasks.containers.size > 0 || (sandboxes?.size ?? 0) > 0,
    onAbandoned: () => void shutdown("abandoned: the bundle is gone and nothing was created"),
  });
  logger.info("serving", {
    id: flags.id,
    endpoint: formatTaskApiEndpoint(endpoint),
    pid: Deno.pid,
    origin,
  });
  await server.closed;
}
