/**
 * CPU per `start` for the scale benchmark (bench/scale_bench.ts), from `/proc/<pid>/stat`: the
 * user + system time one side spent over a window of starts, divided by the starts.
 *
 * - `start` processes (the launcher's shell and, when it runs, Deno's `start`; Go's `start`) are
 *   containerd's children, gone by the end: containerd waits for them, so their time, and that of
 *   any child they waited for, lands in containerd's `cutime` + `cstime`. The side's window is
 *   the only thing running, so that delta is theirs (containerd runs nothing else then: the image
 *   is unpacked, the pods use the host's network).
 * - servers and spares (alive at the end) are counted by their own `utime` + `stime` delta (a
 *   process new in the window: all of it), and runc apart: their children's delta (`cutime` +
 *   `cstime`: runc and `runc init`, which they wait for; the containers themselves keep running).
 *
 * Unlike bench/burst_cpu.ts (a system-wide `perf` trace, every process classed, not part of
 * `deno task bench`), this needs nothing but `/proc`, so it runs in every part; it misses a
 * server or spare that exited within the window (none does while its containers run).
 *
 * @module
 */

import type { PrivateContainerd } from "../sdk/testing/containerd.ts";
import { shimProcesses, type Side } from "./scale_node.ts";

const TICKS = 100; // USER_HZ on Linux

/** One process's clock ticks: its own, and its waited-for children's. */
interface Ticks {
  self: number;
  children: number;
}

/** A side's CPU counters at one moment. */
export interface CpuSnapshot {
  /** containerd's waited-for children (the `start` processes), ticks. */
  containerdChildren: number;
  /** Every shim process of the side (servers, spares), pid → ticks. */
  shims: Map<number, Ticks>;
}

/** CPU seconds per start over a window. */
export interface StartCpu {
  /** `start` processes, servers and spares, per start (runc not included), s. */
  shimS: number;
  /** runc (the servers' waited-for children), per start, s. */
  runcS: number;
  /** Starts the window's CPU was divided by. */
  starts: number;
  /** Of {@linkcode shimS}: the `start` processes' (containerd's waited-for children), per start, s. */
  startsS: number;
  /** Of {@linkcode shimS}: the processes waiting as spares at the end, per start, s. */
  sparesS: number;
}

function ticksOf(pid: number): Ticks | undefined {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime, stime, cutime, cstime: fields 14-17, i.e. 11-14 after the comm.
    return { self: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]) };
  } catch {
    return undefined; // gone
  }
}

/** The side's counters now. */
export function cpuSnapshot(c: PrivateContainerd, side: Side): CpuSnapshot {
  const shims = new Map<number, Ticks>();
  for (const p of shimProcesses(c, side)) {
    const t = ticksOf(p.pid);
    if (t) shims.set(p.pid, t);
  }
  return { containerdChildren: (c.pid && ticksOf(c.pid)?.children) || 0, shims };
}

/** CPU per start between `before` and now, over `starts` starts (NaN figures for none). */
export function startCpuSince(
  before: CpuSnapshot,
  c: PrivateContainerd,
  side: Side,
  starts: number,
): StartCpu {
  const now = cpuSnapshot(c, side);
  const spares = new Set(side === "skiff" ? c.spares().map((s) => s.pid) : []);
  const started = now.containerdChildren - before.containerdChildren;
  let self = started;
  let spare = 0;
  let children = 0;
  for (const [pid, t] of now.shims) {
    const b = before.shims.get(pid) ?? { self: 0, children: 0 };
    self += t.self - b.self;
    if (spares.has(pid)) spare += t.self - b.self;
    children += t.children - b.children;
  }
  const per = (ticks: number) => starts > 0 ? ticks / TICKS / starts : NaN;
  return {
    shimS: per(self),
    runcS: per(children),
    starts,
    startsS: per(started),
    sparesS: per(spare),
  };
}
