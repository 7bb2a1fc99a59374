/**
 * The reliability soak: for each containerd version and each shim (skiff's runc shim, then
 * containerd's Go runc shim), phase (a) execs across pid wraps, (b) containers in a row,
 * (c) containerd restarted and killed mid-burst, (d) live upgrades under execs. With
 * `sharedPods`, skiff's shim runs them in shared servers beside neighbour pods
 * (./shared_pods.ts), without (d). See docs/reliability.md.
 *
 * @example Usage
 * ```ts ignore
 * const rows = await runSoak({ versions: ["2.1"], execs: 300, containers: 20 });
 * console.log(soakErrors(rows[0]));
 * ```
 *
 * @module
 */

import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { startBed } from "./bed.ts";
import { containerPhase, type ContainerPhaseResult } from "./phase_containers.ts";
import { execPhase, type ExecPhaseResult } from "./phase_execs.ts";
import { restartPhase, type RestartPhaseResult } from "./phase_restart.ts";
import { upgradeNotApplicable, upgradePhase, type UpgradePhaseResult } from "./phase_upgrade.ts";
import { endNeighbours, type SharedFigures, startNeighbours } from "./shared_pods.ts";

/**
 * Options of {@linkcode runSoak}.
 *
 * @example Usage
 * ```ts ignore
 * const o: SoakOptions = { versions: ["2.1", "1.6"], execs: 10_000, containers: 200 };
 * ```
 */
export interface SoakOptions {
  /** containerd version prefixes, e.g. `2.1`. Default `["2.1"]`. */
  versions?: string[];
  /** Phase (a) execs. Default 10000. */
  execs?: number;
  /** Execs in flight in (a) and (c). Default 8. */
  inFlight?: number;
  /** Phase (b) containers. Default 200. */
  containers?: number;
  /** Phase (c) container creates in the burst. Default 40. */
  burstContainers?: number;
  /** Phase (c) execs in the burst. Default 1000. */
  burstExecs?: number;
  /** Run against skiff's shim only. */
  /** Execs of phase (d), run while the shim is upgraded in place; default 2000. */
  upgradeExecs?: number;
  /** How often phase (d) upgrades the shim, ms; default 2000. */
  upgradeEveryMs?: number;
  only?: "skiff";
  /**
   * Shared mode: skiff's runc installed with shared servers (`SKIFF_SHARED_PODS`, up to this
   * many pods per process), and `neighbours` pods kept running through the phases so that the
   * phases' pods join a server that serves others (./shared_pods.ts). Phase (d) does not run
   * for skiff's shim then (see runSoak). Default: one pod per server.
   */
  sharedPods?: number;
  /** Shared mode's neighbour pods. Default 2. */
  neighbours?: number;
  /** Progress lines go here. Default: none. */
  log?: (line: string) => void;
}

/** One shim's results under one containerd version. */
export interface SoakRow {
  /** containerd version. */
  version: string;
  /** `skiff-runc` or `go-runc`. */
  shim: string;
  /** Phase (a). */
  execs: ExecPhaseResult;
  /** Phase (b). */
  containers: ContainerPhaseResult;
  /** Phase (c). */
  restart: RestartPhaseResult;
  upgrade: UpgradePhaseResult;
  /** Shared mode's figures (skiff's shim installed with `sharedPods`); absent otherwise. */
  shared?: SharedFigures;
}

/**
 * Runs the soak.
 *
 * @param opts scale and which versions and shims
 * @returns one row per version and shim
 */
