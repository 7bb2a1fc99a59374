/**
 * What a conformance scenario is: a declarative description (id, title, the containerd
 * behaviour it stands for, what it requires) plus a check that throws when the shim misbehaves.
 *
 * @module
 */

import type { ScenarioContext } from "./kit.ts";

/** Something a host or a runtime may lack; an unmet requirement makes the scenario `skip`. */
export interface Requirements {
  /** Lowest containerd version the behaviour exists in, e.g. `2.0`. */
  containerd?: string;
  /** Host features the check needs (see {@linkcode HostFeatures}). */
  host?: ("cgroup" | "cgroup-freezer")[];
  /** Runtime capabilities that are conventions rather than contract (see `RuntimeTraits`). */
  runtime?: (keyof RuntimeTraits)[];
}

/**
 * One trait's value: `true` (offered), `false` (not offered: the scenario is a `skip`), or
 * `{ notApplicable }`: the behaviour does not apply to this kind of runtime (a VM has no host
 * cgroup to freeze); reported as a `skip` whose reason reads `not applicable: <why>`.
 *
 * @example Usage
 * ```ts
 * import type { Trait } from "@skiff/shim/testing";
 * const t: Trait = { notApplicable: "the guest's processes are not host processes" };
 * ```
 */
export type Trait = boolean | { notApplicable: string };

/**
 * Conventions a runtime may or may not follow; the runner takes them from its options and
 * reports scenarios that need an absent one as skipped (or not applicable, with the reason).
 *
 * @example Usage
 * ```ts
 * import type { RuntimeTraits } from "@skiff/shim/testing";
 * const traits: RuntimeTraits = { grouping: false, terminals: { notApplicable: "not served" } };
 * ```
 */
export interface RuntimeTraits {
  /** Honours the runc shim's `io.containerd.runc.v2.group` annotation (one shim per group). */
  grouping?: Trait;
  /**
   * Serves the Sandbox API (`containerd.runtime.sandbox.v1.Sandbox`) for containerd 2.x's
   * `shim` sandboxer. containerd's Go runc shim does not.
   */
  sandboxApi?: Trait;
  /** Serves terminals: a `terminal: true` process and Tasks.ResizePty. */
  terminals?: Trait;
  /** Tasks.Pause / Resume freeze and thaw the container's processes. */
  pause?: Trait;
  /** Tasks.Metrics answers cgroup stats (`io.containerd.cgroups.v1/v2.Metrics`). */
  cgroupMetrics?: Trait;
  /** A memory limit makes the kernel kill the container and the shim publish /tasks/oom. */
  oomEvents?: Trait;
  /**
   * Live upgrade: the shim re-executes into its installed code on `skiff.shim.v1.Upgrade`,
   * keeping its containers and containerd's connection. A shim that does not serve that
   * service (containerd's Go runc shim) is reported not applicable without declaring it.
   */
  liveUpgrade?: Trait;
}

/**
 * The names of {@linkcode RuntimeTraits}, for command lines that take them as text.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { RUNTIME_TRAITS } from "@skiff/shim/testing";
 * strictEqual(RUNTIME_TRAITS.includes("terminals"), true);
 * ```
 */
export const RUNTIME_TRAITS: readonly (keyof RuntimeTraits)[] = [
  "grouping",
  "sandboxApi",
  "terminals",
  "pause",
  "cgroupMetrics",
  "oomEvents",
  "liveUpgrade",
];

/**
 * One entry of the catalogue.
 *
 * @example A scenario
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { Scenario } from "@skiff/shim/testing";
 * const s: Scenario = {
 *   id: "run-exit-code",
 *   title: "run, exit code",
 *   standsFor: "Wait and Delete return the init's exit status",
 *   check: async (ctx) => {
 *     const id = await ctx.run(["sh", "-c", "exit 3"]);
 *     const { exitStatus } = await ctx.within(ctx.client.tasks.wait({ containerId: id }), "wait");
 *     strictEqual(exitStatus, 3);
 *   },
 * };
 * strictEqual(s.requires, undefined); // runs everywhere
 * ```
 */
