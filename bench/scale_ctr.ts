/**
 * The `ctr` parts of the scale benchmark (bench/scale_bench.ts): a burst of N `ctr run -d`
 * started all at once, and N started one by one (shim_bench's "10 one-container shims"), each
 * measured for one side (Go or skiff) under a {@linkcode ScaleNode}: wall time, the shims' PSS
 * after they settle (every shim process of the side, skiff's waiting spare included), their CPU
 * time, and how many of skiff's starts a warm spare took.
 *
 * @module
 */

import { ctrRun } from "../sdk/testing/ctr.ts";
import { type CpuSnapshot, cpuSnapshot, type StartCpu, startCpuSince } from "./scale_cpu.ts";
import type { PrivateContainerd } from "../sdk/testing/containerd.ts";
import {
  cpuSeconds,
  pssMiB,
  RUNTIME,
  type ScaleNode,
  settle,
  shimProcesses,
  type Side,
  spareStats,
  waitForSpare,
  waitingSpares,
  waitShimsGone,
} from "./scale_node.ts";

/** The namespace of the `ctr` parts. */
export const CTR_NS = "skiff-scale";
/** Longest one `ctr run -d` of a burst may take before it counts as failed. */
const RUN_TIMEOUT_MS = 120_000;

/** What one side's containers cost. */
export interface ShimsFigure {
  /** Wall time from the first launch to the last one returned, ms. */
  wallMs: number;
  /** Each start's own time (launch to return), ms, sorted. */
  startMs: number[];
  /** Starts that failed, with the first error. */
  failed: number;
  firstError?: string;
  /** Shim processes counted (servers and waiting spares). */
  processes: number;
  /** Of those, skiff's waiting spares. */
  spares: number;
  /** Summed PSS of all of them after settling, MiB. */
  pssMiB: number;
  /** Summed PSS of the servers alone (spares left out), MiB. */
  serversPssMiB: number;
  /** CPU seconds the shim processes used themselves, and their waited-for children (runc). */
  cpuS: { self: number; children: number };
  /** skiff: starts handed to a warm spare / started cold, during the timed starts. */
  spare?: { adopted: number; cold: number };
  /** Servers: shim processes less waiting spares (with shared servers, fewer than pods). */
  servers: number;
  /** CPU per start over the timed starts and the settling (bench/scale_cpu.ts). */
  startCpu: StartCpu;
}

/** Counters read before the timed starts, for {@linkcode shimsCost}. */
export interface Before {
  stats: { adopted: number; cold: number };
  cpu: CpuSnapshot;
}

/** The counters before the timed starts. */
export function countersBefore(c: PrivateContainerd, side: Side): Before {
  return { stats: spareStats(c), cpu: cpuSnapshot(c, side) };
}

/**
 * The side's shim processes after settling: how many (spares apart), their PSS and CPU, CPU per
 * start since `before` over `starts` starts, and skiff's spare counters from `before` to `after`
 * (read when the starts returned). Shared by the ctr and CRI parts.
 */
export function shimsCost(
  c: PrivateContainerd,
  side: Side,
  before: Before,
  after: { adopted: number; cold: number },
  starts: number,
): Pick<
  ShimsFigure,
  "processes" | "spares" | "pssMiB" | "serversPssMiB" | "cpuS" | "spare" | "servers" | "startCpu"
> {
  const procs = shimProcesses(c, side).map((p) => p.pid);
  const spares = new Set(side === "skiff" ? waitingSpares(c) : []);
  const stats = before.stats;
  return {
    servers: procs.filter((p) => !spares.has(p)).length,
    startCpu: startCpuSince(before.cpu, c, side, starts),
    processes: procs.length,
    spares: procs.filter((p) => spares.has(p)).length,
    pssMiB: pssMiB(procs),
    serversPssMiB: pssMiB(procs.filter((p) => !spares.has(p))),
    cpuS: cpuSeconds(procs),
    ...(side === "skiff"
      ? { spare: { adopted: after.adopted - stats.adopted, cold: after.cold - stats.cold } }
      : {}),
  };
}

/** Runs one `ctr run --rm true` of the side (page cache; skiff: the first spare) and waits for the spare. */
export async function warmUp(node: ScaleNode, side: Side, image: string): Promise<void> {
  const r = await ctrRun(node.c, {
    image,
    id: `${side}-warm-${crypto.randomUUID().slice(0, 6)}`,
    runtime: RUNTIME[side],
    namespace: CTR_NS,
    args: ["true"],
    timeoutMs: RUN_TIMEOUT_MS,
  });
  if (r.code !== 0) throw new Error(`${side} warm-up ctr run failed (${r.code}): ${r.stderr}`);
  if (side === "skiff" && !(await waitForSpare(node.c))) {
    throw new Error("skiff's warm spare did not come within 60 s of the warm-up run");
  }
}

/**
 * Starts `n` sleeping containers of the side, all at once (`parallel`) or one after the other,
 * measures them after {@linkcode settle}, then removes them.
 */
export async function ctrContainers(
  node: ScaleNode,
  side: Side,
  image: string,
  n: number,
  parallel: boolean,
): Promise<ShimsFigure> {
  const c = node.c;
  const tag = parallel ? "burst" : "seq";
  const ids = Array.from({ length: n }, (_, i) => `${side}-${tag}-${i}`);
  const before = countersBefore(c, side);
  const startMs: number[] = [];
  const errors: string[] = [];
  const one = async (id: string) => {
    const t = performance.now();
    const r = await ctrRun(c, {
      image,
      id,
      runtime: RUNTIME[side],
      namespace: CTR_NS,
      detach: true,
      args: ["sleep", "3600"],
      timeoutMs: RUN_TIMEOUT_MS,
    });
    if (r.code !== 0) errors.push(`${id}: ${r.timedOut ? "timed out" : r.stderr.trim()}`);
    else startMs.push(performance.now() - t);
  };
  const t0 = performance.now();
  try {
    if (parallel) await Promise.all(ids.map(one));
    else for (const id of ids) await one(id);
    const wallMs = performance.now() - t0;
    const after = spareStats(c);
    await settle();
    return {
      wallMs,
      startMs: startMs.sort((a, b) => a - b),
      failed: errors.length,
      ...(errors[0] ? { firstError: errors[0] } : {}),
      ...shimsCost(c, side, before, after, startMs.length),
    };
  } finally {
    await removeContainers(c, side, ids);
  }
}

/** Kills and deletes the containers, then waits until the side's servers are gone. */
async function removeContainers(c: PrivateContainerd, side: Side, ids: string[]): Promise<void> {
  const opts = { namespace: CTR_NS, timeoutMs: 30_000 };
  // Five at a time: quick, without a burst of deletes of its own.
  for (let i = 0; i < ids.length; i += 5) {
    await Promise.all(
      ids.slice(i, i + 5).map(async (id) => {
        await c.ctr(["task", "delete", "-f", id], opts);
        await c.ctr(["container", "delete", id], opts);
      }),
    );
  }
  const left = await waitShimsGone(c, side);
  if (left.length > 0) console.error(`${side}: shims still serving after the clean-up: ${left}`);
}
