/**
 * Start-up of the shim binary's short-lived actions, skiff runc example vs the Go runc shim:
 * `-v` (process start-up alone), `-info` (RuntimeInfo, with the runtime's features), `start`
 * (through to a serving server, as containerd runs it) and `delete` (clean-up after a dead
 * server), each timed over several runs, next to `deno run` of an empty file (the floor any
 * Deno process pays on this machine).
 *
 * Run: `deno run -A bench/startup_bench.ts`. Needs root, runc and busybox for `start`/`delete`.
 *
 * @module
 */
import { ShimHarness } from "../sdk/testing/harness.ts";
import { createBusyboxBundle } from "../sdk/testing/bundle.ts";
import { installShims, type InstallShimsOptions } from "../sdk/testing/install.ts";
import { benchInstallOptions } from "./install_options.ts";

/** Timings in milliseconds (median of the runs). */
export interface StartupBenchResult {
  /** Rows: action → [Go ms, skiff ms]. */
  rows: { action: string; goMs: number; skiffMs: number }[];
  /** `deno run` of an empty file, ms. */
  emptyDenoMs: number;
  /** Markdown table with ratios. */
  markdown: string;
}

const RUNS = 7;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function timeStartDelete(shim: string): Promise<{ start: number; del: number }> {
  const starts: number[] = [];
  const dels: number[] = [];
  const dir = await Deno.makeTempDir({ prefix: "skiff-startup-bundles-" });
  for (let i = 0; i < RUNS; i++) {
    // The Go shim's delete finds the bundle as <parent of cwd>/<id>: name it after the id.
    const id = `startup-${i}`;
    const { bundle, cleanup } = await createBusyboxBundle({ args: ["true"], dir: `${dir}/${id}` });
    try {
      const t0 = performance.now();
      const h = await ShimHarness.start({ shim, bundle, id });
      starts.push(performance.now() - t0);
      // A full lifecycle, so both shims have written what their delete reads.
      await h.task.create({ id, bundle });
      await h.task.start({ id });
      await h.task.wait({ id });
      await h.task.delete({ id });
      await h.close();
      const t1 = performance.now();
      await h.runDelete();
      dels.push(performance.now() - t1);
    } finally {
      await cleanup();
    }
  }
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  return { start: median(starts), del: median(dels) };
}

async function timeCommand(cmd: string, args: string[]): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await new Deno.Command(cmd, { args, stdin: "null", stdout: "null", stderr: "null" }).output();
    xs.push(performance.now() - t0);
  }
  return median(xs);
}

/** `deno run` of an empty file: the start-up floor of any Deno process here. */
async function timeEmptyDeno(): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-startup-empty-" });
  try {
    await Deno.writeTextFile(`${dir}/empty.js`, "");
    return await timeCommand(Deno.execPath(), ["run", "--quiet", `${dir}/empty.js`]);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Runs the start-up benchmark. */
export async function runStartupBench(
  install: Omit<InstallShimsOptions, "prefix"> = {},
): Promise<StartupBenchResult> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-startup-" });
  try {
    const [skiff] = await installShims({ ...install, prefix });
    const go = "containerd-shim-runc-v2";
    const empty = await timeEmptyDeno();
    const v = [await timeCommand(go, ["-v"]), await timeCommand(skiff, ["-v"])];
    const info = [await timeCommand(go, ["-info"]), await timeCommand(skiff, ["-info"])];
    const g = await timeStartDelete(go);
    const s = await timeStartDelete(skiff);
    const rows = [
      { action: "`-v` (process start-up)", goMs: v[0], skiffMs: v[1] },
      { action: "`-info` (RuntimeInfo with runc's features)", goMs: info[0], skiffMs: info[1] },
      { action: "`start` → server accepting", goMs: g.start, skiffMs: s.start },
      { action: "`delete` after the server exited", goMs: g.del, skiffMs: s.del },
    ];
    const markdown = [
      `median of ${RUNS} runs each, driven by skiff's ShimHarness; \`deno run\` of an empty file: ` +
      `${empty.toFixed(1)} ms`,
      "",
      "| action | Go runc shim (ms) | skiff runc shim (ms) | skiff / Go | skiff / empty deno |",
      "| --- | ---: | ---: | ---: | ---: |",
      ...rows.map((r) =>
        `| ${r.action} | ${r.goMs.toFixed(1)} | ${r.skiffMs.toFixed(1)} | ${
          (r.skiffMs / r.goMs).toFixed(2)
        }x | ${(r.skiffMs / empty).toFixed(2)}x |`
      ),
    ].join("\n");
    return { rows, emptyDenoMs: empty, markdown };
  } finally {
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) console.log((await runStartupBench(benchInstallOptions(Deno.args))).markdown);
