/**
 * The seam between a shim and its runtime, in full: the {@link Shim} base class and its
 * {@link RuntimeContext}, the {@link ContainerRuntime} contract with every option type its
 * methods take, the options hook and how options are resolved, the task-API endpoint, logging
 * and the sandbox hook. `@skiff/shim` re-exports the part a runtime author writes a shim with;
 * this entry point (`@skiff/shim/seam`) has the rest, for runtimes that implement
 * {@link ContainerRuntime} themselves and for tooling.
 *
 * @example Resolve the options a shim is given (containerd's runc options, wire-encoded)
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { optionsMessage, resolveOptions, RUNC_OPTIONS_CODEC } from "@skiff/shim/seam";
 * import type { Any } from "@bufbuild/protobuf/wkt";
 *
 * const hook = {
 *   defaults: () => ({ root: "/run/containerd/runc" }),
 *   messages: [optionsMessage(RUNC_OPTIONS_CODEC, (m, base: { root: string }) => ({
 *     root: m.root || base.root,
 *   }))],
 * };
 * // containerd.runc.v1.Options { root: "/r" } (field 7, length 2)
 * const any = { typeUrl: "containerd.runc.v1.Options", value: new Uint8Array([0x3a, 2, 0x2f, 0x72]) };
 * const { options } = resolveOptions(hook, any as Any, undefined, "io.containerd.my.v1");
 * strictEqual(options.root, "/r");
 * ```
 *
 * @module
 */

export * from "./shim.ts";
export * from "./sandbox.ts";
export type * from "./runtime.ts";
export {
  acceptedTypes,
  type EndpointFree,
  type EndpointKey,
  type MessageCodec,
  type OptionsMessage,
  optionsMessage,
  type ResolvedOptions,
  resolveOptions,
  RUNC_OPTIONS_CODEC,
  type RuntimeOptions,
} from "./options.ts";
export {
  formatTaskApiEndpoint,
  parseTaskApiEndpoint,
  type TaskApiEndpoint,
  type TaskApiProtocol,
  type TaskApiVersion,
} from "./endpoint.ts";
export { type LogFields, type LogFormat, Logger, type LogLevel } from "./logger.ts";
