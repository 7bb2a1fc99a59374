/**
 * Node-scale benchmark (issue 19): skiff's runc example (bundled launchers, warm spare on: the
 * default install) against Debian's Go `containerd-shim-runc-v2`, both under the same private
 * containerd in the same run, each part on a fresh containerd:
 *
 * - `burst`: N `ctr run -d` started at once (all N in flight): wall time from the first launch
 *   to the last one returned, then the PSS of every shim process of the side after 8 s
 *   (skiff's waiting spare included: the node pays for it);
 * - `cri-burst`: N pods through CRI, 10 in flight, each `RunPodSandbox` + `CreateContainer` +
 *   `StartContainer` of a sleeping busybox, as kubelet does: wall time, time to all RUNNING,
 *   shim PSS (one shim per pod: both group by sandbox id);
 * - `density`: the same with P pods (default 110, kubelet's default maximum);
 * - `floor`: 10 one-container shims started one by one (shim_bench's figure, spare included)
 *   next to as many idle Deno processes as skiff's shim processes counted, started with the
 *   launcher's exact flags and environment (bench/scale_floor.ts);
 * - `marginal`: K pods through CRI one at a time, PSS after the first and after the K-th: a pod's
 *   cost in a server that already serves pods (bench/scale_marginal.ts; by default only with
 *   `--shared`).
 *
 * Every part also reports the CPU per `start` (bench/scale_cpu.ts): the `start` processes',
 * servers' and spares' user + system time over the timed starts, divided by the starts.
 *
 * `--shared N` installs skiff with shared servers (`sharedPods: N`, `SKIFF_SHARED_PODS=N`: up to N
 * pods per server process); the Go side is unchanged (one shim per pod). The table says so.
 *
 * Between sides and parts every container and pod is removed and the shims' exit awaited.
 * Benchmarks are measurements: nothing here fails on a slow number.
 *
 * Run: `deno run -A bench/scale_bench.ts [--containerd 2.1|1.6|2.4] [--burst 20] [--pods 110]
 * [--inflight 10] [--shared N] [--marginal 8] [--only burst|cri-burst|density|floor|marginal]`
 * (plus shim_bench's `--mode`, `--v8-flags`, `--inline`). Needs root, runc and busybox-static (tests/setup/prepare.sh).
 *
 * @module
 */

import { parseArgs } from "node:util";
import type { ExampleInstallOptions } from "../sdk/install/examples.ts";
import { benchInstallOptions } from "./install_options.ts";
import { loadavg, type ScaleNode, type Side, SIDES, startNode } from "./scale_node.ts";
import { CTR_NS, ctrContainers, warmUp } from "./scale_ctr.ts";
import { criPods, prepareCri, warmUpCri } from "./scale_cri.ts";
import { type FloorFigure, idleDenoFloor } from "./scale_floor.ts";
import { type MarginalFigure, marginalPods } from "./scale_marginal.ts";
import { type ScaleFigures, scaleMarkdown } from "./scale_report.ts";

/** The parts, in the order they run. */
export const PARTS = ["burst", "cri-burst", "density", "floor", "marginal"] as const;
/** One part's name. */
export type Part = typeof PARTS[number];

/** Options of {@linkcode runScaleBench}. */
export interface ScaleBenchOptions {
  /** containerd version prefix. Default `2.1`. */
  containerd?: string;
  /** Containers of the `ctr` burst and pods of the CRI burst. Default 20. */
  burst?: number;
  /** Pods of the density part. Default 110. */
  pods?: number;
  /** CRI pods in flight. Default 10. */
  inflight?: number;
  /** Parts to run. Default all; `marginal` only with {@linkcode shared} or {@linkcode marginal}. */
  only?: Part[];
  /**
   * skiff with shared servers: up to this many pods per server process (2 or more; installs
   * with `sharedPods`). Default: one pod per server, as installed by default.
   */
  shared?: number;
  /** Pods of the marginal part. Default {@linkcode shared}, else 8. */
  marginal?: number;
  /** How skiff is installed (bench/install_options.ts). */
  install?: Omit<ExampleInstallOptions, "prefix">;
}

/** One part's figures for both sides, and the machine's state around it. */
export interface PartResult<F> {
  figures: Record<Side, F>;
  seconds: number;
  load: [string, string];
  version: string;
  goShim: string;
}

/** Everything one run measured. */
export interface ScaleBenchResult extends ScaleFigures {
  /** Markdown tables with skiff/Go (and skiff/floor) ratios. */
  markdown: string;
}

