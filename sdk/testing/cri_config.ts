/**
 * The CRI part of a containerd config: runtime handlers, the sandbox (pause) image and
 * `restrict_oom_score_adj`, in the shape each containerd version reads. 1.6 and 1.7 (config
 * `version = 2`) keep all of it in the `io.containerd.grpc.v1.cri` plugin; 2.x (`version = 3`)
 * splits it: handlers and `restrict_oom_score_adj` in `io.containerd.cri.v1.runtime`, the
 * sandbox image as the pinned `sandbox` image of `io.containerd.cri.v1.images`.
 *
 * `startContainerd({ cri })` builds its config with {@linkcode criPlugins}, and
 * docs/containerd-config.md's Kubernetes snippets are checked against it.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { criPlugins } from "@skiff/shim/testing";
 *
 * const plugins = criPlugins("2.1.9", {
 *   sandboxImage: "localhost/skiff/pause:latest",
 *   handlers: { "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2" } },
 * });
 * strictEqual("io.containerd.cri.v1.runtime" in plugins, true);
 * ```
 *
 * @module
 */

/**
 * One CRI runtime handler (a `RuntimeClass`'s `handler`): a runtimes table entry.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { type CriHandler, criPlugins } from "@skiff/shim/testing";
 * const h: CriHandler = { runtimeType: "io.containerd.skiff-runc.v2", options: { Root: "/run/r" } };
 * const p = criPlugins("2.1.9", { sandboxImage: "localhost/skiff/pause:latest", handlers: { skiff: h } });
 * const cri = p["io.containerd.cri.v1.runtime"].containerd as { runtimes: Record<string, unknown> };
 * deepStrictEqual(cri.runtimes.skiff, {
 *   runtime_type: "io.containerd.skiff-runc.v2",
 *   options: { Root: "/run/r" },
 * });
 * ```
 */
export interface CriHandler {
  /** containerd runtime type, e.g. `io.containerd.skiff-runc.v2`. */
  runtimeType: string;
  /** The handler's `options` table (runc keys for `io.containerd.runc.v2`, else sent as-is). */
  options?: Record<string, unknown>;
  /**
   * `sandboxer` (containerd 2.x): `"shim"` runs the pod's sandbox through the shim's Sandbox
   * API; unset, CRI's default `podsandbox` runs a pause container.
   */
  sandboxer?: string;
}

/**
 * What {@linkcode criPlugins} writes.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { type CriConfigOptions, criPlugins } from "@skiff/shim/testing";
 * import { PAUSE_IMAGE_REF } from "@skiff/shim/testing";
 * const o: CriConfigOptions = { sandboxImage: PAUSE_IMAGE_REF, handlers: {}, defaultHandler: "runc" };
 * // containerd 2.x pins the sandbox image in the images plugin.
 * deepStrictEqual(criPlugins("2.4.2", o)["io.containerd.cri.v1.images"], {
 *   pinned_images: { sandbox: PAUSE_IMAGE_REF },
 * });
 * ```
 */
export interface CriConfigOptions {
  /** Image of each pod's sandbox (pause) container. */
  sandboxImage: string;
  /** Runtime handlers by name. */
  handlers: Record<string, CriHandler>;
  /** Handler for pods that name none (`default_runtime_name`). Default: containerd's (`runc`). */
  defaultHandler?: string;
  /**
   * Cap the OOM score adjustments CRI asks for at containerd's own (needed when containerd lacks
   * CAP_SYS_RESOURCE: the sandbox's -998 would fail). Default true.
   */
  restrictOomScoreAdj?: boolean;
}

/**
 * The CRI plugin whose `containerd.runtimes` table holds the runtime handlers.
 *
 * @param version containerd version, e.g. `2.1.9`
 * @returns `io.containerd.grpc.v1.cri` (1.x) or `io.containerd.cri.v1.runtime` (2.x)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { criRuntimePlugin } from "@skiff/shim/testing";
 * strictEqual(criRuntimePlugin("1.7.24"), "io.containerd.grpc.v1.cri");
 * ```
 */
export function criRuntimePlugin(version: string): string {
  return Number(version.split(".")[0]) >= 2
    ? "io.containerd.cri.v1.runtime"
    : "io.containerd.grpc.v1.cri";
}

/**
 * The `plugins` tables that configure CRI for one containerd version.
 *
 * @param version containerd version, e.g. `1.7.24`
 * @param opts sandbox image, handlers, default handler
 * @returns plugin id → table, ready to be merged into a config's `plugins`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { criPlugins } from "@skiff/shim/testing";
 * const p = criPlugins("1.6.20", { sandboxImage: "localhost/skiff/pause:latest", handlers: {} });
 * strictEqual(p["io.containerd.grpc.v1.cri"]!.sandbox_image, "localhost/skiff/pause:latest");
 * ```
 */
export function criPlugins(
  version: string,
  opts: CriConfigOptions,
): Record<string, Record<string, unknown>> {
  const runtimes: Record<string, unknown> = {};
  for (const [name, h] of Object.entries(opts.handlers)) {
    runtimes[name] = {
      runtime_type: h.runtimeType,
      ...(h.sandboxer ? { sandboxer: h.sandboxer } : {}),
      ...(h.options ? { options: h.options } : {}),
    };
  }
  const containerd: Record<string, unknown> = {
    ...(opts.defaultHandler ? { default_runtime_name: opts.defaultHandler } : {}),
    runtimes,
  };
  const restrict = opts.restrictOomScoreAdj ?? true;
  if (Number(version.split(".")[0]) >= 2) {
    return {
      "io.containerd.cri.v1.images": { pinned_images: { sandbox: opts.sandboxImage } },
      "io.containerd.cri.v1.runtime": { restrict_oom_score_adj: restrict, containerd },
    };
  }
  return {
    "io.containerd.grpc.v1.cri": {
      sandbox_image: opts.sandboxImage,
      restrict_oom_score_adj: restrict,
      containerd,
    },
  };
}