export async function runSoak(opts: SoakOptions = {}): Promise<SoakRow[]> {
  const log = opts.log ?? (() => {});
  const want = opts.versions ?? ["2.1"];
  const rows: SoakRow[] = [];
  for (const prefix of want) {
    const v = containerdVersions().find((v) => v.version.startsWith(`${prefix}.`));
    if (!v) throw new Error(`no containerd ${prefix} found (run tests/setup/prepare.sh)`);
    const bed = await startBed(v.binDir, {
      ...(opts.only ? { only: opts.only } : {}),
      ...(opts.sharedPods !== undefined ? { sharedPods: opts.sharedPods } : {}),
    });
    try {
      for (const shim of bed.shims) {
        const tag = `${v.version} ${shim.label}`;
        const shared = bed.sharedPods !== undefined && shim.runtime.includes("skiff");
        const neighbours = shared
          ? await startNeighbours(bed, shim, opts.neighbours ?? 2)
          : undefined;
        if (neighbours) {
          log(
            `${tag}: shared servers of up to ${bed.sharedPods} pods, ${neighbours.ids.length} neighbours`,
          );
        }
        log(`${tag}: (a) ${opts.execs ?? 10_000} execs across pid wraps`);
        const execs = await execPhase(bed, shim, {
          execs: opts.execs ?? 10_000,
          inFlight: opts.inFlight ?? 8,
        });
        log(`${tag}: (b) ${opts.containers ?? 200} containers in a row`);
        const containers = await containerPhase(bed, shim, {
          containers: opts.containers ?? 200,
        });
        log(`${tag}: (c) containerd restarted and killed mid-burst`);
        const restart = await restartPhase(bed, shim, {
          containers: opts.burstContainers ?? 40,
          execs: opts.burstExecs ?? 1000,
          inFlight: opts.inFlight ?? 8,
        });
        // A shared server refuses live upgrade by design (FailedPrecondition: an upgrade
        // re-executes a server of one pod; new pods get the installed code, and a shared
        // server's pods keep theirs until they end), so phase (d) has nothing to test there.
        let upgrade: UpgradePhaseResult;
        if (shared) {
          log(`${tag}: (d) skipped: a shared server refuses live upgrade`);
          upgrade = upgradeNotApplicable();
        } else {
          log(`${tag}: (d) live upgrades every ${opts.upgradeEveryMs ?? 2000} ms under execs`);
          upgrade = await upgradePhase(bed, shim, {
            execs: opts.upgradeExecs ?? 2000,
            inFlight: opts.inFlight ?? 8,
            everyMs: opts.upgradeEveryMs ?? 2000,
          });
        }
        const row: SoakRow = {
          version: v.version,
          shim: shim.label,
          execs,
          containers,
          restart,
          upgrade,
        };
        if (neighbours) {
          log(`${tag}: shared: the neighbours after the phases, then removed`);
          row.shared = await endNeighbours(bed, neighbours);
        }
        log(`${tag}: ${soakErrors(row)} errors`);
        for (
          const s of [
            ...execs.samples,
            ...containers.samples,
            ...restart.samples,
            ...upgrade.samples,
            ...(row.shared?.samples ?? []),
          ]
        ) {
          log(`  ${s}`);
        }
        rows.push(row);
      }
    } finally {
      await bed.stop();
    }
  }
  return rows;
}

/**
 * Everything in a row that is a failure of the shim (or of the run to test anything).
 *
 * @param r one row
 * @returns the number of failures; 0 for a clean run
 */
export function soakErrors(r: SoakRow): number {
  const a = r.execs, b = r.containers, c = r.restart;
  return a.wrong + a.lost + a.eventsMissing + a.eventsWrong + a.zombies +
    (a.wraps > 0 ? 0 : 1) +
    b.wrong + b.eventsMissing + b.leaks +
    c.containersWrong + c.execsWrong + c.eventsMissing + c.zombies + c.leaks +
    (c.restartsMidBurst === 2 ? 0 : 1) + upgradeErrors(r.upgrade) + sharedErrors(r.shared);
}

/** Shared mode: neighbours lost or leaked, or no pod joined a shared server (nothing shared). */
function sharedErrors(s: SharedFigures | undefined): number {
  if (!s) return 0;
  return s.neighboursLost + s.leaks + (s.joined > 0 ? 0 : 1) + (s.neighbourServers === 1 ? 0 : 1);
}

