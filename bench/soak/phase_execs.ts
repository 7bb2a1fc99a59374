/**
 * Soak phase (a): many execs with distinct exit codes in one long-running container, several
 * in flight, while the host's pid counter is forced to wrap; then the exit events, zombies and
 * leftovers are checked.
 *
 * @example Usage
 * ```ts ignore
 * const row = await execPhase(bed, bed.shims[0], { execs: 10_000, inFlight: 8 });
 * ```
 *
 * @module
 */

import type { Bed, ShimUnderTest } from "./bed.ts";
import { runExecBurst } from "./exec_burst.ts";
import { checkBurst } from "./burst_check.ts";
import { ExitEventLog } from "./exit_events.ts";
import { PidWrapper } from "./pid_wrap.ts";

/** Figures of the exec phase. */
export interface ExecPhaseResult {
  /** Execs run. */
  execs: number;
  /** Pid wraps observed while they ran. */
  wraps: number;
  /** Execs that got a pid an earlier exec of the phase had. */
  execsOnReusedPid: number;
  /** Execs whose Wait or Delete status was not their exit code. */
  wrong: number;
  /** Execs without a status (an RPC failed or timed out). */
  lost: number;
  /** Execs whose `/tasks/exit` event never arrived. */
  eventsMissing: number;
  /** Exit events whose status differs from what Wait returned. */
  eventsWrong: number;
  /** Zombies under the shim after the phase. */
  zombies: number;
  /** Wall time (s). */
  seconds: number;
  /** Up to 10 descriptions of what went wrong. */
  samples: string[];
}

/**
 * Runs phase (a) for one shim.
 *
 * @param bed the bed
 * @param shim which shim
 * @param opts how many execs, how many at once
 * @returns the phase's figures
 */
export async function execPhase(
  bed: Bed,
  shim: ShimUnderTest,
  opts: { execs: number; inFlight: number },
): Promise<ExecPhaseResult> {
  const id = `execs-${shim.label}`;
  const started = Date.now();
  const r = await bed.runDetached(shim, id);
  if (r.code !== 0) throw new Error(`ctr run -d ${id} failed (${r.code}): ${r.stderr}`);
  const events = new ExitEventLog();
  await events.subscribe(bed.client);
  const wrapper = new PidWrapper({ everyMs: 2000 });
  wrapper.start();
  let outcomes;
  try {
    outcomes = await runExecBurst(bed.client, {
      containerId: id,
      count: opts.execs,
      inFlight: opts.inFlight,
      prefix: "a",
    });
  } finally {
    await wrapper.stop();
  }
  const check = await checkBurst(bed, id, outcomes, events);
  return {
    execs: check.execs,
    wraps: wrapper.wraps,
    execsOnReusedPid: check.execsOnReusedPid,
    wrong: check.wrong,
    lost: check.lost,
    eventsMissing: check.eventsMissing,
    eventsWrong: check.eventsWrong,
    zombies: check.zombies,
    seconds: (Date.now() - started) / 1000,
    samples: check.samples.slice(0, 10),
  };
}
