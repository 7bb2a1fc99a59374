/**
 * The seam between the shim server and its operations features. This module has no runtime
 * imports, so the server can import it statically; everything else (the metrics, the Hono
 * endpoint) is imported by {@linkcode loadShimOps} only when it is switched on, so `start`,
 * `delete` and a shim without it load none of it.
 *
 * @module
 */

import type { Interceptor } from "@connectrpc/connect";
import type { PublisherStats, QueuedEvent } from "../shim/server/events.ts";
import type { Logger } from "../shim/logger.ts";

/**
 * Suffix of the operations socket: it sits beside the shim's ttrpc socket, so the node
 * monitor finds every shim by listing the socket directory.
 *
 * @example Usage
 * ```ts
 * import { OPS_SOCKET_SUFFIX } from "./load.ts";
 * console.assert(OPS_SOCKET_SUFFIX === ".ops");
 * ```
 */
export const OPS_SOCKET_SUFFIX = ".ops";

/**
 * The operations socket of a shim whose ttrpc socket is `ttrpcSocket`.
 *
 * @param ttrpcSocket path (or `unix://` address) of the ttrpc socket
 * @returns `<path>.ops`
 *
 * @example Usage
 * ```ts
 * import { opsSocketPath } from "./load.ts";
 * console.assert(opsSocketPath("unix:///run/containerd/s/ab") === "/run/containerd/s/ab.ops");
 * ```
 */
