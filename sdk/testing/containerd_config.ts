/**
 * The config.toml of a private containerd: everything inside its own dir (root, state, sockets,
 * CNI dirs), plugins that reach outside disabled, the runtimes' CRI tables, and a caller's TOML
 * merged on top.
 *
 * @module
 */

import { parse as parseToml, stringify as stringifyToml } from "smol-toml";
import { PAUSE_IMAGE_REF } from "./image.ts";
import { type CriHandler, criPlugins, criRuntimePlugin } from "./cri_config.ts";
import { compareVersions } from "./containerd_versions.ts";
import type { PrivateContainerd, RuntimeConfig } from "./private_containerd.ts";

/**
 * Options of a private containerd's CRI plugin ({@linkcode StartContainerdOptions.cri}). The
 * runtime handlers are the instance's `runtimes` (name → `runtime_type` and `options`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CriSetup } from "@skiff/shim/testing";
 * const cri: CriSetup = { defaultHandler: "runc" };
 * strictEqual(cri.sandboxImage, undefined); // the locally built pause image
 * ```
 */
export interface CriSetup {
  /**
   * The sandbox (pause) image, already imported into {@linkcode CRI_NAMESPACE} by the caller.
   * Default: {@linkcode PAUSE_IMAGE_REF}, built locally and imported at start.
   */
  sandboxImage?: string;
  /** Handler of pods that name none. Default: containerd's own default (`runc`). */
  defaultHandler?: string;
  /** `restrict_oom_score_adj`. Default true (needed without CAP_SYS_RESOURCE). */
  restrictOomScoreAdj?: boolean;
}

/** Plugins that reach outside the private dirs (CRI's CNI setup, NRI's socket, /opt). */
const DISABLED_PLUGINS: readonly string[] = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
];

function platform(): string {
  const arch = Deno.build.arch === "x86_64"
    ? "amd64"
    : Deno.build.arch === "aarch64"
    ? "arm64"
    : Deno.build.arch;
  return `linux/${arch}`;
}

/**
 * Generates the config.toml object for a private containerd (before `configToml` is merged).
 * Version 2 format for containerd 1.x, version 3 for 2.x.
 *
 * @param c the instance whose paths go into the config
 * @param opts debug level and runtimes
 * @returns a TOML-ready object
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { containerdConfig } from "./containerd_config.ts";
 * import { PrivateContainerd } from "@skiff/shim/testing";
 * // An instance that was never started (startContainerd makes and starts one).
 * const c = new PrivateContainerd({
 *   dir: "/tmp/skiff-ctrd-ab12",
 *   version: "2.1.9",
 *   binDir: "/root/.cache/skiff/containerd-v2.1.9/bin",
 *   snapshotter: "native",
 *   runtimes: {},
 *   env: {},
 * });
 * const cfg = containerdConfig(c, { debug: true });
 * strictEqual(cfg.version, 3); // 2.x's config format
 * strictEqual(cfg.root, "/tmp/skiff-ctrd-ab12/root"); // everything inside the private dir
 * ```
 */
export function containerdConfig(
  c: PrivateContainerd,
  opts: { debug?: boolean; runtimes?: Record<string, RuntimeConfig>; cri?: CriSetup } = {},
): Record<string, unknown> {
  const v3 = c.major >= 2;
  const plugins: Record<string, unknown> = {};
  if (compareVersions(c.version, "1.7.0") >= 0) {
    // The transfer service (ctr import in 2.x) unpacks for this snapshotter.
    plugins["io.containerd.transfer.v1.local"] = {
      unpack_config: [{ platform: platform(), snapshotter: c.snapshotter }],
    };
  }
  const runtimes = Object.entries(opts.runtimes ?? {});
  if (opts.cri) {
    const handlers: Record<string, CriHandler> = {};
    for (const [name, r] of runtimes) {
      const options = typeof r.options === "function" ? r.options(c) : r.options;
      handlers[name] = {
        runtimeType: r.runtimeType,
        ...(r.sandboxer ? { sandboxer: r.sandboxer } : {}),
        ...(options ? { options } : {}),
      };
    }
    Object.assign(
      plugins,
      criPlugins(c.version, {
        sandboxImage: opts.cri.sandboxImage ?? PAUSE_IMAGE_REF,
        handlers,
        ...(opts.cri.defaultHandler ? { defaultHandler: opts.cri.defaultHandler } : {}),
        ...(opts.cri.restrictOomScoreAdj !== undefined
          ? { restrictOomScoreAdj: opts.cri.restrictOomScoreAdj }
          : {}),
      }),
    );
    // Private settings on top: this instance's snapshotter, and CNI dirs inside its own dir
    // (CRI watches the conf dir, creating it if missing; without a CNI config only
    // host-network pods run, which is all the tests need).
    const runtimePlugin = plugins[criRuntimePlugin(c.version)] as Record<string, unknown>;
    const cni = { conf_dir: `${c.dir}/cni/net.d` };
    if (v3) {
      (plugins["io.containerd.cri.v1.images"] as Record<string, unknown>).snapshotter =
        c.snapshotter;
      runtimePlugin.cni = { ...cni, bin_dirs: [`${c.dir}/cni/bin`] };
    } else {
      (runtimePlugin.containerd as Record<string, unknown>).snapshotter = c.snapshotter;
      runtimePlugin.cni = { ...cni, bin_dir: `${c.dir}/cni/bin` };
    }
  } else if (runtimes.length > 0) {
    const table: Record<string, unknown> = {};
    for (const [name, r] of runtimes) {
      const options = typeof r.options === "function" ? r.options(c) : r.options;
      table[name] = { runtime_type: r.runtimeType, ...(options ? { options } : {}) };
    }
    // Only CRI reads runtime tables; they matter once configToml re-enables CRI.
    plugins[v3 ? "io.containerd.cri.v1.runtime" : "io.containerd.grpc.v1.cri"] = {
      containerd: { runtimes: table },
    };
  }
  const cfg: Record<string, unknown> = {
    version: v3 ? 3 : 2,
    root: c.root,
    state: c.state,
    disabled_plugins: DISABLED_PLUGINS.filter((p) =>
      !(opts.cri && p === "io.containerd.grpc.v1.cri")
    ),
    grpc: { address: c.address },
    ttrpc: { address: c.ttrpcAddress },
    debug: { level: opts.debug ? "debug" : "info" },
  };
  if (Object.keys(plugins).length > 0) cfg.plugins = plugins;
  return cfg;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

function deepMerge(base: Record<string, unknown>, over: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(over)) {
    const b = base[k];
    if (isPlainObject(b) && isPlainObject(v)) deepMerge(b, v);
    else base[k] = v;
  }
}

/**
 * The config file's text: `cfg` with `configToml` merged over it (tables merge, arrays and
 * values replace).
 *
 * @param cfg what {@linkcode containerdConfig} generated (changed in place by the merge)
 * @param configToml the caller's TOML, if any
 * @returns TOML text
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { configText } from "./containerd_config.ts";
 * const text = configText({ version: 3, debug: { level: "info" } }, '[debug]\nlevel = "debug"');
 * strictEqual(text.includes('level = "debug"'), true);
 * ```
 */
export function configText(cfg: Record<string, unknown>, configToml?: string): string {
  if (configToml) deepMerge(cfg, parseToml(configToml) as Record<string, unknown>);
  return stringifyToml(cfg);
}
