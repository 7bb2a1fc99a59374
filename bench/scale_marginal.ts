/**
 * The `marginal` part of the scale benchmark (bench/scale_bench.ts): what one more pod costs in
 * a server that already serves pods. `k` pods of one side through CRI, one at a time (as the
 * other CRI parts run them: `RunPodSandbox`, `CreateContainer`, `StartContainer` of a sleeping
 * busybox): the side's total shim PSS (skiff's waiting spare included) after the first pod and
 * after the k-th, each after settling, and the CPU per start of pods 2..k. With shared servers
 * of at least `k` pods, pods 2..k join the first pod's server, so `(PSS_k - PSS_1) / (k - 1)` is
 * a pod's cost inside a shared server; with one shim per pod (Go, skiff's default) it is a
 * whole shim's.
 *
 * @module
 */

import type { CriClient } from "../sdk/testing/cri_client.ts";
import { allRunning, pool, removePods, runPod, type Started } from "./scale_cri.ts";
import { cpuSnapshot, type StartCpu, startCpuSince } from "./scale_cpu.ts";
import {
  pssMiB,
  type ScaleNode,
  settle,
  shimProcesses,
  type Side,
  waitingSpares,
} from "./scale_node.ts";

/** The side's shim processes at one moment. */
export interface MarginalPoint {
  /** Pods running. */
  pods: number;
  /** Shim processes (servers and waiting spares). */
  processes: number;
  /** Of those, skiff's waiting spares. */
  spares: number;
  /** Servers: shim processes less waiting spares. */
  servers: number;
  /** Summed PSS of every shim process, spares included, MiB. */
  pssMiB: number;
  /** The same without the waiting spares: the servers alone, MiB. */
  serversPssMiB: number;
}

/** What the part measured for one side. */
export interface MarginalFigure {
  /** After the first pod. */
  first: MarginalPoint;
  /** After the last. */
  last: MarginalPoint;
  /**
   * `(last.serversPssMiB - first.serversPssMiB) / (last.pods - first.pods)`, MiB: the servers
   * alone, since a shared server spawns the next spare as it fills (between the two points).
   */
  perPodMiB: number;
  /** CPU per start of pods 2..k. */
  startCpu: StartCpu;
  /** Pods that failed, with the first error. */
  failed: number;
  firstError?: string;
}

/** Settles and reads the side's processes (skiff's spares apart). */
async function point(node: ScaleNode, side: Side, pods: number): Promise<MarginalPoint> {
  await settle();
  const procs = shimProcesses(node.c, side).map((p) => p.pid);
  const spares = new Set(side === "skiff" ? waitingSpares(node.c) : []);
  return {
    pods,
    processes: procs.length,
    spares: procs.filter((p) => spares.has(p)).length,
    servers: procs.filter((p) => !spares.has(p)).length,
    pssMiB: pssMiB(procs),
    serversPssMiB: pssMiB(procs.filter((p) => !spares.has(p))),
  };
}

/** Starts `k` pods of the side one at a time, measures after the first and the last, removes them. */
export async function marginalPods(
  node: ScaleNode,
  cri: CriClient,
  side: Side,
  k: number,
): Promise<MarginalFigure> {
  const started: Started = { pods: [], containers: [] };
  const calls = { runPod: [] as number[], create: [] as number[], start: [] as number[] };
  const one = (i: number) => runPod(node, cri, side, `${side}-marginal-${i}`, started, calls);
  try {
    const errors = await pool(1, 1, one);
    if (!(await allRunning(cri, started.containers))) errors.push("first pod never RUNNING");
    const first = await point(node, side, calls.start.length);
    const before = cpuSnapshot(node.c, side);
    const startsBefore = calls.start.length;
    errors.push(...await pool(k - 1, 1, (i) => one(i + 1)));
    if (!(await allRunning(cri, started.containers))) errors.push("pods never all RUNNING");
    const last = await point(node, side, calls.start.length);
    return {
      first,
      last,
      perPodMiB: last.pods > first.pods
        ? (last.serversPssMiB - first.serversPssMiB) / (last.pods - first.pods)
        : NaN,
      startCpu: startCpuSince(before, node.c, side, calls.start.length - startsBefore),
      failed: errors.length,
      ...(errors[0] ? { firstError: errors[0] } : {}),
    };
  } finally {
    await removePods(node, cri, side, started);
  }
}
