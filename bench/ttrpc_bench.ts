/**
 * ttrpc unary round-trip benchmark: skiff's client against skiff's server (in this process and
 * in a child process) and against the Go containerd-shim-runc-v2's server, in one run.
 *
 * Run: `deno run -A bench/ttrpc_bench.ts`. The Go row needs root, containerd-shim-runc-v2 and
 * runc (it is skipped with a note otherwise).
 *
 * @module
 */

import { createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Task } from "../proto/gen/containerd/task/v2/shim_pb.ts";
import { Events } from "../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import { TtrpcServer } from "../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../sdk/ttrpc/transport.ts";
import { takeAccepted } from "../sdk/shim/server/fd_conn.ts";
import { GO_SHIM, startGoShim } from "../tests/fixtures/ttrpc/go_shim.ts";
import { spawnTaskServer } from "../tests/fixtures/ttrpc/helpers.ts";
import { findExecutable } from "../tests/_integration.ts";

/** One measured configuration. */
export interface TtrpcBenchRow {
  /** Which server answered. */
  target: string;
  /** The RPC called. */
  rpc: string;
  /** Calls in flight at once (1 = sequential). */
  concurrency: number;
  /** Calls measured (after warm-up). */
  calls: number;
  /** Latency percentiles in microseconds. */
  p50Us: number;
  p90Us: number;
  p99Us: number;
  /** Throughput over the whole measured run. */
  callsPerSec: number;
}

/** Everything one run produced. */
export interface TtrpcBenchResult {
  rows: TtrpcBenchRow[];
  /** Why a row is missing, or other caveats. */
  notes: string[];
  /** The rows as a markdown table, with calls/s ratios against the Go shim. */
  markdown: string;
}

const WARMUP = 1000;
const SEQUENTIAL_CALLS = 5000;
const CONCURRENCY = 16;
const CONCURRENT_CALLS = 10000;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `call` `total` times with `concurrency` workers; returns the row's numbers. */
async function measure(
  target: string,
  rpc: string,
  concurrency: number,
  total: number,
  call: () => Promise<unknown>,
): Promise<TtrpcBenchRow> {
  for (let i = 0; i < WARMUP; i++) await call();
  const latencies: number[] = [];
  let started = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (started < total) {
      started++;
      const s = performance.now();
      await call();
      latencies.push(performance.now() - s);
    }
  }));
  const wall = performance.now() - t0;
  latencies.sort((a, b) => a - b);
  return {
    target,
    rpc,
    concurrency,
    calls: latencies.length,
    p50Us: Math.round(percentile(latencies, 50) * 1000),
    p90Us: Math.round(percentile(latencies, 90) * 1000),
    p99Us: Math.round(percentile(latencies, 99) * 1000),
    callsPerSec: Math.round(latencies.length / (wall / 1000)),
  };
}

async function benchAddress(
  target: string,
  rpc: "state" | "connect",
  path: string,
): Promise<TtrpcBenchRow[]> {
  await using transport = createTtrpcTransport({ path });
  const task = createClient(Task, transport);
  const headers = { "containerd-namespace-ttrpc": "skiff-bench" };
  const call = rpc === "state"
    ? () => task.state({ id: "bench" }, { headers })
    : () => task.connect({ id: "bench" }, { headers });
  const name = rpc === "state" ? "Task.State" : "Task.Connect";
  return [
    await measure(target, name, 1, SEQUENTIAL_CALLS, call),
    await measure(target, name, CONCURRENCY, CONCURRENT_CALLS, call),
  ];
}

