/**
 * Runs the catalogue against one runtime under each containerd version: a private containerd
 * per version with the shim's directory first on its PATH, each scenario in its own namespace
 * and cleaned up after it, the containerd stopped (and everything it owned removed) at the end.
 *
 * @module
 */

import { create, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { OptionsSchema as RuncOptionsSchema } from "../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import {
  type ContainerdVersion,
  containerdVersionOf,
  containerdVersions,
} from "../containerd_versions.ts";
import { startContainerd } from "../containerd.ts";
import type { PrivateContainerd } from "../private_containerd.ts";
import { createBusyboxBundle } from "../bundle.ts";
import { CATALOGUE } from "./catalogue.ts";
import { type Neighbour, ScenarioContext, shimBinaryName } from "./kit.ts";
import { spareDir } from "../../shim/spare/config.ts";
import { processAlive } from "../../linux/proc_stat.ts";
import { Status } from "../../../proto/gen/containerd/types/task/task_pb.ts";
import {
  type HostFeatures,
  probeHost,
  type RuntimeTraits,
  type Scenario,
  ScenarioSkip,
  unmet,
} from "./scenario.ts";
import type { ConformanceReport, ScenarioResult } from "./report.ts";

/**
 * Options of {@linkcode runConformance}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ConformanceOptions } from "@skiff/shim/testing";
 * const o: ConformanceOptions = { runtime: "io.containerd.runc.v2", shimDir: "/usr/bin" };
 * strictEqual(o.runcOptions ?? true, true); // each task gets a private runc root
 * ```
 */
export interface ConformanceOptions {
  /** Runtime type under test, e.g. `io.containerd.skiff-runc.v2`. */
  runtime: string;
  /**
   * Directory holding `containerd-shim-<name>-<version>`; put first on containerd's PATH.
   * Default: each containerd's own bin dir (for the Go runc shim shipped with it).
   */
  shimDir?: string;
  /** containerd versions to run under, as prefixes (`1.6`, `2.1`). Default: every one found. */
  containerd?: string[];
  /** Extra containerd binary dirs (each with `containerd` and `ctr`). */
  containerdDirs?: string[];
  /** Run only scenarios whose id matches (a RegExp source, or a plain substring). */
  only?: string;
  /**
   * Send `containerd.runc.v1.Options{root}` (a private runc root) with each task, as `ctr`
   * does for runc shims. Default true; false for shims that take no runc options.
   */
  runcOptions?: boolean;
  /** Conventions and optional APIs the runtime offers. Default: all of them. */
  traits?: RuntimeTraits;
  /** Extra environment for containerd and so for the shims it starts. */
  env?: Record<string, string>;
  /** Bound on each step of a scenario (only there so a hang fails). Default 60000. */
  stepMs?: number;
  /** Called after each result (progress output). */
  onResult?: (r: ScenarioResult) => void;
  /** The catalogue to run. Default {@linkcode CATALOGUE}. */
  catalogue?: readonly Scenario[];
  /**
   * For a shim whose server process serves several pods (skiff's shared servers,
   * `SKIFF_SHARED_PODS`): before each scenario, start a neighbour container (`sleep`) in the
   * scenario's namespace and wait until its server takes new pods, so that the scenario's pods
   * join that server and run beside it. After a check that passed, the scenario fails unless
   * every task it started was served by the neighbour's server and the neighbour still runs,
   * served by the same process (or, for a scenario that {@linkcode Scenario.endsServer}, ended
   * with it). Its result's {@linkcode ScenarioResult.shared} says how many of its tasks joined.
   * Unless `traits` says otherwise, `liveUpgrade` is not applicable (a shared server refuses it).
   * Default false.
   *
   * @example A shared-server run
   * ```ts ignore
   * await installShims({ prefix, shims, sharedPods: 4 }); // SKIFF_SHARED_PODS=4
   * const report = await runConformance({ runtime, shimDir: `${prefix}/bin`, neighbour: true });
   * ```
   */
  neighbour?: boolean;
}

/** Why `live-upgrade` does not apply when scenarios run beside a neighbour. */
export const SHARED_NO_UPGRADE =
  "a shared server (several pods in one process) refuses live upgrade by design";

