/**
 * cgroup v2 statistics as `io.containerd.cgroups.v2.Metrics`, read the way containerd's
 * cgroups library reads them (missing files are left unset).
 *
 * @module
 */

import type {
  IOEntry,
  Metrics,
  PSIData,
  PSIStats,
} from "../../proto/gen/io/containerd/cgroups/v2/metrics_pb.ts";
import { createShimMessage, shimFieldNames } from "../../proto/shim_wire.ts";
import { type CgroupMembership, cgroupV2Path } from "./cgroup_paths.ts";
import {
  assignFields,
  hugePageSizes,
  readKeyValues,
  readOptional,
  readUint,
} from "./cgroup_files.ts";

/**
 * Reads the v2 statistics of `pid`'s cgroup (or of `membership`'s, once `pid` has exited).
 * Throws `CgroupNotFoundError` when it is gone.
 *
 * @example Usage
 * ```ts ignore
 * const m = cgroupV2Metrics(pid);
 * console.log(m.memory?.usage, m.cpu?.usageUsec);
 * ```
 *
 * @param pid the process
 * @param membership its cgroups as kept from while it ran; default: read now
 */
export function cgroupV2Metrics(pid: number, membership?: CgroupMembership): Metrics {
  return cgroupV2MetricsAt(cgroupV2Path(pid, membership));
}

/**
 * Reads the v2 statistics of the cgroup directory `dir`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cgroupV2MetricsAt } from "./cgroup_stats_v2.ts";
 * const dir = Deno.makeTempDirSync(); // stands in for /sys/fs/cgroup/default/web
 * Deno.writeTextFileSync(`${dir}/memory.current`, "1048576\n");
 * Deno.writeTextFileSync(`${dir}/memory.max`, "max\n");
 * Deno.writeTextFileSync(`${dir}/cpu.stat`, "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
 * Deno.writeTextFileSync(`${dir}/pids.current`, "3\n");
 * const m = cgroupV2MetricsAt(dir);
 * strictEqual(m.memory?.usage, 1048576n);
 * strictEqual(m.cpu?.usageUsec, 1500n);
 * strictEqual(m.pids?.current, 3n);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function cgroupV2MetricsAt(dir: string): Metrics {
  const metrics = createShimMessage("io.containerd.cgroups.v2.Metrics");
  metrics.pids = createShimMessage("io.containerd.cgroups.v2.PidsStat", {
    current: readUint(`${dir}/pids.current`) ?? 0n,
    limit: readUint(`${dir}/pids.max`) ?? 0n,
  });

  const cpu = createShimMessage("io.containerd.cgroups.v2.CPUStat");
  assignFields(
    cpu,
    shimFieldNames("io.containerd.cgroups.v2.CPUStat"),
    readKeyValues(`${dir}/cpu.stat`),
  );
  const cpuPsi = readPsi(`${dir}/cpu.pressure`);
  if (cpuPsi) cpu.psi = cpuPsi;
  metrics.cpu = cpu;

  const memory = createShimMessage("io.containerd.cgroups.v2.MemoryStat");
  assignFields(
    memory,
    shimFieldNames("io.containerd.cgroups.v2.MemoryStat"),
    readKeyValues(`${dir}/memory.stat`),
  );
  memory.usage = readUint(`${dir}/memory.current`) ?? 0n;
  memory.usageLimit = readUint(`${dir}/memory.max`) ?? 0n;
  memory.swapUsage = readUint(`${dir}/memory.swap.current`) ?? 0n;
  memory.swapLimit = readUint(`${dir}/memory.swap.max`) ?? 0n;
  memory.maxUsage = readUint(`${dir}/memory.peak`) ?? 0n;
  memory.swapMaxUsage = readUint(`${dir}/memory.swap.peak`) ?? 0n;
  const memoryPsi = readPsi(`${dir}/memory.pressure`);
  if (memoryPsi) memory.psi = memoryPsi;
  metrics.memory = memory;

  const events = readKeyValues(`${dir}/memory.events`);
  if (events.size > 0) {
    metrics.memoryEvents = createShimMessage("io.containerd.cgroups.v2.MemoryEvents");
    assignFields(
      metrics.memoryEvents,
      shimFieldNames("io.containerd.cgroups.v2.MemoryEvents"),
      events,
    );
  }

  metrics.io = createShimMessage("io.containerd.cgroups.v2.IOStat", {
    usage: readIoStat(`${dir}/io.stat`),
  });
  const ioPsi = readPsi(`${dir}/io.pressure`);
  if (ioPsi) metrics.io.psi = ioPsi;

  metrics.hugetlb = hugePageSizes()
    .filter((size) => readOptional(`${dir}/hugetlb.${size}.current`) !== undefined)
    .map((size) =>
      createShimMessage("io.containerd.cgroups.v2.HugeTlbStat", {
        pagesize: size,
        current: readUint(`${dir}/hugetlb.${size}.current`) ?? 0n,
        max: readUint(`${dir}/hugetlb.${size}.max`) ?? 0n,
      })
    );
  return metrics;
}

/** io.stat lines: `MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N`. */
function readIoStat(path: string): IOEntry[] {
  const out: IOEntry[] = [];
  for (const line of (readOptional(path) ?? "").split("\n")) {
    const [dev, ...pairs] = line.trim().split(/\s+/);
    const m = /^(\d+):(\d+)$/.exec(dev ?? "");
    if (!m) continue;
    const kv = new Map<string, bigint>();
    for (const pair of pairs) {
      const [k, v] = pair.split("=");
      if (k && v && /^\d+$/.test(v)) kv.set(k, BigInt(v));
    }
    const entry = createShimMessage("io.containerd.cgroups.v2.IOEntry", {
      major: BigInt(m[1]),
      minor: BigInt(m[2]),
    });
    assignFields(entry, shimFieldNames("io.containerd.cgroups.v2.IOEntry"), kv);
    out.push(entry);
  }
  return out;
}

/** A *.pressure file (`some avg10=0.00 avg60=0.00 avg300=0.00 total=0`, then `full ...`). */
function readPsi(path: string): PSIStats | undefined {
  const text = readOptional(path);
  if (!text) return undefined;
  const stats = createShimMessage("io.containerd.cgroups.v2.PSIStats");
  for (const line of text.split("\n")) {
    const [kind, ...pairs] = line.trim().split(/\s+/);
    if (kind !== "some" && kind !== "full") continue;
    const data: PSIData = createShimMessage("io.containerd.cgroups.v2.PSIData");
    for (const pair of pairs) {
      const [k, v] = pair.split("=");
      if (k === "avg10") data.avg10 = Number(v);
      else if (k === "avg60") data.avg60 = Number(v);
      else if (k === "avg300") data.avg300 = Number(v);
      else if (k === "total" && /^\d+$/.test(v ?? "")) data.total = BigInt(v);
    }
    stats[kind] = data;
  }
  return stats;
}
