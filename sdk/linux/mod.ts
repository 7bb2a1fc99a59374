/**
 * Linux mechanics a containerd shim needs: the child subreaper, process stdio (FIFOs,
 * `file://`, `binary://` loggers), the console socket and pty, rootfs mounts, cgroup
 * statistics and OOM notification.
 *
 * This barrel is internal to skiff (the `Shim` base class uses it); it is not a published
 * entry point and its API may change.
 *
 * @example Usage
 * ```ts ignore
 * import { ProcessIo, Reaper } from "./mod.ts";
 *
 * const reaper = Reaper.start();
 * const io = await ProcessIo.open(
 *   { stdin: "", stdout: "/run/x/stdout", stderr: "/run/x/stderr", terminal: false },
 *   { containerId: "web", namespace: "default", reaper },
 * );
 * const runc = reaper.spawn(new Deno.Command("runc", { args: ["create", "web"], ...io.stdio }));
 * io.attach(runc);
 * await runc.status;
 * ```
 *
 * @module
 */

export { type ProcessExit, Reaper, type ReaperOptions } from "./reaper.ts";
export {
  type CommandStdio,
  ProcessIo,
  type ProcessIoContext,
  type StdioSpec,
} from "./process_io.ts";
export { type OutputTarget, parseOutputTarget } from "./stdio_uri.ts";
export { BinaryLogger, type BinaryLoggerOptions } from "./binary_logger.ts";
export { ConsoleSocket, Pty } from "./console.ts";
export { type Mount, mountAll, parseMountOptions, unmountAll } from "./mount.ts";
export { CgroupNotFoundError, cgroupStats, cgroupVersion } from "./cgroups.ts";
export { type OomWatch, watchOom } from "./oom.ts";
export { ErrnoError } from "./libc.ts";
export { FdStream, type FdStreamOptions } from "./fd_stream.ts";
export { readPidFile, type ReadPidFileOptions } from "./pid_file.ts";