export interface Scenario {
  /** Stable id (baselines compare by it). */
  id: string;
  /** One line for the matrix. */
  title: string;
  /** The containerd behaviour (or client pattern) this scenario stands for. */
  standsFor: string;
  /** What the host, containerd or runtime must have; unmet means `skip` with the reason. */
  requires?: Requirements;
  /**
   * The check kills the shim server process its task runs in. With a neighbour (a shared
   * server, `ConformanceOptions.neighbour`), the runner then checks that the neighbour ended
   * with that process, instead of that it runs on.
   */
  endsServer?: boolean;
  /** Throws (an assertion, a gRPC error, a timeout) when the shim fails the scenario. */
  check(ctx: ScenarioContext): Promise<void>;
}

/**
 * Thrown by a check that finds, at run time, that the runtime does not offer an optional API
 * (e.g. the Sandbox API answers Unimplemented): reported as `skip` with the message.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ScenarioSkip } from "@skiff/shim/testing";
 * const e = new ScenarioSkip("the shim serves no Sandbox API");
 * strictEqual(e.name, "ScenarioSkip");
 * ```
 */
export class ScenarioSkip extends Error {
  /**
   * Makes the skip.
   *
   * @param reason why the scenario cannot run here
   */
  constructor(reason: string) {
    super(reason);
    this.name = "ScenarioSkip";
  }
}

/**
 * Compares two dotted versions numerically.
 *
 * @param a e.g. `1.7.24`
 * @param b e.g. `2.0`
 * @returns negative, zero or positive
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { compareVersions } from "./scenario.ts";
 * strictEqual(compareVersions("1.7.24", "2.0") < 0, true);
 * ```
 */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** What the host offers, probed once per run. */
export interface HostFeatures {
  /** A cgroup v1 memory hierarchy or a cgroup v2 mount. */
  cgroup: boolean;
  /** A cgroup v1 freezer or cgroup v2 (`cgroup.freeze`). */
  "cgroup-freezer": boolean;
}

/**
 * Probes the host's cgroup features.
 *
 * @returns which features are present
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { probeHost } from "./scenario.ts";
 * const host = probeHost();
 * strictEqual(typeof host.cgroup, "boolean");
 * strictEqual(host.cgroup || !host["cgroup-freezer"], true); // v2 gives both, v1 each on its own
 * ```
 */
export function probeHost(): HostFeatures {
  const has = (p: string) => {
    try {
      Deno.statSync(p);
      return true;
    } catch {
      return false;
    }
  };
  const v2 = has("/sys/fs/cgroup/cgroup.controllers");
  return {
    cgroup: v2 || has("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "cgroup-freezer": v2 || has("/sys/fs/cgroup/freezer"),
  };
}

/**
 * Why a scenario cannot run here, or undefined when it can.
 *
 * @param s the scenario
 * @param env containerd version, host features and runtime traits
 * @returns a one-line reason, or undefined
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type Scenario, unmet } from "./scenario.ts";
 * const scenario: Scenario = {
 *   id: "sandbox-api",
 *   title: "Sandbox API",
 *   standsFor: "the shim sandboxer",
 *   requires: { containerd: "2.0", runtime: ["sandboxApi"] },
 *   check: () => Promise.resolve(),
 * };
 * const host = { cgroup: true, "cgroup-freezer": true };
 * strictEqual(unmet(scenario, { containerd: "1.6.20", host, traits: {} }), "needs containerd >= 2.0");
 * strictEqual(
 *   unmet(scenario, { containerd: "2.1.9", host, traits: { sandboxApi: false } }),
 *   "runtime declared without sandboxApi",
 * );
 * strictEqual(
 *   unmet(scenario, {
 *     containerd: "2.1.9",
 *     host,
 *     traits: { sandboxApi: { notApplicable: "one VM per pod" } },
 *   }),
 *   "not applicable: one VM per pod",
 * );
 * strictEqual(unmet(scenario, { containerd: "2.1.9", host, traits: {} }), undefined);
 * ```
 */
export function unmet(
  s: Scenario,
  env: { containerd: string; host: HostFeatures; traits: RuntimeTraits },
): string | undefined {
  const r = s.requires ?? {};
  if (r.containerd && compareVersions(env.containerd, r.containerd) < 0) {
    return `needs containerd >= ${r.containerd}`;
  }
  for (const h of r.host ?? []) if (!env.host[h]) return `host lacks ${h}`;
  for (const t of r.runtime ?? []) {
    const v = env.traits[t];
    if (v === false) return `runtime declared without ${t}`;
    if (typeof v === "object") return `not applicable: ${v.notApplicable}`;
  }
  return undefined;
}
