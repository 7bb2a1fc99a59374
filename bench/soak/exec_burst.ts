/**
 * Runs many execs in one running container through containerd's Tasks API, the way containerd's
 * own client does (Exec, Start, Wait, Delete), a few at a time, each with its own exit code,
 * and records what came back: the pid containerd reported at Start, the status Wait and Delete
 * returned, or the error.
 *
 * @example Usage
 * ```ts ignore
 * const outcomes = await runExecBurst(client, { containerId: "long", count: 300, inFlight: 8 });
 * console.log(summarizeExecs(outcomes));
 * ```
 *
 * @module
 */

import type { ContainerdClient } from "../../sdk/testing/containerd_client.ts";

/** What happened to one exec. */
export interface ExecOutcome {
  /** Position in the burst (0-based). */
  index: number;
  /** The exec id. */
  execId: string;
  /** The exit code the exec's command returns. */
  expected: number;
  /** The pid Start returned (0 when Start failed). */
  pid: number;
  /** The status Wait returned, when it returned. */
  waited?: number;
  /** The status Delete returned, when it returned. */
  deleted?: number;
  /** Why the exec has no trustworthy status (an RPC failed or timed out). */
  error?: string;
  /** When Start was called (ms since the epoch): the process cannot have exited before. */
  startAt?: number;
  /** When Wait returned (ms since the epoch). */
  waitedAt?: number;
}

/**
 * Options of {@linkcode runExecBurst}.
 *
 * @example Usage
 * ```ts ignore
 * const o: ExecBurstOptions = { containerId: "long", count: 10_000, inFlight: 8 };
 * ```
 */
export interface ExecBurstOptions {
  /** The running container the execs run in. */
  containerId: string;
  /** How many execs. */
  count: number;
  /** How many at once. Default 8. */
  inFlight?: number;
  /** Stop starting new execs after this long (ms). Default: no bound. */
  maxMs?: number;
  /** Exit code of exec `i`. Default `i % 250`. */
  codeOf?: (i: number) => number;
  /** Bound of each RPC (ms); Wait included. Default 30000. */
  rpcTimeoutMs?: number;
  /** Exec id prefix. Default `x`. */
  prefix?: string;
  /** While this returns true, keep starting execs past `count` (still within `maxMs`). */
  keepGoing?: () => boolean;
  /** Pause after a failed exec before the next (ms), so an outage does not burn the count. */
  backoffMs?: number;
  /** Called with each outcome as it completes. */
  onOutcome?: (o: ExecOutcome) => void;
}

const PROCESS_TYPE_URL = "types.containerd.io/opencontainers/runtime-spec/1/Process";

/**
 * The container's OCI process, as the base of an exec's process (env, cwd, user), the way
 * `ctr task exec` builds one.
 *
 * @param client containerd client, bound to the container's namespace
 * @param containerId the container
 * @returns the `process` object of the container's spec
 */
export async function containerProcess(
  client: ContainerdClient,
  containerId: string,
): Promise<Record<string, unknown>> {
  const got = await client.containers.get({ id: containerId });
  const value = got.container?.spec?.value;
  if (!value) throw new Error(`container "${containerId}" has no spec`);
  const spec = JSON.parse(new TextDecoder().decode(value)) as { process?: Record<string, unknown> };
  if (!spec.process) throw new Error(`the spec of container "${containerId}" has no process`);
  return spec.process;
}

/**
 * Runs `count` execs with distinct exit codes (`sh -c 'exit N'`), `inFlight` at once, each
 * one Exec, Start, Wait, Delete; stdio empty.
 *
 * @param client containerd client bound to the container's namespace, or a getter of the
 *   current one
 * @param opts container, count, concurrency, bounds
 * @returns one outcome per exec that was started, in index order
 */
