/**
 * The scale benchmark's markdown (bench/scale_bench.ts): one table of Go, skiff and skiff / Go
 * per run, then what happened beside the figures (load, duration, spare hand-offs, failures).
 *
 * @module
 */

import { SIDES } from "./scale_node.ts";
import type { ShimsFigure } from "./scale_ctr.ts";
import type { PodsFigure } from "./scale_cri.ts";
import type { FloorFigure } from "./scale_floor.ts";
import type { MarginalFigure } from "./scale_marginal.ts";
import type { StartCpu } from "./scale_cpu.ts";
import type { PartResult } from "./scale_bench.ts";

/** The parts' figures, as far as they ran. */
export interface ScaleFigures {
  burst?: PartResult<ShimsFigure>;
  criBurst?: PartResult<PodsFigure>;
  density?: PartResult<PodsFigure>;
  floor?: PartResult<ShimsFigure> & { floor: FloorFigure };
  marginal?: PartResult<MarginalFigure>;
}

/** The sizes the parts ran with. */
export interface ScaleSizes {
  burst: number;
  inflight: number;
  pods: number;
  /** Pods of the marginal part. */
  marginal: number;
  /** skiff's shared servers: most pods per server; undefined for one per pod. */
  shared?: number;
}

const f1 = (n: number) => Number.isFinite(n) ? n.toFixed(1) : "–";
const f2 = (n: number) => Number.isFinite(n) ? n.toFixed(2) : "–";
const s2 = (ms: number) => Number.isFinite(ms) ? (ms / 1000).toFixed(2) : "–";
const ms0 = (s: number) => Number.isFinite(s) ? (s * 1000).toFixed(0) : "–";
const ratio = (a: number, b: number) =>
  Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : "–";
const pct = (xs: number[], p: number) =>
  xs.length === 0 ? NaN : xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** One table line: label, Go, skiff, skiff / Go. */
function line(label: string, go: number, skiff: number, fmt: (n: number) => string = f1): string {
  return `| ${label} | ${fmt(go)} | ${fmt(skiff)} | ${ratio(skiff, go)} |`;
}

/** A side's CPU per start split by process kind. */
const split = (c: StartCpu) =>
  [c.startsS, c.shimS - c.startsS - c.sparesS, c.sparesS].map(ms0).join(" / ");

/** CPU per start: `start` processes, servers and spares; runc apart. */
function cpuLines(what: string, g: StartCpu, s: StartCpu): string[] {
  return [
    line(`${what}: CPU per start, \`start\`s + servers + spares (ms)`, g.shimS, s.shimS, ms0),
    line(`${what}: CPU per start, runc (ms)`, g.runcS, s.runcS, ms0),
    `| ${what}: CPU per start: \`start\` processes / servers / waiting spares (ms) | ${
      split(g)
    } | ${split(s)} | – |`,
  ];
}

/** The lines every part has: processes and PSS after settling, CPU. */
function shimLines(what: string, g: ShimsFigure, s: ShimsFigure, pods: number): string[] {
  const servers = (f: ShimsFigure) => `${f.servers} (${f1(pods / f.servers)})`;
  return [
    `| ${what}: shim processes (skiff: waiting spares) | ${g.processes} | ${s.processes} (${s.spares}) | – |`,
    `| ${what}: servers (pods per server) | ${servers(g)} | ${servers(s)} | – |`,
    line(`${what}: PSS of all shim processes after 8 s (MiB)`, g.pssMiB, s.pssMiB),
    line(`${what}: CPU time of the shim processes themselves (s)`, g.cpuS.self, s.cpuS.self, f2),
    line(`${what}: CPU time of their children, runc (s)`, g.cpuS.children, s.cpuS.children, f2),
    ...cpuLines(what, g.startCpu, s.startCpu),
  ];
}

interface Noted {
  seconds: number;
  load: [string, string];
  version: string;
  goShim: string;
}

/** What happened beside the figures: load, duration, spare hand-offs, failures. */
function note(label: string, r: PartResult<ShimsFigure>, shared?: number): string {
  const s = r.figures.skiff;
  const adopted = s.spare?.adopted ?? 0;
  const cold = s.spare?.cold ?? 0;
  // Joins are not counted by the spare's statistics: the starts neither adopted nor cold.
  const joined = shared ? `, joined a shared server: ${s.startCpu.starts - adopted - cold}` : "";
  return `${head(label, r)}; skiff starts handed to a spare: ${adopted}, cold: ${cold}${joined}${
    failures(r)
  }`;
}

function head(label: string, r: Noted): string {
  return `${label}: containerd ${r.version}, Go shim ${r.goShim}; ${r.seconds.toFixed(0)} s; ` +
    `load ${r.load[0]} → ${r.load[1]}`;
}

function failures(r: PartResult<{ failed: number; firstError?: string }>): string {
  const failed = SIDES.filter((x) => r.figures[x].failed > 0)
    .map((x) => `${x}: ${r.figures[x].failed} failed (${r.figures[x].firstError})`);
  return failed.length ? `; ${failed.join("; ")}` : "";
}

