/**
 * skiff: write containerd runtime v2 shims in TypeScript.
 *
 * A shim extends {@link Shim} with its runtime name, a {@link RuntimeOptions} hook and a
 * {@link ContainerRuntime} factory (usually an {@link OciRuntimeCli}), and calls
 * {@link runShim}. The base class owns bootstrap (`start`/`delete` for containerd 1.6 to
 * 2.3+), the Task API v2+v3, events, exit reaping, stdio, logging and the task-API endpoint.
 *
 * This entry point is light on purpose: importing it loads neither protobuf-es's reflection nor
 * Connect, so a shim's `start`, `delete`, `-v` and `-info` start fast; the server's modules are
 * imported only when the server runs (docs/architecture.md, "What each process loads"). Helpers
 * that need protobuf-es's reflection (`packAny`, `schemaCodec`) are in `@skiff/shim/proto`.
 *
 * @example A runc shim
 * ```ts ignore
 * import { OciRuntimeCli, runShim, Shim, type RuntimeContext } from "@skiff/shim";
 *
 * class MyShim extends Shim<{ binary: string }> {
 *   readonly runtimeName = "io.containerd.my.v1";
 *   readonly options = { defaults: () => ({ binary: "runc" }) };
 *   runtime(ctx: RuntimeContext<{ binary: string }>): OciRuntimeCli {
 *     return new OciRuntimeCli({ binary: ctx.options.binary, spawn: ctx.spawn });
 *   }
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
export {
  isNotExist,
  mapKillError,
  OciRuntimeCli,
  type OciRuntimeCliOptions,
  OciRuntimeError,
} from "./sdk/oci/cli.ts";
export {
  decodeOciFeatures,
  OCI_FEATURES_TYPE_URL,
  type OciFeatures,
  ociFeaturesAny,
  parseOciFeatures,
} from "./sdk/oci/features.ts";

// Types referenced by the public API above.
export type { SandboxContext, SandboxRuntime } from "./sdk/shim/sandbox.ts";
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
} from "./sdk/oci/cli.ts";
