/**
 * cgroup v1 statistics as `io.containerd.cgroups.v1.Metrics`, read the way containerd's
 * cgroups library reads them (missing controllers and files are left unset).
 *
 * @module
 */

import type {
  BlkIOEntry,
  BlkIOStat,
  MemoryEntry,
  Metrics,
} from "../../proto/gen/io/containerd/cgroups/v1/metrics_pb.ts";
import { createShimMessage, shimFieldNames } from "../../proto/shim_wire.ts";
import { type CgroupMembership, cgroupV1Paths } from "./cgroup_paths.ts";
import {
  assignFields,
  hugePageSizes,
  readKeyValues,
  readOptional,
  readUint,
} from "./cgroup_files.ts";

/** memory.stat keys whose proto field is spelled differently. */
const MEMORY_STAT_RENAMES: Record<string, string> = {
  pgpgin: "pg_pg_in",
  pgpgout: "pg_pg_out",
  pgfault: "pg_fault",
  pgmajfault: "pg_maj_fault",
  hierarchical_memsw_limit: "hierarchical_swap_limit",
  total_pgpgin: "total_pg_pg_in",
  total_pgpgout: "total_pg_pg_out",
  total_pgfault: "total_pg_fault",
  total_pgmajfault: "total_pg_maj_fault",
};

/** cpuacct.stat counts USER_HZ ticks; Linux fixes USER_HZ at 100. */
const NANOS_PER_TICK = 10_000_000n;

/**
 * Reads the v1 statistics of `pid`'s cgroup (or of `membership`'s, once `pid` has exited).
 * Throws `CgroupNotFoundError` when it is gone.
 *
 * @example Usage
 * ```ts ignore
 * const m = cgroupV1Metrics(pid);
 * console.log(m.memory?.usage?.usage, m.pids?.current);
 * ```
 *
 * @param pid the process
 * @param membership its cgroups as kept from while it ran; default: read now
 */
export function cgroupV1Metrics(pid: number, membership?: CgroupMembership): Metrics {
  const dirs = cgroupV1Paths(pid, membership);
  const metrics = createShimMessage("io.containerd.cgroups.v1.Metrics");
  const memory = dirs.get("memory");
  if (memory) readMemory(metrics, memory);
  const cpu = dirs.get("cpu");
  const cpuacct = dirs.get("cpuacct");
  if (cpu || cpuacct) readCpu(metrics, cpu, cpuacct);
  const pids = dirs.get("pids");
  if (pids) {
    metrics.pids = createShimMessage("io.containerd.cgroups.v1.PidsStat", {
      current: readUint(`${pids}/pids.current`) ?? 0n,
      limit: readUint(`${pids}/pids.max`, 0n) ?? 0n,
    });
  }
  const blkio = dirs.get("blkio");
  if (blkio) metrics.blkio = readBlkio(blkio);
  const hugetlb = dirs.get("hugetlb");
  if (hugetlb) {
    metrics.hugetlb = hugePageSizes().map((size) =>
      createShimMessage("io.containerd.cgroups.v1.HugetlbStat", {
        pagesize: size,
        usage: readUint(`${hugetlb}/hugetlb.${size}.usage_in_bytes`) ?? 0n,
        max: readUint(`${hugetlb}/hugetlb.${size}.max_usage_in_bytes`) ?? 0n,
        failcnt: readUint(`${hugetlb}/hugetlb.${size}.failcnt`) ?? 0n,
      })
    );
  }
  return metrics;
}

function readMemory(metrics: Metrics, dir: string): void {
  const stat = createShimMessage("io.containerd.cgroups.v1.MemoryStat");
  assignFields(
    stat,
    shimFieldNames("io.containerd.cgroups.v1.MemoryStat"),
    readKeyValues(`${dir}/memory.stat`),
    MEMORY_STAT_RENAMES,
  );
  const entry = (prefix: string): MemoryEntry | undefined => {
    const usage = readUint(`${dir}/${prefix}usage_in_bytes`);
    if (usage === undefined) return undefined; // e.g. no swap accounting
    return createShimMessage("io.containerd.cgroups.v1.MemoryEntry", {
      usage,
      max: readUint(`${dir}/${prefix}max_usage_in_bytes`) ?? 0n,
      failcnt: readUint(`${dir}/${prefix}failcnt`) ?? 0n,
      limit: readUint(`${dir}/${prefix}limit_in_bytes`) ?? 0n,
    });
  };
  stat.usage = entry("memory.");
  stat.swap = entry("memory.memsw.");
  stat.kernel = entry("memory.kmem.");
  stat.kernelTcp = entry("memory.kmem.tcp.");
  metrics.memory = stat;
  const oom = readKeyValues(`${dir}/memory.oom_control`);
  if (oom.size > 0) {
    metrics.memoryOomControl = createShimMessage("io.containerd.cgroups.v1.MemoryOomControl");
    assignFields(
      metrics.memoryOomControl,
      shimFieldNames("io.containerd.cgroups.v1.MemoryOomControl"),
      oom,
    );
  }
}

