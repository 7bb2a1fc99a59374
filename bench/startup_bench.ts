/**
 * Start-up of the shim binary's short-lived actions, skiff runc example vs the Go runc shim:
 * `-v` (process start-up alone), `start` (through to a serving server, as containerd runs it)
 * and `delete` (clean-up after a dead server), each timed over several runs.
 *
 * Run: `deno run -A bench/startup_bench.ts`. Needs root, runc and busybox for `start`/`delete`.
 *
 * @module
 */
import { ShimHarness } from "../sdk/testing/harness.ts";
import { createBusyboxBundle } from "../sdk/testing/bundle.ts";
import { installShims } from "../sdk/testing/install.ts";

/** Timings in milliseconds (median of the runs). */
export interface StartupBenchResult {
  /** Rows: action → [Go ms, skiff ms]. */
  rows: { action: string; goMs: number; skiffMs: number }[];
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

async function timeVersion(shim: string): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await new Deno.Command(shim, { args: ["-v"], stdout: "null", stderr: "null" }).output();
    xs.push(performance.now() - t0);
  }
  return median(xs);
}

/** Runs the start-up benchmark. */
export async function runStartupBench(): Promise<StartupBenchResult> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-startup-" });
  try {
    const [skiff] = await installShims({ prefix });
    const go = "containerd-shim-runc-v2";
    const v = [await timeVersion(go), await timeVersion(skiff)];
    const g = await timeStartDelete(go);
    const s = await timeStartDelete(skiff);
    const rows = [
      { action: "`-v` (process start-up)", goMs: v[0], skiffMs: v[1] },
      { action: "`start` → server accepting", goMs: g.start, skiffMs: s.start },
      { action: "`delete` after the server exited", goMs: g.del, skiffMs: s.del },
    ];
    const markdown = [
      `median of ${RUNS} runs each, driven by skiff's ShimHarness`,
      "",
      "| action | Go runc shim (ms) | skiff runc shim (ms) | skiff / Go |",
      "| --- | ---: | ---: | ---: |",
      ...rows.map((r) =>
        `| ${r.action} | ${r.goMs.toFixed(1)} | ${r.skiffMs.toFixed(1)} | ${
          (r.skiffMs / r.goMs).toFixed(2)
        }x |`
      ),
    ].join("\n");
    return { rows, markdown };
  } finally {
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) console.log((await runStartupBench()).markdown);
