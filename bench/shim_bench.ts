/**
 * Shim benchmark, skiff's runc example against Debian's Go containerd-shim-runc-v2 and (on
 * containerd 2.x: it serves only Task API v3; built by tests/setup/rust_shim.sh when missing)
 * rust-extensions' Rust runc shim, under the same private containerd in the same run:
 *
 * - wall time of `ctr run --rm <busybox> <id> true` (sequential runs, after a warm-up), for
 *   skiff with its warm spare server off (every `start` spawns a server: cold) and on (the
 *   default: `start` hands the container to a waiting spare);
 * - memory of the shim server process(es) with 1 and with 10 running containers, one shim per
 *   container, and with 10 containers grouped into one shim (`io.containerd.runc.v2.group`
 *   annotation), from `/proc/<pid>/smaps_rollup`: PSS (each shared page split among the
 *   processes mapping it: the node's real cost), USS (private pages only) and RSS; with the
 *   spare on, the one spare waiting for the next container is reported on its own row.
 *
 * Run: `deno run -A bench/shim_bench.ts [--containerd 2.1|1.7|1.6] [--runs 10] [--no-door]`
 * (`--no-door`: launchers hand starts to the spare through Deno's `start`, not the shell's door). Needs root,
 * runc and busybox-static (tests/setup/prepare.sh installs them).
 *
 * @module
 */

import { parseArgs } from "node:util";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../sdk/testing/containerd.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";
import {
  EXAMPLE_SHIMS,
  type ExampleInstallOptions,
  installExampleShims,
} from "../sdk/install/examples.ts";
import { benchInstallOptions } from "./install_options.ts";
import { ensureRustShim, RUST_MISSING, RUST_RUNTIME } from "./rust_shim.ts";
import { processMemory } from "../sdk/linux/smaps.ts";
import { readSpareStatsSync, spareDir } from "../sdk/shim/spare/mod.ts";
import { shimSocketAddress, socketPath } from "../sdk/shim/contract/socket_address.ts";

/** Results for one shim. */
export interface ShimBenchRow {
  /** Runtime name, and for skiff whether the warm spare was on. */
  runtime: string;
  /** `ctr run --rm … true` wall time, milliseconds. */
  runMs: { p50: number; p90: number; mean: number };
  /** Shim server memory in MiB: one container, ten containers (total), ten grouped into one shim. */
  mem: { one: ShimMemory; ten: ShimMemory; tenGrouped: ShimMemory };
  /** skiff with the spare on: the waiting spare's memory, and how the timed starts went. */
  spare?: { mem: ShimMemory; adopted: number; cold: number };
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
  /** One row per shim: Go, Rust (when measured), skiff spare off (cold), skiff spare on (warm). */
  rows: ShimBenchRow[];
  /** Markdown table with skiff/Go ratios. */
  markdown: string;
}

const NS = "skiff-bench";
const GO = "io.containerd.runc.v2";
const SKIFF = "io.containerd.skiff-runc.v2";
/** The same shim installed under a second name with the spare switched off. */
const SKIFF_COLD = "io.containerd.skiffcold-runc.v2";
const SKIFF_COLD_LAUNCHER = "containerd-shim-skiffcold-runc-v2";

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** PSS/USS/RSS (MiB) summed over processes. */
function memoryOf(pids: number[]): ShimMemory {
  const total = { pss: 0, uss: 0, rss: 0 };
  for (const pid of pids) {
    const m = processMemory(pid);
    total.pss += m.pss;
    total.uss += m.uss;
    total.rss += m.rss;
  }
  const mib = 1024 * 1024;
  return { pss: total.pss / mib, uss: total.uss / mib, rss: total.rss / mib };
}

/** The shim servers serving this containerd (`start`/`delete` and waiting spares excluded). */
function servers(c: PrivateContainerd): number[] {
  return c.shims().filter((s) => !s.argv.includes("start") && !s.argv.includes("delete"))
    .map((s) => s.pid);
}

async function settle(): Promise<void> {
  await new Promise((r) => setTimeout(r, 1500));
}

/** The spare counters of every launcher under this containerd, summed. */
function spareStats(c: PrivateContainerd): { adopted: number; cold: number } {
  const dir = spareDir(c.address);
  const out = { adopted: 0, cold: 0 };
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (!e.name.startsWith("stats-")) continue;
      const v = readSpareStatsSync(`${dir}/${e.name}`);
      out.adopted += v.adopted;
      out.cold += v.cold;
    }
  } catch { /* no spare ever ran */ }
  return out;
}

