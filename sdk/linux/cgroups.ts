/**
 * Task.Stats: the statistics of a process's cgroup, packed as containerd expects.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { packShimAny } from "../../proto/shim_wire.ts";
import { cgroupVersion } from "./cgroup_paths.ts";
import { cgroupV1Metrics } from "./cgroup_stats_v1.ts";
import { cgroupV2Metrics } from "./cgroup_stats_v2.ts";

export { CgroupNotFoundError, cgroupVersion } from "./cgroup_paths.ts";

/**
 * The statistics of `pid`'s cgroup as an `Any` with the bare type URL containerd 1.6+ decodes:
 * `io.containerd.cgroups.v1.Metrics` on v1 (and hybrid) hosts, `io.containerd.cgroups.v2.Metrics`
 * on unified hosts. Throws `CgroupNotFoundError` when the process or its cgroup is gone.
 *
 * @example Usage
 * ```ts ignore
 * const stats = await cgroupStats(initPid);
 * return { stats }; // StatsResponse
 * ```
 */
export function cgroupStats(pid: number): Promise<Any> {
  // Synchronous reads of small pseudo-files; async only to keep the door open for I/O later.
  try {
    if (cgroupVersion() === 2) {
      return Promise.resolve(packShimAny("io.containerd.cgroups.v2.Metrics", cgroupV2Metrics(pid)));
    }
    return Promise.resolve(packShimAny("io.containerd.cgroups.v1.Metrics", cgroupV1Metrics(pid)));
  } catch (e) {
    return Promise.reject(e);
  }
}
