/**
 * The {@link ShimPlatform} built from sdk/linux: reaper, process stdio, console socket and
 * pty, rootfs mounts, cgroup statistics and OOM notifications.
 *
 * @module
 */

import { pidsWithPidfd, type Reaper } from "../../linux/reaper.ts";
import { kill } from "../../linux/libc.ts";
import { bootTicks, processParent, processStartTime } from "../../linux/proc_stat.ts";
import { ConsoleSocket } from "../../linux/console.ts";
import { ProcessIo } from "../../linux/process_io.ts";
import type { ProcessIoContext } from "../../linux/stdio_targets.ts";
import { mountAll, unmountAll } from "../../linux/mount.ts";
import { parseProcCgroup } from "../../linux/cgroup_paths.ts";
import type { CgroupMembership, ProcessIoSetup, ShimPlatform } from "./platform.ts";
import type { ProcessIoHandle } from "./process.ts";

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
    holdExitsSince: (ticks) => reaper.holdSince(ticks),
    unseenExit: (pid) => {
      const parent = processParent(pid);
      if (parent === undefined) return undefined; // gone: its exit went by the reaper or Deno
      if (parent !== Deno.pid) {
        return `its parent is pid ${parent}, not this shim (pid ${Deno.pid})`;
      }
      // A child Deno spawned outside ctx.spawn: Deno reaps it, and tells nobody but its owner.
      if (pidsWithPidfd().has(pid)) return "it was spawned with Deno.Command outside ctx.spawn";
      return undefined;
    },
    adoptIo: (carry) => {
      const io = ProcessIo.adopt(carry, { reaper });
      return { ...pipesHandle(io), resize: (w, h) => io.resize(w, h), streams: () => io.streams() };
    },
    openIo: (paths, ctx) =>
      paths.terminal
        ? openTerminal(paths, { ...ctx, reaper })
        : openPipes(paths, { ...ctx, reaper }),
    mount: (mounts, target) => mountAll(mounts, target),
    unmount: (target) => unmountAll(target),
    // Loaded on first use: most shims never serve Stats, and start-up cost matters.
    cgroupOf: (pid) => {
      try {
        return procCgroupText(pid);
      } catch {
        return undefined;
      }
    },
    inShimCgroup: (pid, cgroup) => inShimCgroup(pid, cgroup),
    stats: async (pid, cgroup) => (await import("../../linux/cgroups.ts")).cgroupStats(pid, cgroup),
    watchOom: async (pid, onOom) => (await import("../../linux/oom.ts")).watchOom(pid, onOom),
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
    handle: pipesHandle(io),
  };
}

/** The server's handle on piped stdio; it can cross a live upgrade. */
function pipesHandle(io: ProcessIo): ProcessIoHandle {
  return {
    closeStdin: () => io.closeStdin(),
    drain: async (ms) => void await io.drain(ms),
    landed: async () => void await io.landed(),
    close: () => io.close(),
    carry: () => io.carry(),
    inHand: () => io.inHand,
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
  // A ResizePty before the master arrives (the exec's Start still running) is applied to it.
  let size: { width: number; height: number } | undefined;
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
      if (size) pty.resize(size.width, size.height);
    },
    handle: {
      closeStdin: () => io.closeStdin(),
      drain: async (ms) => void await io.drain(ms),
      landed: async () => void await io.landed(),
      async close() {
        clearTimeout(timer);
        abort.abort();
        await socket.close().catch(() => {});
        await io.close();
        await pty?.close();
      },
      resize(width, height) {
        size = { width, height };
        pty?.resize(width, height);
      },
      carry: () => io.carry(),
      inHand: () => io.inHand,
    },
  };
}

/** The shim's own cgroup path when `pid` (or its kept cgroups) is in it, else undefined. */
function inShimCgroup(pid: number, kept?: CgroupMembership): string | undefined {
  let theirs: CgroupMembership, ours: CgroupMembership;
  try {
    theirs = kept ?? procCgroupText(pid);
    ours = procCgroupText(Deno.pid);
  } catch {
    return undefined; // gone: the read that follows says so
  }
  return JSON.stringify(theirs) === JSON.stringify(ours) ? ours.at(-1)?.path ?? "/" : undefined;
}

/** `/proc/<pid>/cgroup`, parsed: one small synchronous read. */
function procCgroupText(pid: number): CgroupMembership {
  return parseProcCgroup(Deno.readTextFileSync(`/proc/${pid}/cgroup`));
}
