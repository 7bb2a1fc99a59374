/**
 * Start-up of the shim binary's short-lived actions, skiff runc example vs the Go runc shim and
 * rust-extensions' Rust runc shim (built by tests/setup/rust_shim.sh when it is missing):
 * `-v` (process start-up alone), `-info` (RuntimeInfo, with the runtime's features), `start`
 * (through to a serving server, as containerd runs it, for a fresh container: handed to the
 * warm spare, and with the spare off) and `delete` (after a clean exit, and after a killed
 * server), each timed over several runs, next to `deno run` of an empty file (the floor any
 * Deno process pays on this machine).
 *
 * Run: `deno run -A bench/startup_bench.ts`. Needs root, runc and busybox for `start`/`delete`.
 *
 * @module
 */
import { ShimHarness } from "../sdk/testing/harness.ts";
import { containerdVersions } from "../sdk/testing/containerd.ts";
import { spareDir } from "../sdk/shim/spare/mod.ts";
import { createBusyboxBundle } from "../sdk/testing/bundle.ts";
import {
  EXAMPLE_SHIMS,
  type ExampleInstallOptions,
  installExampleShims,
} from "../sdk/install/examples.ts";
import { benchInstallOptions } from "./install_options.ts";
import { ensureRustShim, RUST_MISSING } from "./rust_shim.ts";

/** Timings in milliseconds (median of the runs). */
export interface StartupBenchResult {
  /** Rows: action → Go, Rust (when built) and skiff ms. */
  rows: { action: string; goMs: number; rustMs?: number; skiffMs: number }[];
  /** `deno run` of an empty file, ms. */
  emptyDenoMs: number;
  /** Markdown table with ratios. */
  markdown: string;
}

