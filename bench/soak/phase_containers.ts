/**
 * Soak phase (b): containers started and removed in a row (`ctr run --rm`, container `i`
 * exiting with `i % 250`), then exit events and leftovers checked.
 *
 * @example Usage
 * ```ts ignore
 * const row = await containerPhase(bed, bed.shims[0], { containers: 200 });
 * ```
 *
 * @module
 */

import type { Bed, ShimUnderTest } from "./bed.ts";
import { ExitEventLog } from "./exit_events.ts";
import { leakCount, leaks } from "./leaks.ts";

/** Figures of the container phase. */
export interface ContainerPhaseResult {
  /** Containers run. */
  containers: number;
  /** Runs whose exit code was not the container's (ctr failed or the status was wrong). */
  wrong: number;
  /** Containers whose `/tasks/exit` event never arrived or had another status. */
  eventsMissing: number;
  /** Shims, mounts, bundles, sockets and FIFOs left afterwards. */
  leaks: number;
  /** Wall time (s). */
  seconds: number;
  /** Up to 10 descriptions of what went wrong. */
  samples: string[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Runs phase (b) for one shim.
 *
 * @param bed the bed
 * @param shim which shim
 * @param opts how many containers
 * @returns the phase's figures
 */
export async function containerPhase(
  bed: Bed,
  shim: ShimUnderTest,
  opts: { containers: number },
): Promise<ContainerPhaseResult> {
  const started = Date.now();
  const events = new ExitEventLog();
  await events.subscribe(bed.client);
  const samples: string[] = [];
  const ids: string[] = [];
  let wrong = 0;
  for (let i = 0; i < opts.containers; i++) {
    const id = `run-${shim.label}-${i}`;
    ids.push(id);
    const code = i % 250;
    const r = await bed.runToExit(shim, id, ["sh", "-c", `exit ${code}`]);
    if (r.code !== code) {
      wrong++;
      samples.push(`${id}: ctr exited ${r.code}, expected ${code}: ${r.stderr.trim()}`);
    }
  }
  await sleep(1000);
  let eventsMissing = 0;
  for (const [i, id] of ids.entries()) {
    const e = events.find(id, id);
    if (e?.exitStatus !== i % 250) {
      eventsMissing++;
      samples.push(`${id}: exit event ${e ? `status ${e.exitStatus}` : "missing"}`);
    }
  }
  await events.close();
  const left = await leaks(bed, ids);
  if (leakCount(left) > 0) samples.push(`left behind: ${JSON.stringify(left)}`);
  return {
    containers: ids.length,
    wrong,
    eventsMissing,
    leaks: leakCount(left),
    seconds: (Date.now() - started) / 1000,
    samples: samples.slice(0, 10),
  };
}