/** The rows of the marginal part. */
function marginalRows(r: PartResult<MarginalFigure>, k: number): string[] {
  const { go: g, skiff: s } = r.figures;
  const w = `${k} pods through CRI, one at a time`;
  const pt = (p: MarginalFigure["first"]) => `${p.servers} (${p.spares})`;
  return [
    `| ${w}: servers after the first / the last pod (skiff: waiting spares) | ${g.first.servers} / ${g.last.servers} | ${
      pt(s.first)
    } / ${pt(s.last)} | – |`,
    line(`${w}: PSS after the first pod, spares included (MiB)`, g.first.pssMiB, s.first.pssMiB),
    line(`${w}: PSS after pod ${k}, spares included (MiB)`, g.last.pssMiB, s.last.pssMiB),
    line(
      `${w}: PSS per added pod, servers alone, (PSS_${k} - PSS_1) / ${k - 1} (MiB)`,
      g.perPodMiB,
      s.perPodMiB,
    ),
    ...cpuLines(`${w}, pods 2-${k}`, g.startCpu, s.startCpu),
  ];
}

/** The table and notes of one run. */
export function scaleMarkdown(out: ScaleFigures, z: ScaleSizes): string {
  const rows: string[] = [];
  const notes: string[] = [];
  if (out.burst) {
    const { go: g, skiff: s } = out.burst.figures;
    const w = `burst of ${z.burst} \`ctr run -d\``;
    rows.push(
      line(`${w} (all in flight): first launch to last return (s)`, g.wallMs, s.wallMs, s2),
      line(`${w}: one start, p50 (ms)`, pct(g.startMs, 50), pct(s.startMs, 50)),
      line(`${w}: one start, max (ms)`, pct(g.startMs, 100), pct(s.startMs, 100)),
      ...shimLines(w, g, s, z.burst),
    );
    notes.push(note("burst", out.burst, z.shared));
  }
  const cri = [["CRI burst", out.criBurst, z.burst], ["density", out.density, z.pods]] as const;
  for (const [label, r, n] of cri) {
    if (!r) continue;
    const { go: g, skiff: s } = r.figures;
    const w = `${label} of ${n} pods (${z.inflight} in flight)`;
    const names = { runPod: "RunPodSandbox", create: "CreateContainer", start: "StartContainer" };
    rows.push(
      line(`${w}: to the last StartContainer (s)`, g.wallMs, s.wallMs, s2),
      line(`${w}: to all containers RUNNING (s)`, g.runningMs, s.runningMs, s2),
      ...(["runPod", "create", "start"] as const).map((k) =>
        line(`${w}: ${names[k]} p50 (ms)`, g.callsMs[k], s.callsMs[k])
      ),
      ...shimLines(w, g, s, n),
      line(`${w}: PSS per pod (MiB)`, g.serversPssMiB / n, s.serversPssMiB / n),
    );
    notes.push(note(label, r, z.shared));
  }
  if (out.criBurst && out.density && z.pods > z.burst) {
    // Two parts, two fresh containerds: the same method, so their difference is a pod's cost
    // at scale (with shared servers: new servers included, as they come every `shared` pods).
    const per = (k: "go" | "skiff") =>
      (out.density!.figures[k].pssMiB - out.criBurst!.figures[k].pssMiB) / (z.pods - z.burst);
    rows.push(
      line(
        `PSS per pod added from ${z.burst} to ${z.pods} pods, (density - CRI burst) / ${
          z.pods - z.burst
        } (MiB)`,
        per("go"),
        per("skiff"),
        f2,
      ),
    );
  }
  if (out.marginal) {
    rows.push(...marginalRows(out.marginal, z.marginal));
    notes.push(`${head("marginal", out.marginal)}${failures(out.marginal)}`);
  }
  if (out.floor) {
    const { go: g, skiff: s } = out.floor.figures;
    const fl = out.floor.floor;
    const w = z.shared ? "10 one-container pods (ctr), one by one" : "10 one-container shims";
    rows.push(
      ...shimLines(`${w}${z.shared ? "" : ", one by one"}`, g, s, 10),
      line(`${w}: servers alone, spare left out (MiB)`, g.serversPssMiB, s.serversPssMiB),
      `| floor: ${fl.processes} idle Deno processes with the launcher's flags, PSS (MiB) | – | ${
        f1(fl.pssMiB)
      } | floor / Go ${ratio(fl.pssMiB, g.pssMiB)} |`,
      `| ${w} (spare included) / the floor | – | ${ratio(s.pssMiB, fl.pssMiB)} | – |`,
    );
    notes.push(note("floor", out.floor, z.shared), `floor's exec line: \`${fl.exec}\``);
  }
  const skiff = z.shared ? `skiff, shared servers (${z.shared} pods per server)` : "skiff";
  return [
    ...(z.shared
      ? [
        `skiff: shared servers, ${z.shared} pods per server (\`SKIFF_SHARED_PODS=${z.shared}\`, ` +
        `install option \`sharedPods: ${z.shared}\`); Go: one shim per pod, as always.`,
        "",
      ]
      : []),
    `| figure | Go runc shim | ${skiff} | skiff / Go |`,
    "| --- | ---: | ---: | ---: |",
    ...rows,
    "",
    ...notes.map((n) => `- ${n}`),
  ].join("\n");
}