export function opsSocketPath(ttrpcSocket: string): string {
  return ttrpcSocket.replace(/^(ttrpc\+)?unix:\/\//, "") + OPS_SOCKET_SUFFIX;
}

/**
 * Which operations features a shim server turns on.
 *
 * @example Usage
 * ```ts
 * import type { OpsSettings } from "./load.ts";
 * const s: OpsSettings = { endpoint: true, rpcLog: false };
 * console.assert(s.endpoint);
 * ```
 */
export interface OpsSettings {
  /** Serve metrics and debug state on `<ttrpc socket>.ops`. */
  endpoint: boolean;
  /** Write a debug-level log line per ttrpc call. */
  rpcLog: boolean;
}

/**
 * Decides the settings: `-debug` turns on both the per-call log and the endpoint;
 * `SKIFF_OPS=1` turns on the endpoint without debug logging; `SKIFF_OPS=0` keeps the endpoint
 * off even with `-debug`.
 *
 * @param debug whether the shim runs with `-debug`
 * @param env the value of `SKIFF_OPS` (undefined when unset)
 * @returns the settings
 *
 * @example Usage
 * ```ts
 * import { opsSettings } from "./load.ts";
 * console.assert(opsSettings(false, "1").endpoint && !opsSettings(true, "0").endpoint);
 * ```
 */
export function opsSettings(debug: boolean, env: string | undefined): OpsSettings {
  const endpoint = env === "1" || env === "true" || (debug && env !== "0" && env !== "false");
  return { endpoint, rpcLog: debug };
}

/**
 * One process of a container, as the endpoint reads it (a structural view of `ShimProcess`).
 *
 * @example Usage
 * ```ts
 * import type { OpsProcessView } from "./load.ts";
 * const p: OpsProcessView = { execId: "", pid: 42, state: "running", exit: undefined,
 *   stdio: { stdin: "", stdout: "", stderr: "", terminal: false } };
 * console.assert(p.pid === 42);
 * ```
 */
export interface OpsProcessView {
  /** Exec id ("" for the init process). */
  readonly execId: string;
  /** pid, 0 before it is known. */
  readonly pid: number;
  /** Lifecycle state (`created`, `running`, `paused`, `stopped`, …). */
  readonly state: string;
  /** How it ended, once it has. */
  readonly exit: { status: number; exitedAt: Date } | undefined;
  /** Stdio as containerd described it. */
  readonly stdio: { stdin: string; stdout: string; stderr: string; terminal: boolean };
}

/**
 * A container, as the endpoint reads it (a structural view of the Task service's records).
 *
 * @example Usage
 * ```ts ignore
 * const views: ReadonlyMap<string, OpsContainerView> = tasks.containers;
 * ```
 */
export interface OpsContainerView {
  /** Container id. */
  readonly id: string;
  /** containerd namespace. */
  readonly namespace: string;
  /** Bundle directory. */
  readonly bundle: string;
  /** Runtime options in effect. */
  readonly options: unknown;
  /** Whether the shim mounted the rootfs. */
  readonly rootfsMounted: boolean;
  /** The init process. */
  readonly init: OpsProcessView;
  /** Execs by id. */
  readonly execs: ReadonlyMap<string, OpsProcessView>;
}

/**
 * What the endpoint reads once the server is serving. Functions, so every request sees the
 * current state; nothing here lets the endpoint change a task.
 *
 * @example Usage
 * ```ts ignore
 * await ops?.attach({ origin: "cold", spareStats: undefined, socket: path, bundle,
 *   containers: () => tasks.containers, sandboxes: () => sandboxes.size,
 *   events: () => publisher.stats, options: () => inherited });
 * ```
 */
export interface ShimOpsContext {
  /** How this server came to run: spawned by `start` (`cold`) or a warm spare it adopted. */
  origin: "cold" | "spare";
  /**
   * The node-wide counters file (`{"adopted":N,"cold":M}`) of this shim's launcher under this
   * containerd, or undefined when spares are off (nothing is counted then).
   */
  spareStats: string | undefined;
  /** The ttrpc socket path the server listens on. */
  socket: string;
  /** The bundle the server runs in (its `address` file holds the advertised endpoint). */
  bundle: string;
  /** The containers served. */
  containers: () => ReadonlyMap<string, OpsContainerView>;
  /** How many sandboxes are served. */
  sandboxes: () => number;
  /** Event publisher counters. */
  events: () => PublisherStats;
  /** Shim-wide runtime options (from `start` or a sandbox), if any. */
  options: () => unknown;
}

/**
 * What the shim server plugs in. Every hook is optional at its use site, so a server without
 * operations features passes `undefined` everywhere.
 *
 * @example Usage
 * ```ts ignore
 * const server = new TtrpcServer({ interceptors: ops?.interceptors });
 * ```
 */
export interface ShimOpsHooks {
  /** Server interceptors (per-call metrics and debug log). */
  readonly interceptors: Interceptor[];
  /** For `EventPublisherOptions.onQueued`. */
  readonly onQueued: ((e: QueuedEvent) => void) | undefined;
  /** For `TaskServiceDeps.onCreate`. */
  readonly onTaskCreate: ((result: "ok" | "error") => void) | undefined;
  /** For `SandboxServiceDeps.onCreate`. */
  readonly onSandboxCreate: ((result: "ok" | "error") => void) | undefined;
  /** Starts the endpoint beside the ttrpc socket (a failure is logged, never thrown). */
  attach(ctx: ShimOpsContext): Promise<void>;
  /** Stops the endpoint and removes its socket. */
  close(): Promise<void>;
}

/**
 * Options of {@linkcode loadShimOps}.
 *
 * @example Usage
 * ```ts ignore
 * const o: LoadShimOpsOptions = { flags, logger, runtime: shim.runtimeName, version: shim.version };
 * ```
 */
export interface LoadShimOpsOptions {
  /** The server's flags (debug, namespace, id, containerd address). */
  flags: { debug: boolean; namespace: string; id: string; address: string };
  /** The shim's logger. */
  logger: Logger;
  /** Runtime name, e.g. `io.containerd.skiff-runc.v2`. */
  runtime: string;
  /** The shim's version. */
  version: string;
  /** Value of `SKIFF_OPS`. Default: read from the environment. */
  env?: string | undefined;
}

/**
 * Loads what the settings ask for: nothing (undefined), only the per-call debug log, or the
 * full endpoint with metrics.
 *
 * @param opts flags, logger and identity of the shim
 * @returns the hooks, or undefined when everything is off
 *
 * @example Usage
 * ```ts ignore
 * const ops = await loadShimOps({ flags, logger, runtime: shim.runtimeName, version: shim.version });
 * ```
 */
export async function loadShimOps(opts: LoadShimOpsOptions): Promise<ShimOpsHooks | undefined> {
  const env = "env" in opts ? opts.env : Deno.env.get("SKIFF_OPS");
  const settings = opsSettings(opts.flags.debug, env);
  if (settings.endpoint) {
    const { ShimOps } = await import("./shim_ops.ts");
    return new ShimOps({
      runtime: opts.runtime,
      version: opts.version,
      namespace: opts.flags.namespace,
      id: opts.flags.id,
      containerdAddress: opts.flags.address,
      debug: opts.flags.debug,
      logger: opts.logger,
    });
  }
  if (settings.rpcLog) {
    const { rpcInterceptor } = await import("./rpc.ts");
    return {
      interceptors: [rpcInterceptor({ logger: opts.logger })],
      onQueued: undefined,
      onTaskCreate: undefined,
      onSandboxCreate: undefined,
      attach: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
  }
  return undefined;
}
