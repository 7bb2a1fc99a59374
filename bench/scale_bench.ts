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
 *   launcher's exact flags and environment (bench/scale_floor.ts).
 *
 * Between sides and parts every container and pod is removed and the shims' exit awaited.
 * Benchmarks are measurements: nothing here fails on a slow number.
 *
 * Run: `deno run -A bench/scale_bench.ts [--containerd 2.1|1.6|2.4] [--burst 20] [--pods 110]
 * [--inflight 10] [--only burst|cri-burst|density|floor]` (plus shim_bench's `--mode`,
 * `--v8-flags`, `--inline`). Needs root, runc and busybox-static (tests/setup/prepare.sh).
 *
 * @module
 */

import { parseArgs } from "node:util";
import type { ExampleInstallOptions } from "../sdk/install/examples.ts";
import { benchInstallOptions } from "./install_options.ts";
import { loadavg, type ScaleNode, type Side, SIDES, startNode } from "./scale_node.ts";
import { CTR_NS, ctrContainers, type ShimsFigure, warmUp } from "./scale_ctr.ts";
import { criPods, type PodsFigure, prepareCri, warmUpCri } from "./scale_cri.ts";
import { type FloorFigure, idleDenoFloor } from "./scale_floor.ts";

/** The parts, in the order they run. */
export const PARTS = ["burst", "cri-burst", "density", "floor"] as const;
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
  /** Parts to run. Default all. */
  only?: Part[];
  /** How skiff is installed (bench/install_options.ts). */
  install?: Omit<ExampleInstallOptions, "prefix">;
}

/** One part's figures for both sides, and the machine's state around it. */
interface PartResult<F> {
  figures: Record<Side, F>;
  seconds: number;
  load: [string, string];
  version: string;
  goShim: string;
}

/** Everything one run measured. */
export interface ScaleBenchResult {
  burst?: PartResult<ShimsFigure>;
  criBurst?: PartResult<PodsFigure>;
  density?: PartResult<PodsFigure>;
  floor?: PartResult<ShimsFigure> & { floor: FloorFigure };
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
  const node = await startNode(o.containerd ?? "2.1", {
    cri,
    ...(o.install ? { install: o.install } : {}),
  });
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
  const only = new Set<Part>(o.only ?? PARTS);
  const burst = o.burst ?? 20;
  const inflight = o.inflight ?? 10;
  const out: Omit<ScaleBenchResult, "markdown"> = {};
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
  return { ...out, markdown: scaleMarkdown(out, burst, inflight, o.pods ?? 110) };
}

const f1 = (n: number) => Number.isFinite(n) ? n.toFixed(1) : "–";
const f2 = (n: number) => Number.isFinite(n) ? n.toFixed(2) : "–";
const s2 = (ms: number) => Number.isFinite(ms) ? (ms / 1000).toFixed(2) : "–";
const ratio = (a: number, b: number) =>
  Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : "–";
const pct = (xs: number[], p: number) =>
  xs.length === 0 ? NaN : xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** One table line: label, Go, skiff, skiff / Go. */
function line(label: string, go: number, skiff: number, fmt: (n: number) => string = f1): string {
  return `| ${label} | ${fmt(go)} | ${fmt(skiff)} | ${ratio(skiff, go)} |`;
}

/** The lines every part has: processes and PSS after settling, CPU. */
function shimLines(what: string, g: ShimsFigure, s: ShimsFigure): string[] {
  return [
    `| ${what}: shim processes (skiff: waiting spares) | ${g.processes} | ${s.processes} (${s.spares}) | – |`,
    line(`${what}: PSS of all shim processes after 8 s (MiB)`, g.pssMiB, s.pssMiB),
    line(`${what}: CPU time of the shim processes themselves (s)`, g.cpuS.self, s.cpuS.self, f2),
    line(`${what}: CPU time of their children, runc (s)`, g.cpuS.children, s.cpuS.children, f2),
  ];
}

