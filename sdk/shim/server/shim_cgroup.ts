/**
 * A container whose init runs in the shim's own cgroup has no cgroup of its own to report: a
 * runtime that made none (a process it ran with `ctx.spawn`) must not pass the shim's memory, CPU
 * or OOM kills off as the container's.
 *
 * @module
 */

import { Code, statusError } from "../../ttrpc/status_error.ts";
import type { CgroupMembership, ShimPlatform } from "./platform.ts";

/**
 * Throws Unimplemented, naming the cgroup, when `pid` (or its kept `cgroup`) is in the shim's
 * own cgroup; returns otherwise.
 *
 * @param platform the platform (without `inShimCgroup`, nothing is refused)
 * @param what what was asked (`stats`, `OOM events`) of which container
 * @param id the container
 * @param pid its init
 * @param cgroup the init's cgroups, kept from while it ran
 * @example Usage
 * ```ts
 * import { throws } from "node:assert/strict";
 * import { refuseShimCgroup } from "./shim_cgroup.ts";
 * import type { ShimPlatform } from "./platform.ts";
 * const platform = { inShimCgroup: () => "/system.slice" } as unknown as ShimPlatform;
 * throws(() => refuseShimCgroup(platform, "stats", "c1", 42), /runs in the shim's own cgroup/);
 * ```
 */
export function refuseShimCgroup(
  platform: ShimPlatform,
  what: "stats" | "OOM events",
  id: string,
  pid: number,
  cgroup?: CgroupMembership,
): void {
  const shared = platform.inShimCgroup?.(pid, cgroup);
  if (shared === undefined) return;
  throw statusError(
    `${what} of container "${id}": its init (pid ${pid}) runs in the shim's own cgroup ` +
      `(${shared}), not one of its own; a runtime without cgroups reports its own ` +
      `(ContainerRuntime.${what === "stats" ? "stats" : "watchOom"})`,
    Code.Unimplemented,
  );
}