/** Rounds of [Go, Rust, skiff cold, skiff warm] blocks the `ctr run`s are spread over. */
const ROUNDS = 4;

/**
 * Runs the benchmark and returns its numbers. `ctr run` is timed in {@linkcode ROUNDS} rounds of
 * [Go, Rust, skiff cold, skiff warm] blocks of back-to-back runs, so that drifting load spreads over
 * all three; the warm block's runs follow each other as fast as ctr allows (the hard case for
 * the spare, which must load between two of them).
 */
export async function runShimBench(
  opts: {
    containerd?: string;
    runs?: number;
    install?: Omit<ExampleInstallOptions, "prefix">;
    /** Keep launchers off the spare's door (`SKIFF_SPARE_DOOR=0`): Deno's `start` hands over. */
    noDoor?: boolean;
  } = {},
): Promise<ShimBenchResult> {
  const want = opts.containerd ?? "2.1";
  const runs = opts.runs ?? 20;
  const v = containerdVersions().find((x) => x.version.startsWith(want));
  if (!v) throw new Error(`containerd ${want} not found; run tests/setup/prepare.sh`);
  const prefix = await Deno.makeTempDir({ prefix: "skiff-bench-" });
  const [runcLauncher] = await installExampleShims({ ...opts.install, prefix });
  await installExampleShims({
    ...opts.install,
    prefix,
    shims: { [SKIFF_COLD_LAUNCHER]: EXAMPLE_SHIMS["containerd-shim-skiff-runc-v2"] },
    spare: false,
  });
  // The Rust shim answers `start` with Task API v3 only, which containerd 1.x cannot use.
  const v2 = Number(v.version.split(".")[0]) >= 2;
  const rustBin = v2 ? await ensureRustShim() : undefined;
  const rustNote = rustBin
    ? undefined
    : v2
    ? RUST_MISSING
    : `Rust runc shim left out: it serves only Task API v3, which containerd ${v.version} does not speak`;
  const c = await startContainerd({
    binDir: v.binDir,
    extraPath: [
      runcLauncher.slice(0, runcLauncher.lastIndexOf("/")),
      ...(rustBin ? [rustBin.slice(0, rustBin.lastIndexOf("/"))] : []),
    ],
    ...(opts.noDoor ? { env: { SKIFF_SPARE_DOOR: "0" } } : {}),
  });
  const runtimes = [GO, ...(rustBin ? [RUST_RUNTIME] : []), SKIFF_COLD, SKIFF];
  const tags: Record<string, string> = {
    [GO]: "go",
    [RUST_RUNTIME]: "rs",
    [SKIFF_COLD]: "skc",
    [SKIFF]: "skw",
  };
  const times: Record<string, number[]> = Object.fromEntries(runtimes.map((r) => [r, []]));
  let warmStarts = { adopted: 0, cold: 0 };
  const rows: ShimBenchRow[] = [];
  try {
    const image = await c.importBusyboxImage(NS);
    const run = async (runtime: string, id: string) => {
      const t0 = performance.now();
      const r = await ctrRun(c, { image, id, runtime, namespace: NS, args: ["true"] });
      if (r.code !== 0) throw new Error(`${runtime} run failed: ${r.stderr}`);
      return performance.now() - t0;
    };
    // Warm-up: page cache, V8's code cache, containerd's snapshot paths, the first spare.
    for (const runtime of runtimes) {
      for (let i = 0; i < 2; i++) await run(runtime, `${tags[runtime]}-warm-${i}`);
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const runtime of runtimes) {
        const before = spareStats(c);
        // Spread `runs` over the rounds (the first rounds take the remainder).
        const n = Math.floor(runs / ROUNDS) + (round < runs % ROUNDS ? 1 : 0);
        for (let i = 0; i < n; i++) {
          times[runtime].push(await run(runtime, `${tags[runtime]}-run-${round}-${i}`));
        }
        if (runtime === SKIFF) {
          const after = spareStats(c);
          warmStarts = {
            adopted: warmStarts.adopted + after.adopted - before.adopted,
            cold: warmStarts.cold + after.cold - before.cold,
          };
        }
      }
    }
    for (const runtime of runtimes) {
      const tag = tags[runtime];
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
      const one = memoryOf(servers(c));
      const tenIds = Array.from({ length: 10 }, (_, i) => `${tag}-ten-${i}`);
      for (const id of tenIds.slice(1)) await detach(id);
      await settle();
      const ten = memoryOf(servers(c));
      const spare = runtime === SKIFF
        ? { mem: memoryOf(c.spares().map((s) => s.pid)), ...warmStarts }
        : undefined;
      await cleanup([`${tag}-one`, ...tenIds.slice(1)]);
      const grouped = Array.from({ length: 10 }, (_, i) => `${tag}-grp-${i}`);
      for (const id of grouped) {
        await detach(id, ["--annotation", `io.containerd.runc.v2.group=${tag}-group`]);
      }
      await settle();
      const tenGrouped = memoryOf(servers(c));
      await cleanup(grouped);
      const t = times[runtime];
      rows.push({
        runtime: runtime === SKIFF_COLD ? `${SKIFF} (spare off)` : runtime,
        runMs: {
          p50: percentile(t, 50),
          p90: percentile(t, 90),
          mean: t.reduce((a, b) => a + b, 0) / t.length,
        },
        mem: { one, ten, tenGrouped },
        ...(spare ? { spare } : {}),
      });
    }
  } finally {
    await c.stop();
    // Grouped shims listen on a socket named after the group, which stop() cannot know.
    for (const tag of Object.values(tags)) {
      const path = socketPath(shimSocketAddress(c.address, NS, `${tag}-group`));
      await Deno.remove(path).catch(() => {});
    }
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
  const row = (runtime: string) => rows.find((x) => x.runtime === runtime);
  const go = row(GO)!;
  const rust = row(RUST_RUNTIME);
  const cold = row(`${SKIFF} (spare off)`)!;
  const warm = row(SKIFF)!;
  const f = (n: number | undefined) => n === undefined ? "–" : n.toFixed(1);
  const r = (a: number, b: number | undefined) => b === undefined ? "–" : `${(a / b).toFixed(2)}x`;
  const spare = warm.spare!;
  /** One table line: Go, Rust, skiff off, skiff on, then off/Go, on/Go, on/Rust. */
  const line = (label: string, pick: (x: ShimBenchRow) => number) =>
    `| ${label} | ${f(pick(go))} | ${f(rust && pick(rust))} | ${f(pick(cold))} | ${
      f(pick(warm))
    } | ${r(pick(cold), pick(go))} | ${r(pick(warm), pick(go))} | ${
      r(pick(warm), rust && pick(rust))
    } |`;
  const markdown = [
    `containerd ${v.version}, ${runs} sequential runs each (${ROUNDS} rounds of Go, ` +
    `${rust ? "Rust, " : ""}skiff spare off, skiff spare on); with the spare on, ` +
    `${spare.adopted} timed starts were handed to a spare and ${spare.cold} started cold`,
    "",
    "| metric | Go runc shim | Rust runc shim | skiff, spare off | skiff, spare on | off / Go | on / Go | on / Rust |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...(["p50", "p90"] as const).map((k) =>
      line(`\`ctr run --rm … true\` ${k} (ms)`, (x) => x.runMs[k])
    ),
    ...([
      ["1 container", "one"],
      ["10 containers, 10 shims", "ten"],
      ["10 containers, 1 grouped shim", "tenGrouped"],
    ] as const).flatMap(([label, key]) =>
      (["pss", "uss", "rss"] as const).map((k) =>
        line(`shim ${k.toUpperCase()}, ${label} (MiB)`, (x) => x.mem[key][k])
      )
    ),
    ...(["pss", "uss", "rss"] as const).map((k) =>
      `| the waiting spare, ${k.toUpperCase()} (MiB) | – | – | – | ${f(spare.mem[k])} | – | – | – |`
    ),
    ...(rustNote ? ["", rustNote] : []),
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
      "no-door": { type: "boolean" },
    },
  });
  const res = await runShimBench({
    ...(values.containerd ? { containerd: values.containerd } : {}),
    ...(values.runs ? { runs: Number(values.runs) } : {}),
    install: benchInstallOptions(Deno.args),
    ...(values["no-door"] ? { noDoor: true } : {}),
  });
  console.log(res.markdown);
}
