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
 * imported only when the server runs (docs/architecture.md, "What each process loads"). Helpers
 * that need protobuf-es's reflection (`packAny`, `schemaCodec`) are in `@skiff/shim/proto`.
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

export { type RuntimeContext, Shim } from "./sdk/shim/shim.ts";
export { runShim } from "./sdk/shim/boot/run.ts";
export {
  acceptedTypes,
  type EndpointFree,
  type MessageCodec,
  type OptionsMessage,
  optionsMessage,
  type ResolvedOptions,
  resolveOptions,
  RUNC_OPTIONS_CODEC,
  type RuntimeOptions,
} from "./sdk/shim/options.ts";
export type {
  ContainerRuntime,
  RuntimeCheckpointOptions,
  RuntimeCreateOptions,
  RuntimeExecOptions,
  RuntimeRestoreOptions,
  RuntimeStdio,
} from "./sdk/shim/runtime.ts";
export {
  formatTaskApiEndpoint,
  parseTaskApiEndpoint,
  type TaskApiEndpoint,
  type TaskApiProtocol,
  type TaskApiVersion,
} from "./sdk/shim/endpoint.ts";
export { type LogFields, Logger, type LogLevel } from "./sdk/shim/logger.ts";
export { OciRuntimeCli } from "./sdk/oci/cli.ts";
export { OciShim, type OciShimOptions } from "./sdk/oci/shim.ts";
export type { OciRuntimeCliOptions } from "./sdk/oci/options.ts";
export { isNotExist, mapKillError, OciRuntimeError } from "./sdk/oci/errors.ts";
export {
  decodeOciFeatures,
  OCI_FEATURES_TYPE_URL,
  type OciFeatures,
  ociFeaturesAny,
  parseOciFeatures,
} from "./sdk/oci/features.ts";

// Types referenced by the public API above.
export type { SandboxContext, SandboxRuntime } from "./sdk/shim/server/sandbox_service.ts";
export type { EndpointKey } from "./sdk/shim/options.ts";
export type { LogFormat } from "./sdk/shim/logger.ts";
export type {
  CheckpointOptions,
  CreateOptions,
  CriuOptions,
  DeleteOptions,
  EventsOptions,
  ExecOptions,
  KillOptions,
  OciEvent,
  OciState,
  ProcessStdio,
  RestoreOptions,
  SpawnFn,
  StdioMode,
} from "./sdk/oci/options.ts";
