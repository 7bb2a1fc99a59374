/**
 * The operations features as a shim server extension: metrics, the debug endpoint on
 * `<ttrpc socket>.ops` and the per-RPC debug log. On with `-debug` or `SKIFF_OPS=1`; this module
 * has no runtime imports of its own, and the rest (the metrics, the Hono endpoint) is imported
 * only when a setting asks for it, so a plain shim loads none of it.
 *
 * @module
 */

import type { ServerExtension } from "../shim/server/extension.ts";
import { LAUNCHER_ENV } from "../shim/contract/launcher_env.ts";

/**
 * Which operations features a shim server turns on.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OpsSettings } from "@skiff/shim/ops";
 * const s: OpsSettings = { endpoint: true, rpcLog: false };
 * strictEqual(s.endpoint, true);
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
 * import { strictEqual } from "node:assert/strict";
 * import { opsSettings } from "@skiff/shim/ops";
 * strictEqual(opsSettings(false, "1").endpoint, true);
 * strictEqual(!opsSettings(true, "0").endpoint, true);
 * ```
 */
export function opsSettings(debug: boolean, env: string | undefined): OpsSettings {
  const endpoint = env === "1" || env === "true" || (debug && env !== "0" && env !== "false");
  return { endpoint, rpcLog: debug };
}

/** Options of {@linkcode opsExtension}. */
export interface OpsExtensionOptions {
  /** Value of `SKIFF_OPS`. Default: read from the environment when the server sets up. */
  env?: string | undefined;
}

/**
 * The operations extension: nothing, only the per-call debug log, or the full endpoint with
 * metrics, as {@linkcode opsSettings} decides.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(shim, flags, { extensions: [opsExtension()] });
 * ```
 */
export function opsExtension(opts: OpsExtensionOptions = {}): ServerExtension {
  return {
    name: "ops",
    async setup({ shim, flags, logger, origin, socket, bundle }) {
      const env = "env" in opts ? opts.env : Deno.env.get("SKIFF_OPS");
      const settings = opsSettings(flags.debug, env);
      if (settings.endpoint) {
        const [{ ShimOps }, { serverSpareStats }] = await Promise.all([
          import("./shim_ops.ts"),
          import("../shim/spare/mod.ts"),
        ]);
        const ops = new ShimOps({
          runtime: shim.runtimeName,
          version: shim.version,
          code: Deno.env.get(LAUNCHER_ENV.code) ?? "unknown",
          namespace: flags.namespace,
          id: flags.id,
          containerdAddress: flags.address,
          debug: flags.debug,
          logger,
        });
        return {
          interceptors: ops.interceptors,
          onEvent: ops.onQueued,
          onServing: async ({ containers, sandboxes, events, options, pods }) =>
            await ops.attach({
              containers,
              sandboxes,
              events,
              options,
              ...(pods ? { pods } : {}),
              origin,
              spareStats: await serverSpareStats(flags.address, socket),
              socket,
              bundle,
            }),
          onShutdown: () => ops.close(),
        };
      }
      if (settings.rpcLog) {
        const { rpcInterceptor } = await import("./rpc.ts");
        return { interceptors: [rpcInterceptor({ logger })] };
      }
      return undefined;
    },
  };
}
