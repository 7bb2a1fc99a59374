/**
 * The CRI parts of the scale benchmark (bench/scale_bench.ts): N host-network pods of one side,
 * started as kubelet starts them (`RunPodSandbox`, then `CreateContainer` and `StartContainer`
 * of one sleeping busybox container; a bounded number of pods in flight), timed to the last
 * `StartContainer` and to all containers reported RUNNING; the shims' PSS after they settle (one
 * shim per pod: both shims group a pod's containers by its sandbox id); then every pod stopped
 * and removed. Every CRI call has a deadline, so a hang fails the part and never wedges the run.
 *
 * @module
 */

import { CRI_NAMESPACE, type CriClient, criClient } from "../sdk/testing/cri_client.ts";
import { criContainerConfig, criPodConfig } from "../sdk/testing/cri_container.ts";
import { BUSYBOX_IMAGE_REF } from "../sdk/testing/image.ts";
import { ContainerState } from "../proto/gen/runtime/v1/api_pb.ts";
import { countersBefore, shimsCost, type ShimsFigure } from "./scale_ctr.ts";
import {
  HANDLER,
  type ScaleNode,
  settle,
  type Side,
  spareStats,
  waitForSpare,
  waitShimsGone,
} from "./scale_node.ts";
import { sleep } from "../sdk/testing/processes.ts";

/** Deadline of each CRI call: generous; only there so that a hang fails instead of wedging. */
export const CALL = { timeoutMs: 120_000 };

/** A CRI figure: the `ctr` figure's fields, and the time until every container was RUNNING. */
export interface PodsFigure extends ShimsFigure {
  /** From the first `RunPodSandbox` until `ListContainers` showed every container RUNNING, ms. */
  runningMs: number;
  /** Medians of each pod's three calls, ms. */
  callsMs: { runPod: number; create: number; start: number };
}

/**
 * Runs `f(0..n-1)` with at most `inflight` running at once; settles every one.
 *
 * @returns the messages of the calls that threw
 */
export async function pool(
  n: number,
  inflight: number,
  f: (i: number) => Promise<void>,
): Promise<string[]> {
  let next = 0;
  const errors: string[] = [];
  const worker = async () => {
    while (next < n) {
      const i = next++;
      try {
        await f(i);
      } catch (e) {
        errors.push((e as Error).message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(inflight, n) }, worker));
  return errors;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
}

/** Imports busybox into CRI's namespace and waits until CRI lists it (it learns by events). */
export async function prepareCri(node: ScaleNode): Promise<CriClient> {
  await node.c.importBusyboxImage(CRI_NAMESPACE);
  const cri = criClient(node.c.address);
  const until = Date.now() + 60_000;
  while (!(await cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, CALL)).image) {
    if (Date.now() > until) throw new Error("CRI never listed the busybox image");
    await sleep(100);
  }
  return cri;
}

/** The pods and containers one part started, for the clean-up. */
export interface Started {
  pods: string[];
  containers: string[];
}

/** Runs one pod as kubelet does; records its ids and each call's time. */
export async function runPod(
  node: ScaleNode,
  cri: CriClient,
  side: Side,
  name: string,
  started: Started,
  calls: { runPod: number[]; create: number[]; start: number[] },
): Promise<void> {
  const config = criPodConfig(node.c, name, { namespace: "skiff-scale" });
  await Deno.mkdir(config.logDirectory, { recursive: true });
  let t = performance.now();
  const { podSandboxId } = await cri.runtime.runPodSandbox(
    { config, runtimeHandler: HANDLER[side] },
    CALL,
  );
  started.pods.push(podSandboxId);
  calls.runPod.push(performance.now() - t);
  t = performance.now();
  const { containerId } = await cri.runtime.createContainer({
    podSandboxId,
    config: criContainerConfig("sleep", ["sleep", "3600"]),
    sandboxConfig: config,
  }, CALL);
  started.containers.push(containerId);
  calls.create.push(performance.now() - t);
  t = performance.now();
  await cri.runtime.startContainer({ containerId }, CALL);
  calls.start.push(performance.now() - t);
}

/** Polls ListContainers until every one of `ids` is RUNNING (at most `ms`). */
export async function allRunning(cri: CriClient, ids: string[], ms = 300_000): Promise<boolean> {
  const want = new Set(ids);
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const { containers } = await cri.runtime.listContainers({}, CALL);
    const running = containers.filter((x) =>
      want.has(x.id) && x.state === ContainerState.CONTAINER_RUNNING
    );
    if (running.length === want.size) return true;
    await sleep(100);
  }
  return false;
}

/**
 * Starts one pod of the side and removes it (page cache, CRI's paths; skiff: the first spare),
 * then waits for skiff's spare.
 */
export async function warmUpCri(node: ScaleNode, cri: CriClient, side: Side): Promise<void> {
  const started: Started = { pods: [], containers: [] };
  try {
    await runPod(node, cri, side, `${side}-warm`, started, { runPod: [], create: [], start: [] });
  } finally {
    await removePods(node, cri, side, started);
  }
  if (side === "skiff" && !(await waitForSpare(node.c))) {
    throw new Error("skiff's warm spare did not come within 60 s of the warm-up pod");
  }
}

/** Starts `n` pods of the side with `inflight` at once, measures, and removes them all. */
export async function criPods(
  node: ScaleNode,
  cri: CriClient,
  side: Side,
  n: number,
  inflight: number,
): Promise<PodsFigure> {
  const c = node.c;
  const started: Started = { pods: [], containers: [] };
  const calls = { runPod: [] as number[], create: [] as number[], start: [] as number[] };
  const before = countersBefore(c, side);
  try {
    const t0 = performance.now();
    const errors = await pool(
      n,
      inflight,
      (i) => runPod(node, cri, side, `${side}-${i}`, started, calls),
    );
    const wallMs = performance.now() - t0;
    const ok = await allRunning(cri, started.containers);
    const runningMs = ok ? performance.now() - t0 : NaN;
    const after = spareStats(c);
    await settle();
    return {
      wallMs,
      runningMs,
      callsMs: {
        runPod: median(calls.runPod),
        create: median(calls.create),
        start: median(calls.start),
      },
      startMs: [],
      failed: errors.length,
      ...(errors[0] ? { firstError: errors[0] } : {}),
      ...shimsCost(c, side, before, after, calls.start.length),
    };
  } finally {
    await removePods(node, cri, side, started);
  }
}

/** Stops and removes the pods (their containers go with them), 10 at a time; waits for the shims. */
export async function removePods(
  node: ScaleNode,
  cri: CriClient,
  side: Side,
  started: Started,
): Promise<void> {
  const errors = await pool(started.pods.length, 10, async (i) => {
    const podSandboxId = started.pods[i]!;
    await cri.runtime.stopPodSandbox({ podSandboxId }, CALL);
    await cri.runtime.removePodSandbox({ podSandboxId }, CALL);
  });
  if (errors.length > 0) console.error(`${side}: ${errors.length} pods not removed: ${errors[0]}`);
  const left = await waitShimsGone(node.c, side, 120_000);
  if (left.length > 0) console.error(`${side}: shims still serving after the pods went: ${left}`);
}
