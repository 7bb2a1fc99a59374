/**
 * The soak in shared mode (`SKIFF_SHARED_PODS`, sdk/shim/spare/shared.ts): `ctr` makes every
 * container a pod of its own, and the phases run one container (or one burst) at a time, so on
 * their own they would mostly start a server per pod. Neighbour pods, started before the phases
 * and kept running through them, hold a shared server open: the phases' pods join it while it
 * has room (and fill further servers in the burst), so the phases' execs, exits, restarts and
 * removals happen in processes that serve other pods too. Afterwards the neighbours must still
 * run and answer an exec (a phase's pod ending, containerd restarted and killed: none of it may
 * touch them), and once removed leave nothing behind.
 *
 * @example Usage
 * ```ts ignore
 * const n = await startNeighbours(bed, shim, 2);
 * // ... phases ...
 * const figures = await endNeighbours(bed, n);
 * ```
 *
 * @module
 */

import type { Bed, ShimUnderTest } from "./bed.ts";
import { leakCount, leaks } from "./leaks.ts";
import { processAlive } from "../../sdk/linux/proc_stat.ts";

/** What shared mode adds to a soak row. */
export interface SharedFigures {
  /** Neighbour pods kept running through the phases. */
  neighbours: number;
  /** Server processes the neighbours were served by (1: they shared one). */
  neighbourServers: number;
  /** Neighbours that did not run on or answer an exec after the phases. */
  neighboursLost: number;
  /** `serving ... origin=shared` lines in containerd's log: pods that joined a shared server. */
  joined: number;
  /** Shims, mounts, bundles and sockets the neighbours left once removed. */
  leaks: number;
  /** Descriptions of what went wrong. */
  samples: string[];
}

/** The neighbours started by {@linkcode startNeighbours}. */
export interface Neighbours {
  shim: ShimUnderTest;
  ids: string[];
  /** Server pid per neighbour (its bundle's `shim.pid`). */
  servers: Map<string, number>;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * The server `start` recorded in a container's bundle (`shim.pid`), read while it runs.
 *
 * @param bed the bed
 * @param id the container
 * @returns the server's pid, or undefined when the bundle names none
 */
export function serverOf(bed: Bed, id: string): number | undefined {
  try {
    const path = `${bed.c.state}/io.containerd.runtime.v2.task/${bed.ns}/${id}/shim.pid`;
    const pid = Number(Deno.readTextFileSync(path).trim());
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Starts `count` sleeping neighbour containers, one after the other (so they fill one server),
 * and adds them to the bed's kept containers.
 *
 * @param bed the bed (installed with `sharedPods`)
 * @param shim skiff's shim
 * @param count how many
 * @returns the neighbours
 */
export async function startNeighbours(
  bed: Bed,
  shim: ShimUnderTest,
  count: number,
): Promise<Neighbours> {
  const n: Neighbours = { shim, ids: [], servers: new Map() };
  for (let i = 0; i < count; i++) {
    const id = `neighbour-${shim.label}-${i}`;
    const r = await bed.runDetached(shim, id);
    if (r.code !== 0) throw new Error(`ctr run -d ${id} failed (${r.code}): ${r.stderr}`);
    bed.keep.add(id);
    n.ids.push(id);
    const pid = serverOf(bed, id);
    if (pid !== undefined) n.servers.set(id, pid);
  }
  return n;
}

/** Counts containerd's `serving` lines of pods that joined a shared server. */
export async function joinedCount(bed: Bed): Promise<number> {
  return (await bed.c.logs()).split("\n")
    .filter((l) => /msg="?serving/.test(l) && /origin=shared/.test(l)).length;
}

/**
 * Checks the neighbours after the phases (running, an exec answers), removes them and checks
 * that they left nothing (their servers exit once their last pod is gone).
 *
 * @param bed the bed
 * @param n what {@linkcode startNeighbours} returned
 * @returns the figures
 */
export async function endNeighbours(bed: Bed, n: Neighbours): Promise<SharedFigures> {
  const samples: string[] = [];
  let neighboursLost = 0;
  const RPC = { timeoutMs: 30_000 };
  for (const id of n.ids) {
    try {
      const p = (await bed.client.tasks.get({ containerId: id, execId: "" }, RPC)).process;
      if (!p || !processAlive(p.pid)) throw new Error(`no live task (pid ${p?.pid})`);
      const x = await bed.ctr(["tasks", "exec", "--exec-id", `check-${id}`, id, "true"]);
      if (x.code !== 0) throw new Error(`exec: ${x.code} ${x.stderr.trim()}`);
    } catch (e) {
      neighboursLost++;
      samples.push(`neighbour ${id}: ${(e as Error).message}`);
    }
  }
  const joined = await joinedCount(bed);
  for (const id of n.ids) {
    await bed.ctr(["tasks", "kill", "-s", "KILL", id]);
    for (let i = 0; i < 100; i++) {
      const d = await bed.ctr(["tasks", "delete", id]);
      if (d.code === 0 || /not ?found/i.test(d.stderr)) break;
      await sleep(100);
    }
    await bed.ctr(["containers", "delete", id]);
    bed.keep.delete(id);
  }
  let left = await leaks(bed, n.ids);
  const servers = new Set(n.servers.values());
  const serving = () => [...servers].filter((pid) => processAlive(pid));
  for (let i = 0; (leakCount(left) > 0 || serving().length > 0) && i < 450; i++) {
    await sleep(200);
    left = await leaks(bed, n.ids);
  }
  if (leakCount(left) > 0) samples.push(`neighbours left behind: ${JSON.stringify(left)}`);
  if (serving().length > 0) samples.push(`neighbours' servers still run: ${serving()}`);
  return {
    neighbours: n.ids.length,
    neighbourServers: servers.size,
    neighboursLost,
    joined,
    leaks: leakCount(left) + serving().length,
    samples,
  };
}