/** Scenarios the catalogue does not cover yet, listed in every report. */
export const NOT_COVERED: readonly string[] = [
  "checkpoint/restore (criu)",
  "Tasks.Update (resources)",
];

/**
 * The containerd builds to run under: the discovered ones filtered by version prefix, plus
 * extra build dirs.
 *
 * @param o the options naming versions and dirs
 * @returns version and bin dir, oldest first
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { selectVersions } from "./runner.ts";
 * // Every 2.1.x build prepare.sh cached (none on a machine without the cache).
 * const builds = selectVersions({ runtime: "x", shimDir: "/d", containerd: ["2.1"] });
 * strictEqual(builds.every((b) => b.version.startsWith("2.1.")), true);
 * ```
 */
export function selectVersions(o: ConformanceOptions): ContainerdVersion[] {
  const found = containerdVersions().filter((v) =>
    !o.containerd || o.containerd.some((p) => v.version === p || v.version.startsWith(`${p}.`))
  );
  for (const dir of o.containerdDirs ?? []) {
    const version = containerdVersionOf(dir);
    if (!version) throw new Error(`--containerd-dir "${dir}" holds no working containerd`);
    if (!found.some((v) => v.binDir === dir)) found.push({ version, binDir: dir });
  }
  return found;
}

function matches(only: string | undefined, id: string): boolean {
  if (!only) return true;
  try {
    return new RegExp(only).test(id);
  } catch {
    return id.includes(only);
  }
}

/** Bound on one scenario as a whole, so one wedged scenario cannot stop the matrix. */
const SCENARIO_MS = 300_000;

