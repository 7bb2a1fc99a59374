/**
 * Live upgrade of a VM pod, measured (docs/performance.md, "Live shim upgrade"): under one
 * private containerd with the VM example installed as a bundle launcher, one container in its
 * QEMU guest (TCG) and `--runs` upgrades of its shim: how long containerd's requests are held
 * per upgrade (the shim's report: from holding requests, through the agent's `Release`, to the
 * new code serving), the `upgrade` command's wall time, and the shim's PSS before and after.
 * QEMU is the same process throughout (checked).
 *
 *   deno run -A bench/upgrade_vm_bench.ts [--containerd 2.4] [--runs 20]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { containerdVersions, startContainerd } from "../sdk/testing/containerd.ts";
import { processMemory } from "../sdk/linux/smaps.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";
import { upgradeAll } from "./upgrade_bench.ts";
import {
  installVmShim,
  killVmsAfter,
  VM_CALL_MS,
  VM_LAUNCHER,
  VM_RUNTIME,
  vmEnv,
  vmFinish,
  vmQemus,
} from "../tests/_vm.ts";

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** Runs the benchmark; its markdown. */
export async function runVmUpgradeBench(
  o: { containerd?: string; runs?: number } = {},
): Promise<{ markdown: string }> {
  const runs = o.runs ?? 20;
  const v = containerdVersions().find((x) => x.version.startsWith(o.containerd ?? "2.4"));
  if (!v) throw new Error(`containerd ${o.containerd ?? "2.4"} is not installed`);
  const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-upgrade-bench-" });
  const dir = await installVmShim(prefix);
  const bin = `${dir}/${VM_LAUNCHER}`;
  using _bound = killVmsAfter("vm upgrade bench", 20 * 60_000);
  const c = await startContainerd({ binDir: v.binDir, extraPath: [dir], env: vmEnv() });
  const ns = "bench";
  try {
    const image = await c.importBusyboxImage(ns);
    const r = await ctrRun(c, {
      image,
      id: "vm",
      namespace: ns,
      runtime: VM_RUNTIME,
      cgroup: "",
      detach: true,
      args: ["sleep", "3600"],
      timeoutMs: VM_CALL_MS,
    });
    if (r.code !== 0) throw new Error(`ctr run: ${r.stderr}`);
    const qemus = vmQemus();
    const pid = Number(
      Deno.readTextFileSync(`${c.state}/io.containerd.runtime.v2.task/${ns}/vm/shim.pid`).trim(),
    );
    await new Promise((r) => setTimeout(r, 2000));
    const fresh = processMemory(pid).pss;
    const held: number[] = [];
    const wall: number[] = [];
    for (let i = 0; i < runs; i++) {
      const u = await upgradeAll(bin, c);
      wall.push(u.ms);
      const out = u.out;
      held.push(Number(/requests held (\d+) ms/.exec(out)?.[1] ?? NaN));
    }
    if (JSON.stringify(vmQemus()) !== JSON.stringify(qemus)) throw new Error("QEMU changed");
    await new Promise((r) => setTimeout(r, 2000));
    const after = processMemory(pid).pss;
    await c.ctr(["tasks", "kill", "-s", "KILL", "vm"], { namespace: ns });
    const mib = (b: number) => (b / (1 << 20)).toFixed(1);
    const markdown = [
      `containerd ${v.version}, VM example (QEMU TCG, bundle launcher), ${runs} upgrades of one shim with one container in its guest:`,
      "",
      "| figure | p50 | p99 |",
      "|---|---|---|",
      `| requests held per upgrade (the shim's report) | ${pct(held, 50)} ms | ${
        pct(held, 99)
      } ms |`,
      `| \`upgrade --all\` wall time | ${pct(wall, 50).toFixed(0)} ms | ${
        pct(wall, 99).toFixed(0)
      } ms |`,
      "",
      "| figure | value |",
      "|---|---|",
      `| shim PSS: never upgraded / after ${runs} upgrades | ${mib(fresh)} / ${mib(after)} MiB |`,
    ].join("\n");
    return { markdown };
  } finally {
    await c.stop();
    await vmFinish();
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      containerd: { type: "string", default: "2.4" },
      runs: { type: "string", default: "20" },
    },
  });
  console.log(
    (await runVmUpgradeBench({ containerd: values.containerd!, runs: Number(values.runs) }))
      .markdown,
  );
}
