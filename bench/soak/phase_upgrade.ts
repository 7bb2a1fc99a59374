/**
 * Soak phase (d): live upgrades while execs run. One detached container; a burst of execs with
 * every exit code known in advance runs while its shim is upgraded in place every
 * `everyMs` (`skiff.shim.v1.Upgrade`, forced: the same installed code again). Counted: upgrades
 * done and refused, wrong and lost exit codes, exit events missing or wrong, the shim's pid
 * unchanged, zombies left. Only for shims that offer it (the Go runc shim does not: n/a).
 *
 * @module
 */

import type { Bed, ShimUnderTest } from "./bed.ts";
import { runExecBurst } from "./exec_burst.ts";
import { checkBurst } from "./burst_check.ts";
import { ExitEventLog } from "./exit_events.ts";
import { shimOf } from "./procs.ts";
import { upgradeShim } from "../../sdk/shim/boot/upgrade.ts";
import { socketPath } from "../../sdk/shim/contract/socket_address.ts";

/** What the phase counted. */
export interface UpgradePhaseResult {
  /** False for a shim without live upgrade (nothing counted). */
  applicable: boolean;
  /** Upgrades that re-executed the shim. */
  upgrades: number;
  /** Upgrades refused or failed. */
  upgradeFailures: number;
  /** Whether the shim's pid was the same at the end. */
  samePid: boolean;
  /** Execs run. */
  execs: number;
  /** Wrong exit codes (Wait or Delete). */
  wrong: number;
  /** Execs with no exit code. */
  lost: number;
  /** Exit events missing / wrong. */
  eventsMissing: number;
  eventsWrong: number;
  /** Zombies under the shim at the end. */
  zombies: number;
  /** Requests held per upgrade, ms (the shim's reports). */
  heldMs: number[];
  /** A few lines about what went wrong. */
  samples: string[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * The phase's figures when it does not apply (a shim without live upgrade, a shared server):
 * nothing counted.
 *
 * @returns `applicable: false` and zeros
 */
export function upgradeNotApplicable(): UpgradePhaseResult {
  return {
    applicable: false,
    upgrades: 0,
    upgradeFailures: 0,
    samePid: true,
    execs: 0,
    wrong: 0,
    lost: 0,
    eventsMissing: 0,
    eventsWrong: 0,
    zombies: 0,
    heldMs: [],
    samples: [],
  };
}

/**
 * Runs the phase.
 *
 * @param bed the bed
 * @param shim the shim under test
 * @param opts how many execs, how many at once, how often to upgrade
 */
export async function upgradePhase(
  bed: Bed,
  shim: ShimUnderTest,
  opts: { execs: number; inFlight: number; everyMs: number },
): Promise<UpgradePhaseResult> {
  const none = upgradeNotApplicable();
  if (!shim.runtime.includes("skiff")) return none;
  const id = `upgrade-${shim.label}`;
  const r = await bed.runDetached(shim, id);
  if (r.code !== 0) throw new Error(`ctr run -d ${id} failed (${r.code}): ${r.stderr}`);
  const bundle = `${bed.c.state}/io.containerd.runtime.v2.task/${bed.ns}/${id}`;
  const socket = socketPath(Deno.readTextFileSync(`${bundle}/address`).trim());
  const pid = shimOf(bed.c, bed.ns, id);
  const events = new ExitEventLog();
  await events.subscribe(bed.client);
  const out: UpgradePhaseResult = { ...none, applicable: true, heldMs: [], samples: [] };
  let stop = false;
  const upgrader = (async () => {
    while (!stop) {
      await sleep(opts.everyMs);
      if (stop) break;
      try {
        const rep = await upgradeShim(socket, { token: crypto.randomUUID(), force: true });
        out.upgrades++;
        out.heldMs.push(rep.heldMs);
      } catch (e) {
        out.upgradeFailures++;
        if (out.samples.length < 10) out.samples.push(`upgrade: ${(e as Error).message}`);
      }
    }
  })();
  let outcomes;
  try {
    outcomes = await runExecBurst(bed.client, {
      containerId: id,
      count: opts.execs,
      inFlight: opts.inFlight,
      prefix: "u",
    });
  } finally {
    stop = true;
    await upgrader;
  }
  const check = await checkBurst(bed, id, outcomes, events);
  out.execs = check.execs;
  out.wrong = check.wrong;
  out.lost = check.lost;
  out.eventsMissing = check.eventsMissing;
  out.eventsWrong = check.eventsWrong;
  out.samePid = check.shimPid === pid;
  out.zombies = check.zombies;
  out.samples.push(...check.samples);
  out.samples = out.samples.slice(0, 10);
  return out;
}
