/**
 * The seam between the shim server and its operations features. This module has no runtime
 * imports, so the server can import it statically; everything else (the metrics, the Hono
 * endpoint) is imported by {@linkcode loadShimOps} only when it is switched on, so `start`,
 * `delete` and a shim without it load none of it.
 *
 * @module
 */

import type { Logger } from "../shim/logger.ts";
import type { ShimOpsHooks } from "./hooks.ts";

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
      attach: () => Promise.resolve(),
      close: () => Promise.resolve(),
    };
  }
  return undefined;
}
