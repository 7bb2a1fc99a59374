/**
 * What every exec-burst phase checks once its burst is done, in one place: wrong and lost exit
 * codes, the `/tasks/exit` events against what Wait said, zombies left under the shim; then the
 * burst's container is removed.
 *
 * @example Usage
 * ```ts ignore
 * const check = await checkBurst(bed, id, outcomes, events);
 * console.log(check.wrong, check.eventsMissing, check.zombies);
 * ```
 *
 * @module
 */

import type { Bed } from "./bed.ts";
import { type ExecOutcome, sourceOfWrong, summarizeExecs } from "./exec_burst.ts";
import type { ExitEventLog } from "./exit_events.ts";
import { shimOf, zombiesUnder } from "./procs.ts";

/** The figures of one burst. */
export interface BurstCheck {
  /** Execs run. */
  execs: number;
  /** Execs that got a pid an earlier exec of the burst had. */
  execsOnReusedPid: number;
  /** Execs whose Wait or Delete status was not their exit code. */
  wrong: number;
  /** Execs without a status (an RPC failed or timed out). */
  lost: number;
  /** Execs whose `/tasks/exit` event never arrived. */
  eventsMissing: number;
  /** Exit events whose status differs from what Wait returned. */
  eventsWrong: number;
  /** The container's shim, looked up before the container was removed. */
  shimPid: number | undefined;
  /** Zombies under the shim (after up to 5 s for the last exits to be reaped). */
  zombies: number;
  /** Descriptions of what went wrong (all of them; callers keep a few). */
  samples: string[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Checks a finished burst in container `id` and removes the container; closes `events`.
 *
 * @param bed the bed
 * @param id the burst's container
 * @param outcomes what the burst returned
 * @param events the exit events, subscribed before the burst
 * @returns the figures
 */
export async function checkBurst(
  bed: Bed,
  id: string,
  outcomes: ExecOutcome[],
  events: ExitEventLog,
): Promise<BurstCheck> {
  const s = summarizeExecs(outcomes);
  const samples: string[] = [];
  for (const o of s.wrong) {
    const from = sourceOfWrong(outcomes, o);
    samples.push(
      `exec ${o.index} pid ${o.pid}: expected ${o.expected}, got ${o.waited}/${o.deleted}` +
        (from ? ` (exec ${from.index}'s)` : ""),
    );
  }
  for (const o of s.lost) samples.push(`exec ${o.index}: ${o.error}`);
  // Events trail the Wait replies a little.
  await sleep(1000);
  let eventsMissing = 0;
  let eventsWrong = 0;
  for (const o of outcomes) {
    if (o.waited === undefined) continue;
    const e = events.find(id, o.execId);
    if (!e) {
      eventsMissing++;
      samples.push(`exec ${o.index}: no /tasks/exit event`);
    } else if (e.exitStatus !== o.waited) {
      eventsWrong++;
      samples.push(`exec ${o.index}: event says ${e.exitStatus}, Wait said ${o.waited}`);
    }
  }
  await events.close();
  const shimPid = shimOf(bed.c, bed.ns, id);
  let zombies = shimPid ? zombiesUnder(shimPid).length : 0;
  for (let i = 0; zombies > 0 && i < 50; i++) {
    await sleep(100);
    zombies = shimPid ? zombiesUnder(shimPid).length : 0;
  }
  await bed.ctr(["tasks", "delete", "--force", id]);
  await bed.ctr(["containers", "delete", id]);
  return {
    execs: s.total,
    execsOnReusedPid: s.execsOnReusedPid,
    wrong: s.wrong.length,
    lost: s.lost.length,
    eventsMissing,
    eventsWrong,
    shimPid,
    zombies,
    samples,
  };
}