function toMarkdown(rows: TtrpcBenchRow[]): string {
  const go = new Map(
    rows.filter((r) => r.target.includes("Go")).map((r) => [r.concurrency, r.callsPerSec]),
  );
  const lines = [
    "| client → server | rpc | concurrency | calls | p50 µs | p90 µs | p99 µs | calls/s | vs Go shim |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ];
  for (const r of rows) {
    const g = go.get(r.concurrency);
    const ratio = g ? `${(r.callsPerSec / g).toFixed(2)}x` : "n/a";
    lines.push(
      `| ${r.target} | ${r.rpc} | ${r.concurrency} | ${r.calls} | ${r.p50Us} | ${r.p90Us} | ${r.p99Us} | ${r.callsPerSec} | ${ratio} |`,
    );
  }
  return lines.join("\n");
}

/**
 * Measures unary round trips, sequentially and with 16 calls in flight, for skiff → skiff
 * (same process; child process) and skiff → Go runc shim. Takes well under 30 s.
 *
 * @returns the rows, notes and a markdown table
 *
 * @example Usage
 * ```ts ignore
 * import { runTtrpcBench } from "./ttrpc_bench.ts";
 * console.log((await runTtrpcBench()).markdown);
 * ```
 */
export async function runTtrpcBench(): Promise<TtrpcBenchResult> {
  const rows: TtrpcBenchRow[] = [];
  const notes: string[] = [];
  const dir = await Deno.makeTempDir({ prefix: "skiff-ttrpc-bench-" });
  try {
    // (a) skiff server in this process: client and server share one JS thread.
    const server = new TtrpcServer();
    server.register(createServiceImplSpec<typeof Task>(Task, {
      state: (req) => ({ id: req.id, bundle: "/bench", pid: 1 }),
    }));
    await server.listen(`${dir}/inproc.sock`);
    rows.push(...await benchAddress("skiff → skiff (same process)", "state", `${dir}/inproc.sock`));
    await server.close();

    // (a'') the same, with the connection served as a shim serves it: peer-checked, and taken
    // out of Deno into a descriptor the server owns (what a live upgrade needs).
    const owned = new TtrpcServer({ requireSameUser: true, takeConnection: takeAccepted });
    owned.register(createServiceImplSpec<typeof Task>(Task, {
      state: (req) => ({ id: req.id, bundle: "/bench", pid: 1 }),
    }));
    await owned.listen(`${dir}/owned.sock`);
    rows.push(
      ...await benchAddress(
        "skiff → skiff (same process, descriptor-owned connection)",
        "state",
        `${dir}/owned.sock`,
      ),
    );
    await owned.close();

    // (a') skiff server in a child process, like a real shim.
    const child = await spawnTaskServer(`${dir}/child.sock`);
    try {
      rows.push(
        ...await benchAddress("skiff → skiff (child process)", "state", `${dir}/child.sock`),
      );
    } finally {
      await child.kill();
    }

    // (b) the Go runc shim's ttrpc server.
    if (Deno.uid() !== 0 || !findExecutable(GO_SHIM) || !findExecutable("runc")) {
      notes.push(`Go shim row skipped: needs root, ${GO_SHIM} and runc`);
    } else {
      const events = new TtrpcServer();
      events.register(createServiceImplSpec<typeof Events>(Events, { forward: () => ({}) }));
      await events.listen(`${dir}/events.sock`);
      const id = `skiff-bench-${crypto.randomUUID().slice(0, 8)}`;
      const shim = await startGoShim({
        dir,
        id,
        namespace: "skiff-bench",
        ttrpcAddress: `${dir}/events.sock`,
        args: ["true"],
      });
      let shimPid: number | undefined;
      try {
        await using t = createTtrpcTransport({ path: shim.address });
        const c = createClient(Task, t);
        shimPid = (await c.connect({ id })).shimPid;
        rows.push(...await benchAddress("skiff → Go runc shim 1.6", "connect", shim.address));
        await c.shutdown({ id }).catch(() => {}); // the shim exits; its answer may be cut off
      } finally {
        await shim.cleanup(shimPid);
        await events.close({ timeoutMs: 1000 });
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  return { rows, notes, markdown: toMarkdown(rows) };
}

if (import.meta.main) {
  const result = await runTtrpcBench();
  console.log(result.markdown);
  for (const n of result.notes) console.log(`\n> ${n}`);
}
