/**
 * skiff: write containerd runtime v2 shims in TypeScript.
 *
 * A shim extends {@link Shim} with its runtime name, a {@link RuntimeOptions} hook and a
 * {@link ContainerRuntime} factory, and calls {@link runShim}; for a runc-compatible runtime,
 * {@link OciShim} is that factory (an {@link OciRuntimeCli} with the runc shim's conventions).
 * The base class owns bootstrap (`start`/`delete` for containerd 1.6 to 2.3+), the Task API
 * v2+v3, events, exit reaping, stdio, logging and the task-API endpoint.
 *
 * This entry point is light on purpose: importing it loads neither protobuf-es's reflection nor
 * Connect, so a shim's `start`, `delete`, `-v` and `-info` start fast; the server's modules are
 * imported only when the server runs (docs/architecture.md, "What each process loads").
 *
 * It holds what a runtime author writes a shim with; the rest is in sub-entry points:
 * `@skiff/shim/seam` (the seam in full: every type of the `ContainerRuntime` contract, options
 * resolution, the task-API endpoint, logging), `@skiff/shim/oci` (the OCI runtime CLI adapter in
 * full: its command options, errors, `features` helpers), `@skiff/shim/proto` (schemas, and the
 * helpers that need protobuf-es's reflection: `packAny`, `schemaCodec`), `@skiff/shim/ttrpc`,
 * `@skiff/shim/testing`, `@skiff/shim/ops`. CHANGELOG.md says where each name went.
 *
 * @example A crun shim
 * ```ts ignore
 * import { OciShim, type OciShimOptions, runShim } from "@skiff/shim";
 *
 * class MyShim extends OciShim<OciShimOptions> {
 *   readonly runtimeName = "io.containerd.my.v1";
 *   readonly options = {
 *     defaults: (): OciShimOptions => ({ binaryName: "crun", root: "/run/containerd/crun" }),
 *   };
 * }
 * await runShim(new MyShim());
 * ```
 *
 * @module
 */

// The shim and its entry point.
export { type RuntimeContext, Shim, type UpgradeContext } from "./sdk/shim/shim.ts";
export type { AdoptedChild } from "./sdk/linux/adopted_child.ts";
export type { SandboxContext, SandboxRuntime } from "./sdk/shim/sandbox.ts";
// The options hook.
export {
  type MessageCodec,
  type OptionsMessage,
  optionsMessage,
  RUNC_OPTIONS_CODEC,
  type RuntimeOptions,
} from "./sdk/shim/options.ts";
// The runtime seam (its option types: @skiff/shim/seam).
export type {
  ContainerRuntime,
  RuntimeCarry,
  RuntimeProcessCarry,
  RuntimeStdio,
} from "./sdk/shim/runtime.ts";
export { Logger } from "./sdk/shim/logger.ts";
export { SKIFF_VERSION } from "./sdk/shim/version.ts";
// OCI runtimes (the rest: @skiff/shim/oci).
export { OciRuntimeCli } from "./sdk/oci/cli.ts";
export type { OciRuntimeCliOptions } from "./sdk/oci/options.ts";
export { OciShim, type OciShimOptions } from "./sdk/oci/shim.ts";
export { ociFeaturesAny } from "./sdk/oci/features.ts";
// Errors with containerd's codes, without loading Connect: `throw statusError("…", Code.NotFound)`
// (Connect's `ConnectError.from` and handlers accept them as its own).
export { Code, isStatusError, statusError } from "./sdk/ttrpc/status_error.ts";
// protobuf-es's `Any`, which `Shim.features` and `ContainerRuntime.stats` return (type only).
export type { Any } from "@bufbuild/protobuf/wkt";

import type { Shim as ShimBase } from "./sdk/shim/shim.ts";
import { runShimWith } from "./sdk/shim/boot/run.ts";

/**
 * Runs a shim binary: parses containerd's flags and runs `start`, `delete`, `-v`, `-info` or the
 * server. Call it from the shim's main module; it exits the process. The server composes skiff's
 * extensions, the warm spare and the operations endpoint; each is set up only when the operator
 * switches it on (the spare: a bundled launcher and `SKIFF_SPARE`; ops: `-debug` and `SKIFF_OPS`).
 * They are defined here, the layer above both, and loaded only when the server runs.
 *
 * @param shim the runtime definition
 * @param argv the arguments (default `Deno.args`)
 * @example Usage
 * ```ts ignore
 * import { runShim } from "@skiff/shim";
 * await runShim(new RuncShim());
 * ```
 */
export function runShim<T extends object>(
  shim: ShimBase<T>,
  argv: readonly string[] = Deno.args,
): Promise<void> {
  return runShimWith(shim, argv, async () => {
    const [{ spareExtension }, { opsExtension }] = await Promise.all([
      import("./sdk/shim/spare/extension.ts"),
      import("./sdk/ops/extension.ts"),
    ]);
    return [spareExtension(), opsExtension()];
  });
}