/** What happened beside the figures: load, duration, spare hand-offs, failures. */
function note(label: string, r: PartResult<ShimsFigure>): string {
  const s = r.figures.skiff;
  const failed = SIDES.filter((x) => r.figures[x].failed > 0)
    .map((x) => `${x}: ${r.figures[x].failed} failed (${r.figures[x].firstError})`);
  return `${label}: containerd ${r.version}, Go shim ${r.goShim}; ${r.seconds.toFixed(0)} s; ` +
    `load ${r.load[0]} → ${r.load[1]}; skiff starts handed to a spare: ${s.spare?.adopted ?? 0}, ` +
    `cold: ${s.spare?.cold ?? 0}${failed.length ? `; ${failed.join("; ")}` : ""}`;
}

function scaleMarkdown(
  out: Omit<ScaleBenchResult, "markdown">,
  burst: number,
  inflight: number,
  pods: number,
): string {
  const rows: string[] = [];
  const notes: string[] = [];
  if (out.burst) {
    const { go: g, skiff: s } = out.burst.figures;
    const w = `burst of ${burst} \`ctr run -d\``;
    rows.push(
      line(`${w} (all in flight): first launch to last return (s)`, g.wallMs, s.wallMs, s2),
      line(`${w}: one start, p50 (ms)`, pct(g.startMs, 50), pct(s.startMs, 50)),
      line(`${w}: one start, max (ms)`, pct(g.startMs, 100), pct(s.startMs, 100)),
      ...shimLines(w, g, s),
    );
    notes.push(note("burst", out.burst));
  }
  for (
    const [label, r, n] of [["CRI burst", out.criBurst, burst], [
      "density",
      out.density,
      pods,
    ]] as const
  ) {
    if (!r) continue;
    const { go: g, skiff: s } = r.figures;
    const w = `${label} of ${n} pods (${inflight} in flight)`;
    rows.push(
      line(`${w}: to the last StartContainer (s)`, g.wallMs, s.wallMs, s2),
      line(`${w}: to all containers RUNNING (s)`, g.runningMs, s.runningMs, s2),
      ...(["runPod", "create", "start"] as const).map((k) =>
        line(
          `${w}: ${
            { runPod: "RunPodSandbox", create: "CreateContainer", start: "StartContainer" }[k]
          } p50 (ms)`,
          g.callsMs[k],
          s.callsMs[k],
        )
      ),
      ...shimLines(w, g, s),
      line(`${w}: PSS per pod (MiB)`, g.serversPssMiB / n, s.serversPssMiB / n),
    );
    notes.push(note(label, r));
  }
  if (out.floor) {
    const { go: g, skiff: s } = out.floor.figures;
    const fl = out.floor.floor;
    rows.push(
      ...shimLines("10 one-container shims, one by one", g, s),
      line(
        "10 one-container shims: servers alone, spare left out (MiB)",
        g.serversPssMiB,
        s.serversPssMiB,
      ),
      `| floor: ${fl.processes} idle Deno processes with the launcher's flags, PSS (MiB) | – | ${
        f1(fl.pssMiB)
      } | floor / Go ${ratio(fl.pssMiB, g.pssMiB)} |`,
      `| 10 one-container shims (spare included) / the floor | – | ${
        ratio(s.pssMiB, fl.pssMiB)
      } | – |`,
    );
    notes.push(note("floor", out.floor), `floor's exec line: \`${fl.exec}\``);
  }
  return [
    "| figure | Go runc shim | skiff | skiff / Go |",
    "| --- | ---: | ---: | ---: |",
    ...rows,
    "",
    ...notes.map((n) => `- ${n}`),
  ].join("\n");
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
    },
  });
  // Unknown options are an error; --mode, --v8-flags and --inline go to benchInstallOptions.
  const known = ["containerd", "burst", "pods", "inflight", "only", "mode", "v8-flags", "inline"];
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
  const res = await runScaleBench({
    ...(typeof values.containerd === "string" ? { containerd: values.containerd } : {}),
    ...(burst ? { burst } : {}),
    ...(pods ? { pods } : {}),
    ...(inflight ? { inflight } : {}),
    ...(only ? { only: only as Part[] } : {}),
    install: benchInstallOptions(Deno.args),
  });
  console.log(res.markdown);
}
