/**
 * `deno task bench`: every benchmark, skiff side by side with Debian's Go runc shim in the same
 * run, printed as markdown (the tables docs/performance.md records).
 *
 * - ttrpc unary round trips (bench/ttrpc_bench.ts)
 * - `-v`/`-info`/`start`/`delete` start-up next to an empty `deno run`, with the bundled launchers
 *   `deno task install` writes and with source launchers (bench/startup_bench.ts)
 * - `ctr run --rm` p50/p90 and shim PSS/USS/RSS (10 one-container shims, one shim holding 10
 *   grouped containers) under private containerd 2.1 and 1.6 (bench/shim_bench.ts)
 * - node scale: a burst of 20 `ctr run -d`, a CRI burst of 20 pods, 110 pods through CRI, and 10
 *   one-container shims next to as many idle Deno processes with the launchers' flags (the
 *   floor), under containerd 2.1; the bursts and the floor also under 1.6 (bench/scale_bench.ts)
 * - node scale with shared servers (8 pods per skiff server process; Go unchanged): the same
 *   parts, and a pod's marginal cost in a server that already serves pods, under containerd 2.1
 * - the cost of the operations endpoint, off vs on (bench/ops_bench.ts, when present)
 *
 * Benchmarks are measurements, never assertions: nothing here fails on a slow number.
 *
 * @module
 */
import { runTtrpcBench } from "./ttrpc_bench.ts";
import { runShimBench } from "./shim_bench.ts";
import { runStartupBench } from "./startup_bench.ts";
import { runScaleBench } from "./scale_bench.ts";
import { runUpgradeBench } from "./upgrade_bench.ts";
import { runVmUpgradeBench } from "./upgrade_vm_bench.ts";

const sections: [string, () => Promise<string>][] = [
  ["ttrpc round trips", async () => (await runTtrpcBench()).markdown],
  ["start-up, bundled launchers", async () => (await runStartupBench()).markdown],
  [
    "start-up, source launchers (SKIFF_INSTALL_MODE=source)",
    async () => (await runStartupBench({ mode: "source" })).markdown,
  ],
  [
    "ctr run and shim memory (containerd 2.1)",
    async () => (await runShimBench({ containerd: "2.1" })).markdown,
  ],
  [
    "ctr run and shim memory (containerd 1.6)",
    async () => (await runShimBench({ containerd: "1.6" })).markdown,
  ],
  [
    "node scale: bursts, 110 pods, the idle-Deno floor (containerd 2.1)",
    async () => (await runScaleBench({ containerd: "2.1" })).markdown,
  ],
  [
    // 8 pods per server: a burst of 20 needs at least 3 servers and 110 pods at least 14, so the
    // figures include servers filling up and the join point passing to another server, not only
    // joins into one server with room (with 20 or more, a burst could be a single server's; the
    // "servers" rows show how many there were). 8 is also the marginal part's pod count: its
    // pods 2-8 join the first pod's server.
    "node scale, shared servers (containerd 2.1)",
    async () => (await runScaleBench({ containerd: "2.1", shared: 8 })).markdown,
  ],
  [
    "node scale: bursts and the idle-Deno floor (containerd 1.6)",
    async () =>
      (await runScaleBench({ containerd: "1.6", only: ["burst", "cri-burst", "floor"] })).markdown,
  ],
  [
    "live shim upgrade (containerd 2.4)",
    async () => (await runUpgradeBench({ containerd: "2.4" })).markdown,
  ],
  [
    "live shim upgrade (containerd 1.6)",
    async () => (await runUpgradeBench({ containerd: "1.6" })).markdown,
  ],
  [
    "live upgrade of a VM pod (containerd 2.4)",
    async () => (await runVmUpgradeBench({ containerd: "2.4" })).markdown,
  ],
];
try {
  const ops = await import("./ops_bench.ts");
  if (typeof ops.runOpsBench === "function") {
    sections.push(["operations endpoint cost", async () => (await ops.runOpsBench()).markdown]);
  }
} catch { /* not present */ }

console.log(
  `# skiff benchmarks (${new Date().toISOString()}, ${navigator.hardwareConcurrency} CPUs)\n`,
);
for (const [title, run] of sections) {
  console.log(`## ${title}\n`);
  try {
    console.log(await run());
  } catch (e) {
    console.log(`(not measured: ${(e as Error).message})`);
  }
  console.log();
}
