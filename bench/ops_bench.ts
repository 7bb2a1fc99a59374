/**
 * What the operations endpoint costs a shim server: start-up time (process spawn to the ttrpc
 * socket accepting, and to the `.ops` socket accepting) and resident memory, with the endpoint
 * off (no `-debug`, no `SKIFF_OPS`) and on (`SKIFF_OPS=1`). The server is the skiff runc
 * example, run exactly as `start` runs it (same deno flags as the installed launcher).
 *
 * Run: `deno run -A bench/ops_bench.ts [runs]` (default 10 runs per mode, alternating).
 *
 * @module
 */
import { createClient } from "@connectrpc/connect";
import { Task } from "../proto/gen/containerd/task/v2/shim_pb.ts";
import { createTtrpcTransport } from "../sdk/ttrpc/transport.ts";
import { unixGet } from "../sdk/ops/unix_http.ts";

/** One mode's medians. */
export interface OpsBenchRow {
  /** `off` or `on`. */
  mode: string;
  /** Spawn → ttrpc socket accepts, median ms. */
  readyMs: number;
  /** Spawn → `.ops` socket accepts, median ms (on only). */
  opsReadyMs: number | undefined;
  /** VmRSS after one Connect call (and, when on, one scrape of each endpoint), median MiB. */
  rssMiB: number;
  /** Runs measured. */
  runs: number;
}

/** The result of {@linkcode runOpsBench}. */
export interface OpsBenchResult {
  /** off and on. */
  rows: OpsBenchRow[];
  /** Markdown table with the differences. */
  markdown: string;
}

const ROOT = new URL("../", import.meta.url).pathname;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function accepts(path: string): Promise<boolean> {
  try {
    (await Deno.connect({ transport: "unix", path })).close();
    return true;
  } catch {
    return false;
  }
}

async function waitFor(path: string, child: Deno.ChildProcess, t0: number): Promise<number> {
  const until = t0 + 30_000;
  while (!(await accepts(path))) {
    if (performance.now() > until) {
      child.kill("SIGKILL");
      throw new Error(`shim server did not serve ${path} within 30s`);
    }
    await new Promise((r) => setTimeout(r, 1));
  }
  return performance.now() - t0;
}

function rssMiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024;
}

async function once(
  dir: string,
  i: number,
  on: boolean,
): Promise<{ ready: number; opsReady?: number; rss: number }> {
  const bundle = `${dir}/b${i}`;
  await Deno.mkdir(bundle);
  const socket = `${dir}/s${i}.sock`;
  const t0 = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--quiet",
      "--no-prompt",
      "--cached-only",
      "--config",
      `${ROOT}deno.json`,
      `${ROOT}examples/runc/main.ts`,
      "-namespace",
      "bench",
      "-id",
      `b${i}`,
      "-address",
      `${dir}/containerd.sock`,
      "-socket",
      socket,
    ],
    cwd: bundle,
    env: { SKIFF_OPS: on ? "1" : "", TTRPC_ADDRESS: `${dir}/containerd.sock.ttrpc` },
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    const ready = await waitFor(socket, child, t0);
    const opsReady = on ? await waitFor(`${socket}.ops`, child, t0) : undefined;
    const transport = createTtrpcTransport({ path: socket });
    await createClient(Task, transport).connect({ id: `b${i}` });
    await transport.close();
    if (on) {
      for (const p of ["/metrics", "/debug/state", "/healthz"]) {
        await unixGet(`${socket}.ops`, p, { timeoutMs: 10_000 });
      }
    }
    // Let the collector settle so the figure is the steady state, not a transient peak.
    await new Promise((r) => setTimeout(r, 300));
    return { ready, ...(opsReady !== undefined ? { opsReady } : {}), rss: rssMiB(child.pid) };
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
}

/**
 * Measures both modes, alternating runs so drift affects both alike.
 *
 * @param runs runs per mode
 * @returns medians and a markdown table
 */
export async function runOpsBench(runs = 10): Promise<OpsBenchResult> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-bench-" });
  const off: Awaited<ReturnType<typeof once>>[] = [];
  const on: Awaited<ReturnType<typeof once>>[] = [];
  try {
    // One unmeasured run of each warms the module cache's compiled code.
    await once(dir, 1000, false);
    await once(dir, 1001, true);
    for (let i = 0; i < runs; i++) {
      off.push(await once(dir, 2 * i, false));
      on.push(await once(dir, 2 * i + 1, true));
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  const row = (mode: string, xs: typeof off): OpsBenchRow => ({
    mode,
    readyMs: median(xs.map((x) => x.ready)),
    opsReadyMs: xs[0]?.opsReady === undefined ? undefined : median(xs.map((x) => x.opsReady!)),
    rssMiB: median(xs.map((x) => x.rss)),
    runs: xs.length,
  });
  const rows = [row("off", off), row("on (SKIFF_OPS=1)", on)];
  const [a, b] = rows as [OpsBenchRow, OpsBenchRow];
  const f = (n: number | undefined, d = 1) => n === undefined ? "–" : n.toFixed(d);
  const markdown = [
    "| endpoint | server ready (ms) | .ops ready (ms) | RSS (MiB) | runs |",
    "| --- | ---: | ---: | ---: | ---: |",
    ...rows.map((r) =>
      `| ${r.mode} | ${f(r.readyMs)} | ${f(r.opsReadyMs)} | ${f(r.rssMiB)} | ${r.runs} |`
    ),
    `| difference | ${f(b.readyMs - a.readyMs)} | | ${f(b.rssMiB - a.rssMiB)} | |`,
    "",
    "Medians. Ready = spawn of the `serve` process to its socket accepting a connection; " +
    "RSS = VmRSS after one Connect call (and, when on, one GET of /metrics, /debug/state and " +
    "/healthz).",
  ].join("\n");
  return { rows, markdown };
}

if (import.meta.main) {
  const runs = Number(Deno.args[0] ?? 10);
  console.log((await runOpsBench(runs)).markdown);
}
