/**
 * The {@link ShimPlatform} built from sdk/linux: reaper, process stdio, console socket and
 * pty, rootfs mounts, cgroup statistics and OOM notifications.
 *
 * @module
 */

import type { Reaper } from "../../linux/reaper.ts";
import { kill } from "../../linux/libc.ts";
import { bootTicks, processStartTime } from "../../linux/proc_stat.ts";
import { ConsoleSocket } from "../../linux/console.ts";
import { ProcessIo, type ProcessIoContext } from "../../linux/process_io.ts";
import { mountAll, unmountAll } from "../../linux/mount.ts";
import type { ProcessIoSetup, ShimPlatform } from "./platform.ts";
import { Code, statusError } from "../../ttrpc/status_error.ts";

/** How long to wait for the runtime to hand over a terminal's pty master. */
const PTY_TIMEOUT_MS = 10_000;

/**
 * Builds the Linux platform on top of a started {@link Reaper}.
 *
 * @example Usage
 * ```ts ignore
 * const platform = linuxPlatform(Reaper.start());
 * ```
 */
export function linuxPlatform(reaper: Reaper): ShimPlatform {
  return {
    spawn: (cmd) => reaper.spawn(cmd),
    onExit: (listener) => reaper.onExit(listener),
    startTimeOf: (pid) => processStartTime(pid),
    bootTicks: () => bootTicks(),
    openIo: (paths, ctx) =>
      paths.terminal
        ? openTerminal(paths, { ...ctx, reaper })
        : openPipes(paths, { ...ctx, reaper }),
    mount: (mounts, target) => mountAll(mounts, target),
    unmount: (target) => unmountAll(target),
    // Loaded on first use: most shims never serve Stats, and start-up cost matters.
    stats: async (pid) => {
      ownCgroupRefused(pid, "stats");
      return (await import("../../linux/cgroups.ts")).cgroupStats(pid);
    },
    watchOom: async (pid, onOom) => {
      ownCgroupRefused(pid, "OOM events");
      return (await import("../../linux/oom.ts")).watchOom(pid, onOom);
    },
    kill: (pid, signal) => kill(pid, signal),
  };
}

async function openPipes(
  paths: { stdin: string; stdout: string; stderr: string; terminal: boolean },
  ctx: ProcessIoContext,
): Promise<ProcessIoSetup> {
  const io = await ProcessIo.open(paths, ctx);
  return {
    io: {
      terminal: false,
      stdio: io.stdio,
      attach: (child) => io.attach(child),
      streams: () => io.streams(),
    },
    ready: () => Promise.resolve(),
    handle: {
      closeStdin: () => io.closeStdin(),
      drain: async (ms) => void await io.drain(ms),
      close: () => io.close(),
    },
  };
}

async function openTerminal(
  paths: { stdin: string; stdout: string; stderr: string; terminal: boolean },
  ctx: ProcessIoContext,
): Promise<ProcessIoSetup> {
  // The pty carries both output streams; stderr is unused with a terminal.
  const io = await ProcessIo.open({ ...paths, stderr: "", terminal: true }, ctx);
  const socket = await ConsoleSocket.create();
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), PTY_TIMEOUT_MS);
  // Accept concurrently with `runtime create`: the runtime connects during create.
  const master = socket.receiveMaster(abort.signal);
  master.catch(() => {});
  let pty: Awaited<typeof master> | undefined;
  // A runtime that takes the streams owns the terminal: no pty master will come.
  let streams = false;
  return {
    io: {
      terminal: true,
      consoleSocket: socket.path,
      stdio: io.stdio,
      attach() {}, // the pty carries the bytes
      streams() {
        streams = true;
        return io.streams();
      },
    },
    async ready() {
      if (streams) {
        clearTimeout(timer);
        abort.abort();
        await socket.close().catch(() => {});
        return;
      }
      try {
        pty = await master;
      } finally {
        clearTimeout(timer);
        await socket.close();
      }
      io.attachPty(pty);
    },
    handle: {
      closeStdin: () => io.closeStdin(),
      drain: async (ms) => void await io.drain(ms),
      async close() {
        clearTimeout(timer);
        abort.abort();
        await socket.close().catch(() => {});
        await io.close();
        await pty?.close();
      },
      resize: (w, h) => pty?.resize(w, h),
    },
  };
}

/**
 * Refuses to read `pid`'s cgroup as its container's when it is the shim's own: a runtime that
 * made no cgroup (a process it ran with `ctx.spawn`) would otherwise report the shim's memory
 * and CPU, or the shim's OOM kills, as the container's. Unimplemented, as for any runtime that
 * cannot tell: such a runtime implements `ContainerRuntime.stats` and `watchOom` itself.
 */
function ownCgroupRefused(pid: number, what: string): void {
  let theirs: string, ours: string;
  try {
    theirs = Deno.readTextFileSync(`/proc/${pid}/cgroup`);
    ours = Deno.readTextFileSync("/proc/self/cgroup");
  } catch {
    return; // gone: the read that follows says so
  }
  if (theirs !== ours) return;
  throw statusError(
    `${what} of pid ${pid}: it runs in the shim's own cgroup (${
      theirs.trim().split("\n").at(-1)
    }), not one of its container's; the runtime reports its own (ContainerRuntime.${
      what === "stats" ? "stats" : "watchOom"
    })`,
    Code.Unimplemented,
  );
}
