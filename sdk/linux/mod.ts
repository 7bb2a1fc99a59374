/**
 * Linux mechanics for a shim, or for a guest agent that runs containers inside a VM: the child
 * subreaper, process stdio (FIFOs, `file://`, `binary://` loggers), the console socket and pty,
 * rootfs mounts, cgroup statistics, OOM notification, pid files and signals by number.
 *
 * The `Shim` base class uses all of these for you; import them when your runtime does the same
 * work somewhere else: the VM example's guest agent (examples/vm/agent) reaps, mounts, reads
 * cgroups and watches OOM inside the guest with exactly these names. Everything here needs Linux,
 * and most of it root (mounts, cgroups, the subreaper).
 *
 * @example Usage
 * ```ts ignore
 * import { ProcessIo, Reaper } from "@skiff/shim/linux";
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

export { isExitOf, type ProcessExit, Reaper, type ReaperOptions } from "./reaper.ts";
export { adoptChild, type AdoptedChild } from "./adopted_child.ts";
export { processStartTime } from "./proc_stat.ts";
export { type CommandStdio, ProcessIo } from "./process_io.ts";
export { type ProcessIoContext, type StdioSpec } from "./stdio_targets.ts";
export { type ProcessIoCarry, processIoDescriptors } from "./process_io_carry.ts";
export { type ChildPipes, takeChildPipes } from "./child_pipes.ts";
export { type OutputTarget, parseOutputTarget } from "./stdio_uri.ts";
export { BinaryLogger, type BinaryLoggerCarry, type BinaryLoggerOptions } from "./binary_logger.ts";
export { ConsoleSocket, Pty } from "./console.ts";
export { type Mount, mountAll, parseMountOptions, unmountAll } from "./mount.ts";
export {
  type CgroupMembership,
  CgroupNotFoundError,
  cgroupStats,
  cgroupVersion,
  procCgroup,
} from "./cgroups.ts";
export { type OomWatch, watchOom } from "./oom.ts";
export { ErrnoError, kill } from "./libc.ts";
export { FdStream, type FdStreamOptions } from "./fd_stream.ts";
export { readPidFile, type ReadPidFileOptions } from "./pid_file.ts";
