/**
 * Shim benchmark, skiff's runc example against Debian's Go containerd-shim-runc-v2 under the same
 * private containerd in the same run:
 *
 * - wall time of `ctr run --rm <busybox> <id> true` (sequential runs, after a warm-up);
 * - memory of the shim server process(es) with 1 and with 10 running containers, one shim per
 *   container, and with 10 containers grouped into one shim (`io.containerd.runc.v2.group`
 *   annotation), from `/proc/<pid>/smaps_rollup`: PSS (each shared page split among the
 *   processes mapping it: the node's real cost), USS (private pages only) and RSS. skiff's
 *   waiting warm spare (a loaded server no container uses yet) is not one of the shims: it is
 *   reported on its own row, measured with the 10 containers running.
 *
 * Run: `deno run -A bench/shim_bench.ts [--containerd 2.1|1.7|1.6] [--runs 10]`. Needs root,
 * runc and busybox-static (tests/setup/prepare.sh installs them).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { containerdVersions, startContainerd } from "../sdk/testing/containerd.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";
import { installShims, type InstallShimsOptions } from "../sdk/testing/install.ts";
import { benchInstallOptions } from "./install_options.ts";
import { shimSocketAddress, socketPath } from "../sdk/shim/socket_address.ts";

/** Results for one shim. */
export interface ShimBenchRow {
  /** Runtime name. */
  runtime: string;
  /** `ctr run --rm … true` wall time, milliseconds. */
  runMs: { p50: number; p90: number; mean: number };
  /**
   * Shim memory in MiB: one container, ten containers (total), ten grouped into one shim, and
   * the waiting warm spares (skiff only; zero for Go) while the ten run.
   */
  mem: { one: ShimMemory; ten: ShimMemory; tenGrouped: ShimMemory; spare: ShimMemory };
}

/** Memory of a set of processes, MiB, summed over them. */
export interface ShimMemory {
  /** Proportional set size: shared pages divided among the processes that map them. */
  pss: number;
  /** Unique set size: pages no other process maps (Private_Clean + Private_Dirty). */
  uss: number;
  /** Resident set size: every mapped resident page, shared ones counted in full. */
  rss: number;
}

/** Everything one run produced. */
export interface ShimBenchResult {
  /** containerd version used. */
  containerd: string;
  /** One row per shim. */
  rows: ShimBenchRow[];
  /** Markdown table with skiff/Go ratios. */
  markdown: string;
}

const NS = "skiff-bench";
const GO = "io.containerd.runc.v2";
const SKIFF = "io.containerd.skiff-runc.v2";

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** Memory of one process from `/proc/<pid>/smaps_rollup`, KiB. */
export function parseSmapsRollup(text: string): { pss: number; uss: number; rss: number } {
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
  return {
    pss: field("Pss"),
    uss: field("Private_Clean") + field("Private_Dirty"),
    rss: field("Rss"),
  };
}

/**
 * PSS/USS/RSS (MiB) of the shim server processes serving this containerd (`start` and `delete`
 * excluded): those with a container (`spares` false), or the waiting spares (`spares` true).
 */
async function shimMemory(
  c: { address: string; spares(): { pid: number }[] },
  spares = false,
): Promise<ShimMemory> {
  const address = c.address;
  const waiting = new Set(c.spares().map((s) => s.pid));
  const total = { pss: 0, uss: 0, rss: 0 };
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = (await Deno.readTextFile(`/proc/${e.name}/cmdline`)).split("\0");
      const i = argv.indexOf("-address");
      if (i < 0 || argv[i + 1] !== address || argv.includes("start") || argv.includes("delete")) {
        continue;
      }
      if (waiting.has(Number(e.name)) !== spares) continue;
      const m = parseSmapsRollup(await Deno.readTextFile(`/proc/${e.name}/smaps_rollup`));
      total.pss += m.pss;
      total.uss += m.uss;
      total.rss += m.rss;
    } catch { /* exited */ }
  }
  return { pss: total.pss / 1024, uss: total.uss / 1024, rss: total.rss / 1024 };
}

async function settle(): Promise<void> {
  await new Promise((r) => setTimeout(r, 1500));
}

