/**
 * OCI runtime adapters: {@link OciRuntimeCli} drives runc-compatible command lines (runc,
 * runsc, crun) the way the runc shim does.
 *
 * @example Usage
 * ```ts ignore
 * import { OciRuntimeCli } from "./mod.ts";
 * const cli = new OciRuntimeCli({ binary: "runc", root: "/run/containerd/runc/default" });
 * const { status } = await cli.state("web");
 * ```
 *
 * @module
 */
export * from "./cli.ts";
export * from "./errors.ts";
export * from "./features.ts";
export type * from "./options.ts";
export { readPidFile, type ReadPidFileOptions } from "../linux/pid_file.ts";