/** Runs `body` for each side on a fresh node, timing the part and noting the load around it. */
async function onNode<F>(
  o: ScaleBenchOptions,
  cri: boolean,
  body: (node: ScaleNode, side: Side) => Promise<F>,
  after?: (node: ScaleNode, figures: Record<Side, F>) => Promise<void>,
): Promise<PartResult<F>> {
  const t0 = performance.now();
  const load0 = loadavg();
  const install = { ...o.install, ...(o.shared ? { sharedPods: o.shared } : {}) };
  const node = await startNode(o.containerd ?? "2.1", { cri, install });
  try {
    const figures = {} as Record<Side, F>;
    for (const side of SIDES) figures[side] = await body(node, side);
    await node.stopContainerd();
    await after?.(node, figures);
    return {
      figures,
      seconds: (performance.now() - t0) / 1000,
      load: [load0, loadavg()],
      version: node.c.version,
      goShim: node.goShim,
    };
  } finally {
    await node.stop();
  }
}

/** Runs the parts asked for and returns their figures and tables. */
export async function runScaleBench(o: ScaleBenchOptions = {}): Promise<ScaleBenchResult> {
  const only = new Set<Part>(
    o.only ?? PARTS.filter((p) => o.shared || o.marginal || p !== "marginal"),
  );
  const burst = o.burst ?? 20;
  const inflight = o.inflight ?? 10;
  const marginal = o.marginal ?? o.shared ?? 8;
  const out: ScaleFigures = {};
  if (only.has("burst")) {
    let image = "";
    out.burst = await onNode(o, false, async (node, side) => {
      image ||= await node.c.importBusyboxImage(CTR_NS);
      await warmUp(node, side, image);
      return await ctrContainers(node, side, image, burst, true);
    });
  }
  for (const [part, n] of [["cri-burst", burst], ["density", o.pods ?? 110]] as const) {
    if (!only.has(part)) continue;
    let cri: Awaited<ReturnType<typeof prepareCri>> | undefined;
    const r = await onNode(o, true, async (node, side) => {
      cri ??= await prepareCri(node);
      await warmUpCri(node, cri, side);
      return await criPods(node, cri, side, n, inflight);
    });
    if (part === "cri-burst") out.criBurst = r;
    else out.density = r;
  }
  if (only.has("floor")) {
    let image = "";
    let floor: FloorFigure | undefined;
    const r = await onNode(o, false, async (node, side) => {
      image ||= await node.c.importBusyboxImage(CTR_NS);
      await warmUp(node, side, image);
      return await ctrContainers(node, side, image, 10, false);
    }, async (node, figures) => {
      // containerd and every shim are gone: the idle processes share pages with none of them.
      floor = await idleDenoFloor(node.launcher, figures.skiff.processes);
    });
    out.floor = { ...r, floor: floor! };
  }
  if (only.has("marginal")) {
    let cri: Awaited<ReturnType<typeof prepareCri>> | undefined;
    out.marginal = await onNode<MarginalFigure>(o, true, async (node, side) => {
      cri ??= await prepareCri(node);
      await warmUpCri(node, cri, side);
      return await marginalPods(node, cri, side, marginal);
    });
  }
  const sizes = { burst, inflight, pods: o.pods ?? 110, marginal };
  return {
    ...out,
    markdown: scaleMarkdown(out, { ...sizes, ...(o.shared ? { shared: o.shared } : {}) }),
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    strict: false,
    options: {
      containerd: { type: "string" },
      burst: { type: "string" },
      pods: { type: "string" },
      inflight: { type: "string" },
      only: { type: "string", multiple: true },
      shared: { type: "string" },
      marginal: { type: "string" },
    },
  });
  // Unknown options are an error; --mode, --v8-flags and --inline go to benchInstallOptions.
  const known = [
    ...["containerd", "burst", "pods", "inflight", "only", "shared", "marginal"],
    ...["mode", "v8-flags", "inline"],
  ];
  const unknown = Object.keys(values).filter((k) => !known.includes(k));
  if (unknown.length > 0) throw new TypeError(`unknown option(s): --${unknown.join(", --")}`);
  const num = (name: string, v: unknown) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) {
      throw new TypeError(`--${name} "${v}": expected a positive integer`);
    }
    return n;
  };
  const only = (values.only as string[] | undefined)?.flatMap((x) => x.split(","));
  for (const p of only ?? []) {
    if (!(PARTS as readonly string[]).includes(p)) {
      throw new TypeError(`--only "${p}": expected one of ${PARTS.join(", ")}`);
    }
  }
  const burst = num("burst", values.burst);
  const pods = num("pods", values.pods);
  const inflight = num("inflight", values.inflight);
  const shared = num("shared", values.shared);
  if (shared === 1) throw new TypeError(`--shared 1: expected 2 or more pods per server`);
  const marginal = num("marginal", values.marginal);
  if (marginal === 1) throw new TypeError(`--marginal 1: expected 2 or more pods`);
  const res = await runScaleBench({
    ...(typeof values.containerd === "string" ? { containerd: values.containerd } : {}),
    ...(burst ? { burst } : {}),
    ...(pods ? { pods } : {}),
    ...(inflight ? { inflight } : {}),
    ...(shared ? { shared } : {}),
    ...(marginal ? { marginal } : {}),
    ...(only ? { only: only as Part[] } : {}),
    install: benchInstallOptions(Deno.args),
  });
  console.log(res.markdown);
}