/** Runs the benchmark and returns its numbers. */
export async function runShimBench(
  opts: { containerd?: string; runs?: number; install?: Omit<InstallShimsOptions, "prefix"> } = {},
): Promise<ShimBenchResult> {
  const want = opts.containerd ?? "2.1";
  const runs = opts.runs ?? 10;
  const v = containerdVersions().find((x) => x.version.startsWith(want));
  if (!v) throw new Error(`containerd ${want} not found; run tests/setup/prepare.sh`);
  const prefix = await Deno.makeTempDir({ prefix: "skiff-bench-" });
  const [runcLauncher] = await installShims({ ...opts.install, prefix });
  const c = await startContainerd({
    binDir: v.binDir,
    extraPath: [runcLauncher.slice(0, runcLauncher.lastIndexOf("/"))],
  });
  const rows: ShimBenchRow[] = [];
  try {
    const image = await c.importBusyboxImage(NS);
    for (const runtime of [GO, SKIFF]) {
      const tag = runtime === GO ? "go" : "sk";
      // Warm-up: page cache, Deno's module cache, containerd's snapshot paths.
      for (let i = 0; i < 2; i++) {
        await ctrRun(c, { image, id: `${tag}-warm-${i}`, runtime, namespace: NS, args: ["true"] });
      }
      const times: number[] = [];
      for (let i = 0; i < runs; i++) {
        const t0 = performance.now();
        const r = await ctrRun(c, {
          image,
          id: `${tag}-run-${i}`,
          runtime,
          namespace: NS,
          args: ["true"],
        });
        times.push(performance.now() - t0);
        if (r.code !== 0) throw new Error(`${runtime} run failed: ${r.stderr}`);
      }
      const detach = async (id: string, flags: string[] = []) => {
        const r = await ctrRun(c, {
          image,
          id,
          runtime,
          namespace: NS,
          detach: true,
          flags,
          args: ["sleep", "600"],
        });
        if (r.code !== 0) throw new Error(`${runtime} run -d failed: ${r.stderr}`);
      };
      const cleanup = async (ids: string[]) => {
        for (const id of ids) {
          await c.ctr(["task", "kill", "-s", "SIGKILL", id], { namespace: NS });
        }
        await new Promise((r) => setTimeout(r, 500));
        for (const id of ids) {
          await c.ctr(["task", "delete", "-f", id], { namespace: NS });
          await c.ctr(["container", "delete", id], { namespace: NS });
        }
        await settle();
      };
      await detach(`${tag}-one`);
      await settle();
      const one = await shimMemory(c);
      const tenIds = Array.from({ length: 10 }, (_, i) => `${tag}-ten-${i}`);
      for (const id of tenIds.slice(1)) await detach(id);
      await settle();
      const ten = await shimMemory(c);
      const spare = await shimMemory(c, true);
      await cleanup([`${tag}-one`, ...tenIds.slice(1)]);
      const grouped = Array.from({ length: 10 }, (_, i) => `${tag}-grp-${i}`);
      for (const id of grouped) {
        await detach(id, ["--annotation", `io.containerd.runc.v2.group=${tag}-group`]);
      }
      await settle();
      const tenGrouped = await shimMemory(c);
      await cleanup(grouped);
      rows.push({
        runtime,
        runMs: {
          p50: percentile(times, 50),
          p90: percentile(times, 90),
          mean: times.reduce((a, b) => a + b, 0) / times.length,
        },
        mem: { one, ten, tenGrouped, spare },
      });
    }
  } finally {
    await c.stop();
    // Grouped shims listen on a socket named after the group, which stop() cannot know.
    for (const tag of ["go", "sk"]) {
      const path = socketPath(shimSocketAddress(c.address, NS, `${tag}-group`));
      await Deno.remove(path).catch(() => {});
    }
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
  const [go, sk] = rows;
  const f = (n: number) => n.toFixed(1);
  const r = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
  const markdown = [
    `containerd ${v.version}, ${runs} sequential runs each`,
    "",
    "| metric | Go runc shim | skiff runc shim | skiff / Go |",
    "| --- | ---: | ---: | ---: |",
    `| \`ctr run --rm … true\` p50 (ms) | ${f(go.runMs.p50)} | ${f(sk.runMs.p50)} | ${
      r(sk.runMs.p50, go.runMs.p50)
    } |`,
    `| \`ctr run --rm … true\` p90 (ms) | ${f(go.runMs.p90)} | ${f(sk.runMs.p90)} | ${
      r(sk.runMs.p90, go.runMs.p90)
    } |`,
    ...([
      ["1 container", "one"],
      ["10 containers, 10 shims", "ten"],
      ["10 containers, 1 grouped shim", "tenGrouped"],
    ] as const).flatMap(([label, key]) =>
      (["pss", "uss", "rss"] as const).map((k) =>
        `| shim ${k.toUpperCase()}, ${label} (MiB) | ${f(go.mem[key][k])} | ${
          f(sk.mem[key][k])
        } | ${r(sk.mem[key][k], go.mem[key][k])} |`
      )
    ),
    ...(["pss", "uss", "rss"] as const).map((k) =>
      `| waiting warm spare ${k.toUpperCase()}, with 10 containers (MiB) | - | ${
        f(sk.mem.spare[k])
      } | - |`
    ),
  ].join("\n");
  return { containerd: v.version, rows, markdown };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      containerd: { type: "string" },
      runs: { type: "string" },
      mode: { type: "string" },
      "v8-flags": { type: "string" },
      inline: { type: "boolean" },
    },
  });
  const res = await runShimBench({
    ...(values.containerd ? { containerd: values.containerd } : {}),
    ...(values.runs ? { runs: Number(values.runs) } : {}),
    install: benchInstallOptions(Deno.args),
  });
  console.log(res.markdown);
}