async function bounded(p: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no result within ${ms / 1000}s`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A failure as one line for the report: the check's message and, for an assertion that compared
 * two values, what it expected and what it got (the shim's answer is what a reader needs).
 *
 * @param e what the scenario threw
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import assert from "node:assert/strict";
 * import { failureReason } from "./runner.ts";
 * let thrown: unknown;
 * try {
 *   assert.equal("hello\n", "hi\n", "stdout");
 * } catch (e) {
 *   thrown = e;
 * }
 * strictEqual(failureReason(thrown), 'stdout: expected "hi\\n", got "hello\\n"');
 * ```
 */
export function failureReason(e: unknown): string {
  // Node's assertion diffs ("+ actual - expected ...") are multi-line; the values say it in one.
  const msg = (e instanceof Error ? e.message : String(e)).split(/\n\s*\+ actual/)[0]!;
  let line = msg.split("\n").map((l) => l.trim()).filter(Boolean).slice(0, 3).join(" ");
  const a = e as { name?: string; actual?: unknown; expected?: unknown; operator?: string };
  // (`assert.ok`'s own values, true and what it got, say nothing its message does not.)
  const ok = a?.operator === "==" && a.expected === true;
  if (
    a?.name === "AssertionError" && "expected" in a && "actual" in a && a.operator !== "fail" && !ok
  ) {
    // The check's own words (its first line), then both values, quoted alike.
    const first = msg.split("\n")[0]!.trim();
    line = `${first.slice(0, 160)}: expected ${show(a.expected)}, got ${show(a.actual)}`;
  }
  return line.slice(0, 400);
}

function show(v: unknown): string {
  let text: string;
  try {
    text = typeof v === "string" ? JSON.stringify(v) : Deno.inspect(v, { compact: true, depth: 2 });
  } catch {
    text = String(v);
  }
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

/**
 * Runs the conformance catalogue against a shim under each containerd version available.
 *
 * @param o runtime, shim dir, versions, filters
 * @returns the report (render it with `markdownReport`, compare with `compareReports`)
 *
 * @example Usage
 * ```ts ignore
 * import { markdownReport, runConformance } from "@skiff/shim/testing";
 *
 * const report = await runConformance({ runtime: "io.containerd.runc.v2", shimDir: "/usr/bin" });
 * console.log(markdownReport(report));
 * ```
 */
export async function runConformance(o: ConformanceOptions): Promise<ConformanceReport> {
  const versions = selectVersions(o);
  if (versions.length === 0) {
    throw new Error(
      `no containerd matches ${o.containerd?.join(",")} (run tests/setup/prepare.sh)`,
    );
  }
  const shimDirs = o.shimDir ? [await Deno.realPath(o.shimDir)] : versions.map((v) => v.binDir);
  const binaries = shimDirs.map((d) => `${d}/${shimBinaryName(o.runtime)}`);
  for (const b of binaries) {
    await Deno.stat(b).catch(() => {
      throw new Error(`no shim binary ${b} for runtime ${o.runtime}`);
    });
  }
  const scenarios = (o.catalogue ?? CATALOGUE).filter((s) => matches(o.only, s.id));
  const host = probeHost();
  const traits: RuntimeTraits = {
    grouping: true,
    sandboxApi: true,
    ...(o.neighbour ? { liveUpgrade: { notApplicable: SHARED_NO_UPGRADE } } : {}),
    ...o.traits,
  };
  const rootfs = await createBusyboxBundle({ args: ["true"] });
  const results: ScenarioResult[] = [];
  const record = (r: ScenarioResult) => {
    results.push(r);
    o.onResult?.(r);
  };
  try {
    for (const v of versions) {
      const shimDir = o.shimDir ? shimDirs[0]! : v.binDir;
      await runVersion(v, scenarios, { ...o, shimDir }, host, traits, rootfs.bundle, record);
    }
  } finally {
    await rootfs.cleanup();
  }
  return {
    runtime: o.runtime,
    shim: o.shimDir ? binaries[0]! : `each containerd's ${shimBinaryName(o.runtime)}`,
    date: new Date().toISOString(),
    containerd: versions.map((v) => v.version),
    scenarios: scenarios.map((s) => ({ id: s.id, title: s.title, standsFor: s.standsFor })),
    results,
    notCovered: [...NOT_COVERED],
  };
}

async function runVersion(
  v: ContainerdVersion,
  scenarios: readonly Scenario[],
  o: ConformanceOptions & { shimDir: string },
  host: HostFeatures,
  traits: RuntimeTraits,
  bundle: string,
  record: (r: ScenarioResult) => void,
): Promise<void> {
  let c: PrivateContainerd;
  try {
    c = await startContainerd({
      binDir: v.binDir,
      extraPath: [o.shimDir],
      ...(o.env ? { env: o.env } : {}),
    });
  } catch (e) {
    for (const s of scenarios) {
      record({ scenario: s.id, containerd: v.version, status: "fail", reason: failureReason(e) });
    }
    return;
  }
  const taskOptions: Any | undefined = (o.runcOptions ?? true)
    ? create(AnySchema, {
      typeUrl: "containerd.runc.v1.Options",
      value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { root: c.runcRoot })),
    })
    : undefined;
  try {
    for (const s of scenarios) {
      const base = { scenario: s.id, containerd: v.version };
      const why = unmet(s, { containerd: v.version, host, traits });
      if (why) {
        record({ ...base, status: "skip", reason: why });
        continue;
      }
      const tmp = await Deno.makeTempDir({ prefix: `skiff-conf-${s.id}-` });
      const ctx = new ScenarioContext({
        containerd: c,
        runtime: o.runtime,
        shimDir: o.shimDir,
        namespace: `conf-${s.id}`,
        rootfs: `${bundle}/rootfs`,
        tmp,
        ...(taskOptions ? { taskOptions } : {}),
        ...(o.env ? { env: o.env } : {}),
        ...(o.stepMs ? { stepMs: o.stepMs } : {}),
      });
      const started = Date.now();
      let neighbour: Neighbour | undefined;
      try {
        if (o.neighbour) neighbour = ctx.neighbour = await startNeighbour(ctx);
        await bounded(s.check(ctx), SCENARIO_MS);
        const shared = neighbour ? await checkNeighbour(ctx, neighbour, s) : undefined;
        record({
          ...base,
          status: "pass",
          ms: Date.now() - started,
          ...(shared ? { shared } : {}),
        });
      } catch (e) {
        const skip = e instanceof ScenarioSkip;
        record({
          ...base,
          status: skip ? "skip" : "fail",
          reason: failureReason(e),
          ms: Date.now() - started,
        });
      } finally {
        await ctx.cleanup();
        if (c.pid === undefined) await c.start().catch(() => {});
        // The next neighbour's server can take pods only once this one has let the lock go.
        if (neighbour) await serverGone(neighbour.server, ctx.stepMs);
        await Deno.remove(tmp, { recursive: true }).catch(() => {});
      }
    }
  } finally {
    await c.stop();
  }
}

