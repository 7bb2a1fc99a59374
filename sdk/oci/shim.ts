/**
 * {@link OciShim}: a {@link Shim} whose runtime is an {@link OciRuntimeCli}, with the runc
 * shim's conventions filled in, so a shim for runc, crun or runsc names only its options and
 * the few CLI settings that differ.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { type RuntimeContext, Shim } from "../shim/shim.ts";
import { OciRuntimeCli } from "./cli.ts";
import { ociFeaturesAny } from "./features.ts";
import type { OciRuntimeCliOptions } from "./options.ts";

/**
 * The settings every OCI shim's options carry: which runtime binary, and its state root.
 *
 * @example Usage
 * ```ts
 * import type { OciShimOptions } from "@skiff/shim";
 * const o: OciShimOptions = { binaryName: "crun", root: "/run/containerd/crun" };
 * ```
 */
export interface OciShimOptions {
  /** The runtime executable, a name looked up on PATH or a path ("runc", "crun", "runsc"). */
  binaryName: string;
  /** The runtime's state root; each namespace gets `<root>/<namespace>`. */
  root: string;
  /** `--systemd-cgroup`: cgroups through systemd (runc options `systemd_cgroup`). */
  systemdCgroup?: boolean;
}

/**
 * A shim driving a runc-compatible runtime CLI the way containerd's runc shim does: `--root
 * <root>/<namespace>`, `--log <bundle>/log.json`, `--systemd-cgroup` when the options ask, the
 * bundle as the commands' working directory, the runtime commands spawned through the shim's
 * subreaper, and `-info`'s features from the runtime's own `features` command. A subclass gives
 * its runtime name and options, and overrides {@link OciShim.cliOptions} for the settings that
 * differ (flags, how exits are observed, ...); it can still override `runtime()` altogether.
 *
 * @example A crun shim
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { OciShim, type OciShimOptions } from "@skiff/shim";
 *
 * class CrunShim extends OciShim<OciShimOptions> {
 *   readonly runtimeName = "io.containerd.my-crun.v2";
 *   readonly options = {
 *     defaults: (): OciShimOptions => ({ binaryName: "crun", root: "/run/containerd/crun" }),
 *   };
 * }
 * const cli = new CrunShim().runtime({
 *   id: "web",
 *   namespace: "default",
 *   bundle: "/run/b/web",
 *   options: { binaryName: "crun", root: "/run/containerd/crun" },
 *   spawn: (cmd) => cmd.spawn(),
 *   logger: undefined as never,
 * });
 * strictEqual(
 *   cli.globalArgs.join(" "),
 *   "--root /run/containerd/crun/default --log /run/b/web/log.json --log-format json",
 * );
 * ```
 */
export abstract class OciShim<T extends OciShimOptions> extends Shim<T> {
  /** An OCI CLI runtime keeps nothing of a pod in the shim object: pods may share a server. */
  override readonly sharedServers: boolean = true;
  /**
   * The CLI settings this runtime adds to (or changes in) the defaults: e.g. runc's
   * `noPivot` and `noNewKeyring`, runsc's `globalArgs` and `initExit: "wait"`. The base adds
   * none.
   *
   * @param _ctx The container the runtime is built for.
   * @returns Options merged over the defaults.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import type { RuntimeContext } from "@skiff/shim";
   * import type { OciRuntimeCliOptions } from "@skiff/shim";
   * import { OciShim, type OciShimOptions } from "@skiff/shim";
   *
   * interface RuncOptions extends OciShimOptions {
   *   noPivotRoot?: boolean;
   * }
   * class RuncShim extends OciShim<RuncOptions> {
   *   readonly runtimeName = "io.containerd.my-runc.v2";
   *   readonly options = {
   *     defaults: (): RuncOptions => ({ binaryName: "runc", root: "/run/containerd/runc" }),
   *   };
   *   protected override cliOptions(ctx: RuntimeContext<RuncOptions>): OciRuntimeCliOptions {
   *     return { noPivot: ctx.options.noPivotRoot };
   *   }
   * }
   * const ctx: RuntimeContext<RuncOptions> = {
   *   id: "web",
   *   namespace: "k8s.io",
   *   bundle: "/run/b/web",
   *   options: { binaryName: "runc", root: "/run/containerd/runc", noPivotRoot: true },
   *   spawn: (cmd) => cmd.spawn(),
   *   logger: undefined as never, // not used by runtime()
   * };
   * strictEqual(new RuncShim().runtime(ctx).globalArgs.includes("--root"), true);
   * ```
   */
  protected cliOptions(_ctx: RuntimeContext<T>): OciRuntimeCliOptions {
    return {};
  }

