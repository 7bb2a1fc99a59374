/**
 * Soak phase (c): containerd is restarted (SIGTERM) and then killed (SIGKILL) and started
 * again in the middle of a burst of container creates (`ctr run -d`) and execs in a running
 * container. Afterwards every task must be either reachable and correct (a container still
 * running its process; an exec with its own exit code) or gone, every exit that happened while
 * an event subscription was open must have reached containerd as a `/tasks/exit` event, and
 * once everything is deleted no shim, mount, bundle, socket or FIFO may be left.
 *
 * @example Usage
 * ```ts ignore
 * const row = await restartPhase(bed, bed.shims[0], { containers: 40, execs: 1000, inFlight: 8 });
 * ```
 *
 * @module
 */

import type { Bed, ShimUnderTest } from "./bed.ts";
import { type ExecOutcome, runExecBurst } from "./exec_burst.ts";
import { ExitEventLog } from "./exit_events.ts";
import { leakCount, leaks } from "./leaks.ts";
import { shimOf, zombiesUnder } from "./procs.ts";
import { Status } from "../../proto/gen/containerd/types/task/task_pb.ts";
import { processAlive } from "../../sdk/linux/proc_stat.ts";

/** Figures of the restart phase. */
export interface RestartPhaseResult {
  /** Containers whose creation was attempted. */
  containers: number;
  /** Of those, still running their process after the restarts (reachable and correct). */
  containersRunning: number;
  /** Of those, with no task (creation interrupted and cleaned up). */
  containersGone: number;
  /** Of those, in a wrong state (e.g. RUNNING with a dead pid) or not deletable. */
  containersWrong: number;
  /** Execs attempted. */
  execs: number;
  /** Execs whose status came back right, directly or by asking again after the restarts. */
  execsRight: number;
  /** Execs containerd no longer knows (never created, or cleaned up). */
  execsGone: number;
  /** Execs with a wrong status. */
  execsWrong: number;
  /** Exits that happened while a subscription was open, so needed an event. */
  eventsExpected: number;
  /** Of those, events that never arrived or had another status. */
  eventsMissing: number;
  /** Zombies under the running container's shim. */
  zombies: number;
  /** Shims, mounts, bundles, sockets and FIFOs left after deleting everything. */
  leaks: number;
  /** Restarts that happened while the burst was still running (2 expected). */
  restartsMidBurst: number;
  /** Wall time (s). */
  seconds: number;
  /** Up to 10 descriptions of what went wrong. */
  samples: string[];
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function isNotFound(e: unknown): boolean {
  return /not ?found/i.test(e instanceof Error ? e.message : String(e));
}

const RPC = { timeoutMs: 30_000 };

/**
 * Runs phase (c) for one shim.
 *
 * @param bed the bed (its client is replaced after each restart)
 * @param shim which shim
 * @param opts how many containers and execs the burst holds, execs in flight
 * @returns the phase's figures
 */
export async function restartPhase(
  bed: Bed,
  shim: ShimUnderTest,
  opts: { containers: number; execs: number; inFlight: number },
): Promise<RestartPhaseResult> {
  const started = Date.now();
  const samples: string[] = [];
  const hub = `hub-${shim.label}`;
  const r = await bed.runDetached(shim, hub);
  if (r.code !== 0) throw new Error(`ctr run -d ${hub} failed (${r.code}): ${r.stderr}`);
  const events = new ExitEventLog();
  await events.subscribe(bed.client);

  let burstOver = false;
  let restarting = true;
  const ids = Array.from({ length: opts.containers }, (_, i) => `burst-${shim.label}-${i}`);
  let nextId = 0;
  const creator = async () => {
    while (nextId < ids.length) {
      const id = ids[nextId++]!;
      // Failures are expected while containerd is down; the state is checked afterwards. A
      // pause after one keeps an outage from using up the burst's creates.
      const r = await bed.runDetached(shim, id).catch(() => undefined);
      if (r?.code !== 0) await sleep(500);
    }
  };
  const burst = Promise.all([
    runExecBurst(() => bed.client, {
      containerId: hub,
      count: opts.execs,
      inFlight: opts.inFlight,
      prefix: "c",
      rpcTimeoutMs: 20_000,
      // Both restarts must fall inside the burst, whatever its pace.
      keepGoing: () => restarting,
      backoffMs: 100,
      maxMs: 300_000,
    }),
    creator(),
    creator(),
  ]).finally(() => burstOver = true);

  let restartsMidBurst = 0;
  for (const signal of ["SIGTERM", "SIGKILL"] as const) {
    await sleep(2000);
    if (!burstOver) restartsMidBurst++;
    await bed.c.restart({ signal });
    bed.reconnect();
    await events.subscribe(bed.client);
  }
  // Let the burst run on the restarted containerd for a while.
  await sleep(2000);
  restarting = false;
  const [outcomes] = await burst;
  const cl = bed.client;

  // Containers: each is running its sleep, or has no task at all.
  let containersRunning = 0, containersGone = 0, containersWrong = 0;
  const killed = new Map<string, { from: number; to: number }>();
  for (const id of ids) {
    let p;
    try {
      p = (await cl.tasks.get({ containerId: id, execId: "" }, RPC)).process;
    } catch (e) {
      if (!isNotFound(e)) {
        containersWrong++;
        samples.push(`${id}: Tasks.Get failed: ${e}`);
        continue;
      }
    }
    if (!p) {
      containersGone++;
    } else if (p.status === Status.RUNNING && processAlive(p.pid)) {
      containersRunning++;
    } else if (p.status !== Status.CREATED) {
      containersWrong++;
      samples.push(
        `${id}: task ${Status[p.status]} with pid ${p.pid} (alive: ${processAlive(p.pid)})`,
      );
    } else {
      // Created but never started: the burst was cut between Create and Start.
      containersGone++;
    }
    if (p) {
      try {
        const from = Date.now();
        await cl.tasks.kill({ containerId: id, execId: "", signal: 9, all: false }, RPC)
          .catch(() => undefined);
        const w = await cl.tasks.wait({ containerId: id, execId: "" }, RPC);
        killed.set(id, { from, to: Date.now() });
        if (p.status === Status.RUNNING && w.exitStatus !== 137) {
          containersWrong++;
          samples.push(`${id}: SIGKILLed, Wait said ${w.exitStatus}`);
        }
        await cl.tasks.delete({ containerId: id }, RPC);
      } catch (e) {
        containersWrong++;
        samples.push(`${id}: kill/wait/delete failed: ${e}`);
      }
    }
    await cl.containers.delete({ id }, RPC).catch(() => undefined);
  }

  // Execs: a status, right, now or when asked again; or unknown to containerd.
  let execsRight = 0, execsGone = 0, execsWrong = 0;
  const recheck = async (o: ExecOutcome) => {
    const ids = { containerId: hub, execId: o.execId };
    let p;
    try {
      p = (await cl.tasks.get(ids, RPC)).process;
    } catch (e) {
      if (isNotFound(e)) return execsGone++;
      execsWrong++;
      return samples.push(`exec ${o.index}: Tasks.Get failed: ${e}`);
    }
    if (!p || p.status === Status.CREATED) {
      // Never started: nothing ran, nothing to attribute.
      await cl.tasks.deleteProcess(ids, RPC).catch(() => undefined);
      return execsGone++;
    }
    const status = (await cl.tasks.wait(ids, RPC)).exitStatus;
    await cl.tasks.deleteProcess(ids, RPC).catch(() => undefined);
    if (status === o.expected) return execsRight++;
    execsWrong++;
    samples.push(`exec ${o.index}: asked again, status ${status}, expected ${o.expected}`);
  };
  for (const o of outcomes) {
    if (o.error === undefined) {
      if (o.waited === o.expected && o.deleted === o.expected) execsRight++;
      else {
        execsWrong++;
        samples.push(`exec ${o.index}: expected ${o.expected}, got ${o.waited}/${o.deleted}`);
      }
    } else {
      await recheck(o).catch((e) => {
        execsWrong++;
        samples.push(`exec ${o.index}: recheck failed: ${e}`);
      });
    }
  }

  // Exit events: every exit seen while a subscription was open must have one.
  await sleep(1000);
  let eventsExpected = 0, eventsMissing = 0;
  // The exit happened between the Start (or Kill) call and Wait's reply; containerd must have
  // published its event if a subscription was open all that time (plus a second of slack).
  const need = (containerId: string, id: string, from: number, to: number, status: number) => {
    if (!events.covered(from, to + 1000)) return;
    eventsExpected++;
    const e = events.find(containerId, id);
    if (e?.exitStatus !== status) {
      eventsMissing++;
      samples.push(`${containerId}/${id}: exit event ${e ? `status ${e.exitStatus}` : "missing"}`);
    }
  };
  for (const o of outcomes) {
    if (o.startAt !== undefined && o.waitedAt !== undefined && o.waited !== undefined) {
      need(hub, o.execId, o.startAt, o.waitedAt, o.waited);
    }
  }
  for (const [id, t] of killed) need(id, id, t.from, t.to, 137);
  await events.close();

  const shimPid = shimOf(bed.c, bed.ns, hub);
  const zombies = shimPid ? zombiesUnder(shimPid).length : 0;
  if (zombies > 0) samples.push(`${zombies} zombies under shim ${shimPid}`);
  await cl.tasks.kill({ containerId: hub, execId: "", signal: 9, all: false }, RPC);
  await cl.tasks.wait({ containerId: hub, execId: "" }, RPC);
  await cl.tasks.delete({ containerId: hub }, RPC);
  await cl.containers.delete({ id: hub }, RPC);
  // Shims exit shortly after their last task is deleted.
  let left = await leaks(bed, [hub, ...ids]);
  for (let i = 0; leakCount(left) > 0 && i < 50; i++) {
    await sleep(200);
    left = await leaks(bed, [hub, ...ids]);
  }
  if (leakCount(left) > 0) samples.push(`left behind: ${JSON.stringify(left)}`);
  return {
    containers: ids.length,
    containersRunning,
    containersGone,
    containersWrong,
    execs: outcomes.length,
    execsRight,
    execsGone,
    execsWrong,
    eventsExpected,
    eventsMissing,
    zombies,
    leaks: leakCount(left),
    restartsMidBurst,
    seconds: (Date.now() - started) / 1000,
    samples: samples.slice(0, 10),
  };
}