/**
 * Starts the neighbour in the scenario's namespace and waits until its server takes new pods
 * (holds the shared join lock in the spares' directory): the scenario's pods then join it.
 */
async function startNeighbour(ctx: ScenarioContext): Promise<Neighbour> {
  const id = await ctx.container({ args: ["sleep", "600"] }, { id: `${ctx.namespace}-neighbour` });
  const init = await ctx.startTask(id);
  const server = ctx.servers.get(id);
  if (server === undefined) throw new Error(`neighbour: ${id}'s bundle names no shim.pid`);
  const dir = spareDir(ctx.containerd.address);
  await ctx.eventually(
    `the neighbour's server (pid ${server}) to take new pods (hold a shared-*.lock in ${dir})`,
    () => Promise.resolve(holdsJoinLock(dir, server) ? true : undefined),
  );
  return { id, init, server };
}

/** Whether `pid` holds the flock of one of the join points' locks (`shared-*.lock`) in `dir`. */
function holdsJoinLock(dir: string, pid: number): boolean {
  const inodes = new Set<number>();
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (!/^shared-.*\.lock$/.test(e.name)) continue;
      const ino = Deno.statSync(`${dir}/${e.name}`).ino;
      if (ino !== null) inodes.add(ino);
    }
  } catch {
    return false;
  }
  // "1: FLOCK  ADVISORY  WRITE 7711 fe:00:884818 0 EOF" (a waiter's line has "->" after "1:").
  return Deno.readTextFileSync("/proc/locks").split("\n").some((line) => {
    const f = line.trim().split(/\s+/);
    return f[1] === "FLOCK" && Number(f[4]) === pid &&
      inodes.has(Number(f[5]?.split(":")[2]));
  });
}

/**
 * After a check that passed: every task the scenario started was served by the neighbour's
 * server, and the neighbour still runs there (or, for a scenario that ends its server, ended).
 */
async function checkNeighbour(
  ctx: ScenarioContext,
  n: Neighbour,
  s: Scenario,
): Promise<{ server: number; joined: number }> {
  const joined = [...ctx.servers].filter(([id]) => id !== n.id);
  for (const [id, pid] of joined) {
    if (pid !== n.server) {
      throw new Error(`neighbour: ${id} was served by pid ${pid}, not the neighbour's ${n.server}`);
    }
  }
  const status = async () => {
    try {
      return (await ctx.client.tasks.get({ containerId: n.id })).process;
    } catch {
      return undefined; // gone
    }
  };
  if (s.endsServer) {
    await ctx.eventually("neighbour: its task to end with the server", async () => {
      const p = await status();
      return p === undefined || p.status === Status.STOPPED ? true : undefined;
    });
    await ctx.eventually(
      "neighbour: its init to die with the server",
      () => Promise.resolve(processAlive(n.init) ? undefined : true),
    );
  } else {
    const p = await ctx.within(status(), "neighbour: Get");
    if (p?.status !== Status.RUNNING || p.pid !== n.init) {
      throw new Error(
        `neighbour: ${n.id} is ${p ? `${Status[p.status]} pid ${p.pid}` : "gone"}, ` +
          `not RUNNING pid ${n.init}`,
      );
    }
    const server = ctx.serverOf(n.id);
    if (server !== n.server || !processAlive(n.server)) {
      throw new Error(
        `neighbour: served by ${server} (alive: ${processAlive(n.server)}), not ${n.server}`,
      );
    }
  }
  return { server: n.server, joined: joined.length };
}

/** Waits (bounded, best effort) for a neighbour's server to exit with its last pod. */
async function serverGone(pid: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (processAlive(pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
}