  /**
   * The runtime for one container: the defaults described on {@link OciShim}, then
   * {@link OciShim.cliOptions}.
   *
   * @param ctx The container, its options and the shim's spawn hook.
   * @returns The runtime CLI adapter.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import type { RuntimeContext } from "@skiff/shim";
   * import { OciShim, type OciShimOptions } from "@skiff/shim";
   *
   * class CrunShim extends OciShim<OciShimOptions> {
   *   readonly runtimeName = "io.containerd.my-crun.v2";
   *   readonly options = {
   *     defaults: (): OciShimOptions => ({ binaryName: "crun", root: "/run/containerd/crun" }),
   *   };
   * }
   * const ctx: RuntimeContext<OciShimOptions> = {
   *   id: "web",
   *   namespace: "k8s.io",
   *   bundle: "/run/b/web",
   *   options: { binaryName: "crun", root: "/run/containerd/crun", systemdCgroup: true },
   *   spawn: (cmd) => cmd.spawn(),
   *   logger: undefined as never, // not used by runtime()
   * };
   * const cli = new CrunShim().runtime(ctx);
   * strictEqual(cli.binary, "crun");
   * strictEqual(cli.globalArgs.join(" ").startsWith("--root /run/containerd/crun/k8s.io "), true);
   * strictEqual(cli.globalArgs.includes("--systemd-cgroup"), true);
   * ```
   */
  runtime(ctx: RuntimeContext<T>): OciRuntimeCli {
    const o = ctx.options;
    return new OciRuntimeCli({
      binary: o.binaryName,
      root: `${o.root}/${ctx.namespace}`,
      log: `${ctx.bundle}/log.json`,
      // The bundle is the runtime's working directory (wrappers read ./config.json).
      cwd: ctx.bundle,
      systemdCgroup: o.systemdCgroup ?? false,
      spawn: ctx.spawn,
      ...this.cliOptions(ctx),
    });
  }

  /**
   * `-info`'s features: the runtime's own `features` document (rejects when the runtime has no
   * such command, as runsc and older runc do; `-info` then reports none).
   *
   * @param options The resolved options (their `binaryName` is run).
   * @returns The document as containerd's `Any`.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciShim, type OciShimOptions } from "@skiff/shim";
   *
   * class MyShim extends OciShim<OciShimOptions> {
   *   readonly runtimeName = "io.containerd.my-runc.v2";
   *   readonly options = {
   *     defaults: (): OciShimOptions => ({ binaryName: "runc", root: "/run/containerd/runc" }),
   *   };
   * }
   * // A stand-in for `runc features`.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho '{"ociVersionMin":"1.0.0","mountOptions":["rro"]}'\n`);
   * await Deno.chmod(bin, 0o755);
   * const any = await new MyShim().features({ binaryName: bin, root: "/run/containerd/runc" });
   * strictEqual(any.typeUrl, "types.containerd.io/opencontainers/runtime-spec/1/features/Features");
   * await Deno.remove(bin);
   * ```
   */
  override async features(options: T): Promise<Any> {
    return ociFeaturesAny(await new OciRuntimeCli({ binary: options.binaryName }).features());
  }
}