export async function runExecBurst(
  client: ContainerdClient | (() => ContainerdClient),
  opts: ExecBurstOptions,
): Promise<ExecOutcome[]> {
  // A getter lets the burst move to a new connection after a containerd restart.
  const cl = typeof client === "function" ? client : () => client;
  const base = await containerProcess(cl(), opts.containerId);
  const codeOf = opts.codeOf ?? ((i: number) => i % 250);
  const timeoutMs = opts.rpcTimeoutMs ?? 30_000;
  const prefix = opts.prefix ?? "x";
  const stopAt = opts.maxMs === undefined ? Infinity : Date.now() + opts.maxMs;
  const outcomes: ExecOutcome[] = [];
  const enc = new TextEncoder();
  let next = 0;

  const one = async (index: number): Promise<ExecOutcome> => {
    const expected = codeOf(index);
    const execId = `${prefix}${index}`;
    const o: ExecOutcome = { index, execId, expected, pid: 0 };
    const ids = { containerId: opts.containerId, execId };
    const process = { ...base, terminal: false, args: ["sh", "-c", `exit ${expected}`] };
    let stage = "Exec";
    try {
      await cl().tasks.exec({
        ...ids,
        stdin: "",
        stdout: "",
        stderr: "",
        terminal: false,
        spec: { typeUrl: PROCESS_TYPE_URL, value: enc.encode(JSON.stringify(process)) },
      }, { timeoutMs });
      o.startAt = Date.now();
      stage = "Start";
      o.pid = (await cl().tasks.start(ids, { timeoutMs })).pid;
      stage = "Wait";
      o.waited = (await cl().tasks.wait(ids, { timeoutMs })).exitStatus;
      o.waitedAt = Date.now();
      stage = "DeleteProcess";
      o.deleted = (await cl().tasks.deleteProcess(ids, { timeoutMs })).exitStatus;
    } catch (e) {
      o.error = `${stage} (pid ${o.pid}): ${e instanceof Error ? e.message : String(e)}`;
    }
    return o;
  };

  const worker = async () => {
    while ((next < opts.count || opts.keepGoing?.()) && Date.now() < stopAt) {
      const o = await one(next++);
      outcomes.push(o);
      opts.onOutcome?.(o);
      if (o.error !== undefined && opts.backoffMs) {
        await new Promise((r) => setTimeout(r, opts.backoffMs));
      }
    }
  };
  await Promise.all(Array.from({ length: opts.inFlight ?? 8 }, worker));
  return outcomes.sort((a, b) => a.index - b.index);
}

/** Counts over a burst's outcomes. */
export interface ExecSummary {
  /** Execs started. */
  total: number;
  /** Execs whose Wait or Delete status differs from the exit code their command returns. */
  wrong: ExecOutcome[];
  /** Execs without a status (an RPC failed or timed out). */
  lost: ExecOutcome[];
  /** Distinct pids that more than one exec of the burst got. */
  reusedPids: number;
  /** Execs whose pid an earlier exec of the burst had had. */
  execsOnReusedPid: number;
}

/**
 * Sorts a burst's outcomes into right, wrong and lost, and counts reused pids.
 *
 * @param outcomes what {@linkcode runExecBurst} returned
 * @returns the counts and the offending outcomes
 */
export function summarizeExecs(outcomes: ExecOutcome[]): ExecSummary {
  const wrong: ExecOutcome[] = [];
  const lost: ExecOutcome[] = [];
  const byPid = new Map<number, number>();
  let execsOnReusedPid = 0;
  for (const o of outcomes) {
    if (o.pid > 0) {
      const n = byPid.get(o.pid) ?? 0;
      if (n > 0) execsOnReusedPid++;
      byPid.set(o.pid, n + 1);
    }
    if (o.error !== undefined) lost.push(o);
    else if (o.waited !== o.expected || o.deleted !== o.expected) wrong.push(o);
  }
  const reusedPids = [...byPid.values()].filter((n) => n > 1).length;
  return { total: outcomes.length, wrong, lost, reusedPids, execsOnReusedPid };
}

/**
 * For a wrong outcome, the earlier exec whose exit code it got, if one had the same pid.
 *
 * @param outcomes the whole burst
 * @param o a wrong outcome
 * @returns the earlier exec with the same pid and the code returned, or undefined
 */
export function sourceOfWrong(outcomes: ExecOutcome[], o: ExecOutcome): ExecOutcome | undefined {
  const got = o.waited !== o.expected ? o.waited : o.deleted;
  return outcomes.filter((p) => p.index < o.index && p.pid === o.pid && p.expected === got)
    .at(-1);
}