function upgradeErrors(d: UpgradePhaseResult): number {
  if (!d.applicable) return 0;
  return d.upgradeFailures + d.wrong + d.lost + d.eventsMissing + d.eventsWrong + d.zombies +
    (d.samePid ? 0 : 1) + (d.upgrades > 0 ? 0 : 1);
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/**
 * The rows as a markdown table: one line per figure, one column per version and shim.
 *
 * @param rows what {@linkcode runSoak} returned
 * @returns markdown
 */
export function soakTable(rows: SoakRow[]): string {
  const lines: [string, (r: SoakRow) => string | number][] = [
    ["(a) execs", (r) => r.execs.execs],
    ["(a) pid wraps observed", (r) => r.execs.wraps],
    ["(a) execs on a reused pid", (r) => r.execs.execsOnReusedPid],
    ["(a) wrong exit codes", (r) => r.execs.wrong],
    ["(a) lost exit codes", (r) => r.execs.lost],
    ["(a) exit events missing / wrong", (r) => `${r.execs.eventsMissing} / ${r.execs.eventsWrong}`],
    ["(a) zombies left", (r) => r.execs.zombies],
    ["(a) execs per second", (r) => (r.execs.execs / r.execs.seconds).toFixed(1)],
    ["(b) containers run and removed", (r) => r.containers.containers],
    ["(b) wrong exit codes", (r) => r.containers.wrong],
    ["(b) exit events missing", (r) => r.containers.eventsMissing],
    ["(b) leftovers", (r) => r.containers.leaks],
    ["(b) seconds", (r) => r.containers.seconds.toFixed(0)],
    ["(c) restarts mid-burst", (r) => r.restart.restartsMidBurst],
    [
      "(c) containers running / gone / wrong",
      (r) =>
        `${r.restart.containersRunning} / ${r.restart.containersGone} / ${r.restart.containersWrong}`,
    ],
    [
      "(c) execs right / gone / wrong",
      (r) => `${r.restart.execsRight} / ${r.restart.execsGone} / ${r.restart.execsWrong}`,
    ],
    [
      "(c) exit events expected / missing",
      (r) => `${r.restart.eventsExpected} / ${r.restart.eventsMissing}`,
    ],
    ["(c) zombies", (r) => r.restart.zombies],
    ["(c) leftovers", (r) => r.restart.leaks],
    [
      "(d) live upgrades done / refused",
      (r) => r.upgrade.applicable ? `${r.upgrade.upgrades} / ${r.upgrade.upgradeFailures}` : "n/a",
    ],
    ["(d) execs meanwhile", (r) => r.upgrade.applicable ? r.upgrade.execs : "n/a"],
    [
      "(d) wrong / lost exit codes",
      (r) => r.upgrade.applicable ? `${r.upgrade.wrong} / ${r.upgrade.lost}` : "n/a",
    ],
    [
      "(d) exit events missing / wrong",
      (r) => r.upgrade.applicable ? `${r.upgrade.eventsMissing} / ${r.upgrade.eventsWrong}` : "n/a",
    ],
    [
      "(d) same shim pid, zombies",
      (r) =>
        r.upgrade.applicable ? `${r.upgrade.samePid ? "yes" : "NO"}, ${r.upgrade.zombies}` : "n/a",
    ],
    [
      "(d) requests held per upgrade, p50 / max (ms)",
      (r) =>
        r.upgrade.applicable
          ? `${percentile(r.upgrade.heldMs, 50)} / ${Math.max(...r.upgrade.heldMs)}`
          : "n/a",
    ],
    [
      "shared: neighbours / their servers / lost",
      (r) =>
        r.shared
          ? `${r.shared.neighbours} / ${r.shared.neighbourServers} / ${r.shared.neighboursLost}`
          : "n/a",
    ],
    ["shared: pods joined a shared server", (r) => r.shared ? r.shared.joined : "n/a"],
    ["shared: neighbours' leftovers", (r) => r.shared ? r.shared.leaks : "n/a"],
    ["errors", (r) => soakErrors(r)],
  ];
  const head = `| | ${rows.map((r) => `${r.shim} (${r.version})`).join(" | ")} |`;
  const sep = `| --- | ${rows.map(() => "---:").join(" | ")} |`;
  const body = lines.map(([name, f]) => `| ${name} | ${rows.map((r) => f(r)).join(" | ")} |`);
  return [head, sep, ...body].join("\n");
}