function readCpu(metrics: Metrics, cpu: string | undefined, cpuacct: string | undefined): void {
  const usage = createShimMessage("io.containerd.cgroups.v1.CPUUsage");
  if (cpuacct) {
    usage.total = readUint(`${cpuacct}/cpuacct.usage`) ?? 0n;
    usage.perCpu = (readOptional(`${cpuacct}/cpuacct.usage_percpu`) ?? "")
      .split(/\s+/).filter(Boolean).map(BigInt);
    const stat = readKeyValues(`${cpuacct}/cpuacct.stat`);
    usage.user = (stat.get("user") ?? 0n) * NANOS_PER_TICK;
    usage.kernel = (stat.get("system") ?? 0n) * NANOS_PER_TICK;
  }
  const throttling = createShimMessage("io.containerd.cgroups.v1.Throttle");
  if (cpu) {
    const stat = readKeyValues(`${cpu}/cpu.stat`);
    throttling.periods = stat.get("nr_periods") ?? 0n;
    throttling.throttledPeriods = stat.get("nr_throttled") ?? 0n;
    throttling.throttledTime = stat.get("throttled_time") ?? 0n;
  }
  metrics.cpu = createShimMessage("io.containerd.cgroups.v1.CPUStat", { usage, throttling });
}

/** blkio files (without the "blkio." prefix) and the proto field each fills. */
const BLKIO_FILES: [string, keyof BlkIOStat][] = [
  ["io_service_bytes_recursive", "ioServiceBytesRecursive"],
  ["io_serviced_recursive", "ioServicedRecursive"],
  ["io_queued_recursive", "ioQueuedRecursive"],
  ["io_service_time_recursive", "ioServiceTimeRecursive"],
  ["io_wait_time_recursive", "ioWaitTimeRecursive"],
  ["io_merged_recursive", "ioMergedRecursive"],
  ["time_recursive", "ioTimeRecursive"],
  ["sectors_recursive", "sectorsRecursive"],
];

function readBlkio(dir: string): BlkIOStat {
  const stat = createShimMessage("io.containerd.cgroups.v1.BlkIOStat");
  // Without CFQ/BFQ the proportional files are empty; the throttle files still count I/O.
  const proportional = (readOptional(`${dir}/blkio.io_serviced_recursive`) ?? "") !== "";
  const files: [string, keyof BlkIOStat][] = proportional ? BLKIO_FILES : [
    ["throttle.io_service_bytes", "ioServiceBytesRecursive"],
    ["throttle.io_serviced", "ioServicedRecursive"],
  ];
  const devices = new Map<string, string>();
  for (const [file, field] of files) {
    (stat[field] as BlkIOEntry[]) = blkioEntries(`${dir}/blkio.${file}`, devices);
  }
  return stat;
}

/** Lines `MAJ:MIN [Op] value`; the `Total` line is skipped. */
function blkioEntries(path: string, devices: Map<string, string>): BlkIOEntry[] {
  const out: BlkIOEntry[] = [];
  for (const line of (readOptional(path) ?? "").split("\n")) {
    const parts = line.trim().split(/\s+/);
    const dev = /^(\d+):(\d+)$/.exec(parts[0] ?? "");
    if (!dev || parts.length < 2) continue;
    const [op, value] = parts.length >= 3 ? [parts[1], parts[2]] : ["", parts[1]];
    if (!/^\d+$/.test(value)) continue;
    out.push(createShimMessage("io.containerd.cgroups.v1.BlkIOEntry", {
      op,
      device: deviceName(dev[1], dev[2], devices),
      major: BigInt(dev[1]),
      minor: BigInt(dev[2]),
      value: BigInt(value),
    }));
  }
  return out;
}

/** `/dev/<name>` of a block device, from sysfs; empty when unknown. */
function deviceName(major: string, minor: string, cache: Map<string, string>): string {
  const key = `${major}:${minor}`;
  let name = cache.get(key);
  if (name === undefined) {
    const uevent = readOptional(`/sys/dev/block/${key}/uevent`) ?? "";
    const m = /^DEVNAME=(.+)$/m.exec(uevent);
    name = m ? `/dev/${m[1]}` : "";
    cache.set(key, name);
  }
  return name;
}
