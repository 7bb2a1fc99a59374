/**
 * Task.Stats: the statistics of a process's cgroup, packed as containerd expects.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { packShimAny } from "../../proto/shim_wire.ts";
import { type CgroupMembership, cgroupVersion } from "./cgroup_paths.ts";
import { cgroupV1Metrics } from "./cgroup_stats_v1.ts";
import { cgroupV2Metrics } from "./cgroup_stats_v2.ts";

export {
  type CgroupMembership,
  CgroupNotFoundError,
  cgroupVersion,
  procCgroup,
} from "./cgroup_paths.ts";

/**
 * The statistics of `pid`'s cgroup (or, once it has exited, of `membership`: its cgroups as read
 * with {@linkcode procCgroup} while it ran) as an `Any` with the bare type URL containerd 1.6+ decodes:
 * `io.containerd.cgroups.v1.Metrics` on v1 (and hybrid) hosts, `io.containerd.cgroups.v2.Metrics`
 * on unified hosts. Throws `CgroupNotFoundError` when the process or its cgroup is gone.
 *
 * @example Usage
 * ```ts ignore
 * const stats = await cgroupStats(initPid);
 * return { stats }; // StatsResponse
 * ```
 *
 * @param pid the process
 * @param membership its cgroups as kept from while it ran; default: read now
 */
export function cgroupStats(pid: number, membership?: CgroupMembership): Promise<Any> {
  // Synchronous reads of small pseudo-files; async only to keep the door open for I/O later.
  try {
    if (cgroupVersion() === 2) {
      return Promise.resolve(
        packShimAny("io.containerd.cgroups.v2.Metrics", cgroupV2Metrics(pid, membership)),
      );
    }
    return Promise.resolve(
      packShimAny("io.containerd.cgroups.v1.Metrics", cgroupV1Metrics(pid, membership)),
    );
  } catch (e) {
    return Promise.reject(e);
  }
}