const RUNS = 11;
/** Longest a Task API call of the bench may take. */
const CALL_TIMEOUT_MS = 20_000;
/** Runs dropped because a call timed out or failed, reported under the table. */
const dropped: string[] = [];

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** The pid of the process listening on the unix socket `path` (found via /proc/net/unix). */
function socketOwner(path: string): number | undefined {
  const inodes = new Set<string>();
  for (const line of Deno.readTextFileSync("/proc/net/unix").split("\n").slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (cols.length >= 8 && cols.slice(7).join(" ") === path) inodes.add(cols[6]);
  }
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      for (const fd of Deno.readDirSync(`/proc/${e.name}/fd`)) {
        const m = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/${e.name}/fd/${fd.name}`));
        if (m && inodes.has(m[1])) return Number(e.name);
      }
    } catch { /* exited, or not ours to read */ }
  }
  return undefined;
}

interface StartDeleteTimes {
  /** `start` through a serving server. */
  start: number;
  /** `delete` after a clean Task Delete and Shutdown. */
  del: number;
  /** `delete` after the server was killed with the container still in the runtime. */
  delDead: number;
}

/**
 * Times `start` and `delete` over {@linkcode RUNS} fresh containers. With `warm`, every run
 * shares one pretend containerd address and waits for the shim's next warm spare first, so
 * `start` hands the container to it (the first run, which has no spare yet, is not timed).
 */
async function timeStartDelete(
  empty: EmptyDeno,
  shim: string,
  warm = false,
  publishBinary?: string,
): Promise<StartDeleteTimes> {
  const starts: number[] = [];
  const dels: number[] = [];
  const deadDels: number[] = [];
  const dir = await Deno.makeTempDir({ prefix: "skiff-startup-bundles-" });
  const address = warm ? `${dir}/containerd.sock` : undefined;
  for (let i = warm ? -1 : 0; i < RUNS; i++) {
    // The Go shim's delete finds the bundle as <parent of cwd>/<id>: name it after the id.
    const id = `startup-${i + 1}`;
    const { bundle, cleanup } = await createBusyboxBundle({ args: ["true"], dir: `${dir}/${id}` });
    let h: ShimHarness | undefined;
    try {
      if (warm && i >= 0) await new Promise((r) => setTimeout(r, 1_000)); // the spare loads
      await empty.sample();
      h = await ShimHarness.start({
        shim,
        bundle,
        id,
        ...(address ? { address } : {}),
        // A real containerd binary, as containerd passes its own: a skiff `start` asks it its
        // version (1.7+), unless a warm spare already did.
        ...(publishBinary ? { publishBinary } : {}),
      });
      // The `start` process alone (spawn to exit), as containerd waits for it.
      const startMs = h.startMs;
      // A full lifecycle, so every shim has written what its delete reads.
      // Bounded: a run whose call never returns is dropped and reported, not waited for.
      const call = { timeoutMs: CALL_TIMEOUT_MS };
      // The Rust shim advertises, and serves, only Task API v3 (same messages).
      const task = h.version === 3 ? h.taskV3 as unknown as typeof h.task : h.task;
      await task.create({ id, bundle }, call);
      await task.start({ id }, call);
      await task.wait({ id }, call);
      // Every other run: the server dies with the container still in the runtime.
      const dead = i % 2 === 1;
      if (dead) {
        const pid = socketOwner(h.address.replace(/^unix:\/\//, ""));
        if (pid) Deno.kill(pid, "SIGKILL");
        await new Promise((r) => setTimeout(r, 100));
      } else {
        await task.delete({ id }, call);
      }
      await h.close();
      const t1 = performance.now();
      await h.runDelete();
      if (i < 0) continue;
      starts.push(startMs);
      (dead ? deadDels : dels).push(performance.now() - t1);
    } catch (e) {
      dropped.push(
        `${shim.slice(shim.lastIndexOf("/") + 1)} run ${i + 1}: ${(e as Error).message}`,
      );
      await h?.close().catch(() => {});
    } finally {
      await cleanup();
    }
  }
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  if (address) {
    // The spare leaves once the pretend containerd's address is gone; then its files go too.
    await new Promise((r) => setTimeout(r, 2_000));
    await Deno.remove(spareDir(address), { recursive: true }).catch(() => {});
  }
  return { start: median(starts), del: median(dels), delDead: median(deadDels) };
}

/**
 * The empty-`deno run` reference, sampled once before every timed run of every row (not once up
 * front), so that the machine's drift during the bench weighs on both sides of each ratio.
 */
class EmptyDeno {
  #file: string;
  #samples: number[] = [];
  constructor(file: string) {
    this.#file = file;
  }
  async sample(): Promise<void> {
    const t0 = performance.now();
    await new Deno.Command(Deno.execPath(), {
      args: ["run", "--quiet", this.#file],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).output();
    this.#samples.push(performance.now() - t0);
  }
  get median(): number {
    return median(this.#samples);
  }
  get count(): number {
    return this.#samples.length;
  }
}

async function timeCommand(cmd: string, args: string[], empty: EmptyDeno): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await empty.sample();
    const t0 = performance.now();
    await new Deno.Command(cmd, { args, stdin: "null", stdout: "null", stderr: "null" }).output();
    xs.push(performance.now() - t0);
  }
  return median(xs);
}

/** Runs the start-up benchmark. */
export async function runStartupBench(
  install: Omit<ExampleInstallOptions, "prefix"> = {},
): Promise<StartupBenchResult> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-startup-" });
  try {
    const [skiff] = await installExampleShims({ ...install, prefix });
    // The same shim under a second name with its warm spare off: every `start` is cold.
    const [cold] = await installExampleShims({
      ...install,
      prefix,
      shims: {
        "containerd-shim-skiffcold-runc-v2": EXAMPLE_SHIMS["containerd-shim-skiff-runc-v2"],
      },
      spare: false,
    });
    const go = "containerd-shim-runc-v2";
    const rust = await ensureRustShim();
    await Deno.writeTextFile(`${prefix}/empty.js`, "");
    const samples = new EmptyDeno(`${prefix}/empty.js`);
    const peers = rust ? [go, rust] : [go];
    const each = async (args: string[]) => {
      const out: number[] = [];
      for (const shim of [...peers, skiff]) out.push(await timeCommand(shim, args, samples));
      return out;
    };
    const v = await each(["-v"]);
    const info = await each(["-info"]);
    const containerd = containerdVersions().find((v) => v.version.startsWith("2."));
    const publish = containerd ? `${containerd.binDir}/containerd` : undefined;
    const g = await timeStartDelete(samples, go, false, publish);
    const rs = rust ? await timeStartDelete(samples, rust, false, publish) : undefined;
    const c = await timeStartDelete(samples, cold, false, publish);
    const w = await timeStartDelete(samples, skiff, true, publish);
    const empty = samples.median;
    // [action, Go, Rust (undefined when not built), skiff]
    const table: [string, number, number | undefined, number][] = [
      ["`-v` (process start-up)", v[0]!, rust ? v[1] : undefined, v.at(-1)!],
      [
        "`-info` (RuntimeInfo with runc's features)",
        info[0]!,
        rust ? info[1] : undefined,
        info.at(-1)!,
      ],
      [
        "`start` → server accepting, fresh container, handed to the warm spare",
        g.start,
        rs?.start,
        w.start,
      ],
      [
        "`start` → server accepting, fresh container, spare off (cold server)",
        g.start,
        rs?.start,
        c.start,
      ],
      ["`delete` after a clean Task Delete (the launcher's fast path)", g.del, rs?.del, w.del],
      [
        "`delete` after the server was killed (runtime clean-up)",
        g.delDead,
        rs?.delDead,
        w.delDead,
      ],
    ];
    const rows = table.map(([action, goMs, rustMs, skiffMs]) => ({
      action,
      goMs,
      ...(rustMs === undefined ? {} : { rustMs }),
      skiffMs,
    }));
    const ms = (x: number | undefined) => x === undefined ? "–" : x.toFixed(1);
    const ratio = (a: number, b: number | undefined) =>
      b === undefined ? "–" : `${(a / b).toFixed(2)}x`;
    const markdown = [
      `median of ${RUNS} runs each, driven by skiff's ShimHarness (\`start\`: its process alone, spawn to exit); \`deno run\` of an empty file: ` +
      `${empty.toFixed(1)} ms (median of ${samples.count}, one before every timed run). ` +
      "Neither the Go nor the Rust shim has a warm spare: both `start` rows show the same run.",
      "",
      "| action | Go runc shim (ms) | Rust runc shim (ms) | skiff runc shim (ms) | skiff / Go | skiff / Rust | skiff / empty deno |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
      ...rows.map((r) =>
        `| ${r.action} | ${ms(r.goMs)} | ${ms(r.rustMs)} | ${ms(r.skiffMs)} | ${
          ratio(r.skiffMs, r.goMs)
        } | ${ratio(r.skiffMs, r.rustMs)} | ${ratio(r.skiffMs, empty)} |`
      ),
      ...(rust ? [] : ["", RUST_MISSING]),
      ...(dropped.length
        ? ["", `Dropped runs (not counted): ${dropped.splice(0).join("; ")}`]
        : []),
    ].join("\n");
    return { rows, emptyDenoMs: empty, markdown };
  } finally {
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) console.log((await runStartupBench(benchInstallOptions(Deno.args))).markdown);
