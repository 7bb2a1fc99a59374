/**
 * Task.Stats: the statistics of a process's cgroup, packed as containerd expects.
 *
 * @module
 */

import { create, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { MetricsSchema as V1MetricsSchema } from "../../proto/gen/io/containerd/cgroups/v1/metrics_pb.ts";
import { MetricsSchema as V2MetricsSchema } from "../../proto/gen/io/containerd/cgroups/v2/metrics_pb.ts";
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
      return Promise.resolve(create(AnySchema, {
        typeUrl: "io.containerd.cgroups.v2.Metrics",
        value: toBinary(V2MetricsSchema, cgroupV2Metrics(pid)),
      }));
    }
    return Promise.resolve(create(AnySchema, {
      typeUrl: "io.containerd.cgroups.v1.Metrics",
      value: toBinary(V1MetricsSchema, cgroupV1Metrics(pid)),
    }));
  } catch (e) {
    return Promise.reject(e);
  }
}
