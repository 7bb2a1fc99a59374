/**
 * The operating-system mechanics the Task service needs, behind one small interface, so the
 * service's state machine can be unit-tested with fakes and the Linux code stays in sdk/linux.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import type { ProcessExitInfo, ProcessIoHandle, ProcessStdioPaths } from "./process.ts";
import type { RuntimeStdio } from "../runtime.ts";
import type { ProcessIoCarry } from "../../linux/process_io_carry.ts";

/**
 * A process's cgroups, one entry per hierarchy (controllers, none for v2; path), as
 * `/proc/<pid>/cgroup` lists them.
 */
export type CgroupMembership = readonly { controllers: string[]; path: string }[];

/** Mount as containerd passes it in `CreateTaskRequest.rootfs`. */
export interface RootfsMount {
  /** Filesystem type, e.g. "overlay" or "bind". */
  type: string;
  /** Mount source. */
  source: string;
  /** Target below the rootfs ("" for the rootfs itself). */
  target: string;
  /** Mount options. */
  options: string[];
}

/** An exit reaped by the platform. */
export interface ReapedExit extends ProcessExitInfo {
  /** The pid that exited. */
  pid: number;
  /** The process's start time in clock ticks since boot, when known (tells reused pids apart). */
  startTime?: number;
}

/** The I/O of one process while it is being created. */
export interface ProcessIoSetup {
  /** What the runtime is handed: a console socket, pipes, or streams (it picks one). */
  io: RuntimeStdio;
  /**
   * Completes the setup after the runtime created the process (receives the pty master, unless
   * the runtime took the streams).
   */
  ready(): Promise<void>;
  /** The handle kept for CloseIO, ResizePty, drain and close. */
  handle: ProcessIoHandle;
}

/** Linux mechanics used by the Task service. */
export interface ShimPlatform {
  /** Spawns a command without letting the reaper steal its exit. */
  spawn(cmd: Deno.Command): Deno.ChildProcess;
  /**
   * Subscribes to reaped exits of re-parented processes (container inits, execs). Exits are
   * only ever delivered live: the platform keeps no history a reused pid could be matched to.
   */
  onExit(listener: (exit: ReapedExit) => void): () => void;
  /**
   * The start time of a live or zombie process in clock ticks since boot, undefined when it is
   * gone. Optional: without it, exits are matched by pid within the start window only.
   */
  startTimeOf?(pid: number): number | undefined;
  /** Clock ticks since boot now, on the clock of {@linkcode ShimPlatform.startTimeOf}. */
  bootTicks?(): number;
  /**
   * Keeps every process that started at or after `ticks` (see {@linkcode ShimPlatform.bootTicks})
   * unreaped until the returned function is called: a process that exits while it is being
   * started keeps its pid until the shim has read the pid and its start time, so no later
   * process can be taken for it. Optional: without it, pid reuse within a start is caught only
   * as far as the start times tell.
   */
  holdExitsSince?(ticks: number): () => void;
  /**
   * Why the shim could never see `pid` exit, or undefined when it can (or cannot tell: the
   * process is gone). Optional: without it, such a pid is not refused at create.
   */
  unseenExit?(pid: number): string | undefined;
  /** Prepares a process's stdio. */
  openIo(
    paths: ProcessStdioPaths,
    ctx: { containerId: string; namespace: string },
  ): Promise<ProcessIoSetup>;
  /**
   * Continues stdio that a live upgrade carried over (what a handle's `carry()` returned in the
   * previous code). Absent: processes with stdio are not carried.
   */
  adoptIo?(carry: ProcessIoCarry): ProcessIoHandle;
  /** Mounts the rootfs mounts onto `target`. */
  mount(mounts: RootfsMount[], target: string): Promise<void>;
  /** Unmounts everything below and at `target`. */
  unmount(target: string): Promise<void>;
  /**
   * A process's cgroups, read while it runs and kept for {@linkcode ShimPlatform.stats} after it
   * has exited; undefined when they cannot be read. Optional.
   */
  cgroupOf?(pid: number): CgroupMembership | undefined;
  /**
   * The shim's own cgroup when `pid` (or `cgroup`, kept from {@linkcode ShimPlatform.cgroupOf})
   * is in it, else undefined: a runtime that made no cgroup for its container (a process it ran
   * with `ctx.spawn`) must not report the shim's figures or OOM kills as the container's.
   */
  inShimCgroup?(pid: number, cgroup?: CgroupMembership): string | undefined;
  /**
   * cgroup statistics of a process, packed as containerd expects: of its cgroups now, or of
   * `cgroup` (kept from {@linkcode ShimPlatform.cgroupOf}) once it has exited.
   */
  stats(pid: number, cgroup?: CgroupMembership): Promise<Any>;
  /** Watches a process's cgroup for OOM kills. */
  watchOom(pid: number, onOom: () => void): Promise<{ close(): void }>;
  /** Sends a signal to a pid. */
  kill(pid: number, signal: number): void;
}
