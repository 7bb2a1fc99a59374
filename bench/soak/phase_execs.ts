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
import { runExecBurst, sourceOfWrong, summarizeExecs } from "./exec_burst.ts";
import { ExitEventLog } from "./exit_events.ts";
import { PidWrapper } from "./pid_wrap.ts";
import { shimOf, zombiesUnder } from "./procs.ts";

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

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
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
    wraps: wrapper.wraps,
    execsOnReusedPid: s.execsOnReusedPid,
    wrong: s.wrong.length,
    lost: s.lost.length,
    eventsMissing,
    eventsWrong,
    zombies,
    seconds: (Date.now() - started) / 1000,
    samples: samples.slice(0, 10),
  };
}
