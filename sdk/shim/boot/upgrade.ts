/**
 * `<shim binary> upgrade (--all | --id ID) [--namespace NS]`: the operator's command for live
 * upgrades. It finds the running servers of this binary from containerd's task state (each
 * container's bundle has the server's `address` and `shim.pid`), asks each to re-execute into
 * the code installed now (`skiff.shim.v1.Upgrade` on its own socket), prints a line per shim
 * and exits 0 only when every one upgraded or already ran the installed code.
 *
 * @module
 */

import { TtrpcWireClient } from "../../ttrpc/wire_client.ts";
import { Code, TTRPC_DIAL_FAILED, TTRPC_SHUTTING_DOWN } from "../../ttrpc/status_error.ts";
import { ADDRESS_FILE, socketPath } from "../contract/socket_address.ts";
import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import {
  UPGRADE_ENDED,
  UPGRADE_METHOD,
  UPGRADE_REPORT,
  UPGRADE_REQUEST,
  UPGRADE_SERVICE,
  type UpgradeReport,
  type UpgradeRequest,
} from "../contract/upgrade.ts";

/** containerd's task state directory for the runtime v2 shims (its `state` + plugin id). */
export const DEFAULT_TASK_STATE_DIR = "/run/containerd/io.containerd.runtime.v2.task";

/**
 * One running server of a shim binary, as found in containerd's task state.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RunningShim } from "./upgrade.ts";
 * const s: RunningShim = { socket: "/run/containerd/s/ab", pid: 4242, namespace: "k8s.io", ids: ["pod", "app"] };
 * strictEqual(s.ids.length, 2);
 * ```
 */
export interface RunningShim {
  /** The server's socket path. */
  socket: string;
  /** Its pid. */
  pid: number;
  /** The namespace of its containers. */
  namespace: string;
  /** The containers it serves. */
  ids: string[];
}

/**
 * Where containerd 2.x's `shim` sandboxer keeps its sandboxes' bundles (the Sandbox API's
 * shims), beside the task state directory `stateDir`.
 *
 * @param stateDir containerd's runtime v2 task state directory
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { sandboxStateDir } from "./upgrade.ts";
 * strictEqual(
 *   sandboxStateDir("/run/containerd/io.containerd.runtime.v2.task"),
 *   "/run/containerd/io.containerd.sandbox.controller.v1.shim",
 * );
 * ```
 */
export function sandboxStateDir(stateDir: string): string {
  const parent = stateDir.replace(/\/+$/, "").replace(/\/[^/]*$/, "") || "/";
  return `${parent === "/" ? "" : parent}/io.containerd.sandbox.controller.v1.shim`;
}

/**
 * The servers started by `launcher`, from the bundles under `stateDir` (`<ns>/<id>/address`
 * and `shim.pid`) and under the `shim` sandboxer's directory beside it
 * ({@linkcode sandboxStateDir}: a Sandbox API sandbox's shim); a server is counted once however
 * many containers it serves.
 *
 * @param stateDir containerd's runtime v2 task state directory
 * @param launcher the shim binary's path; only its servers are listed
 * @param filter one container (with its namespace, or any)
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { findShims } from "./upgrade.ts";
 * const dir = Deno.makeTempDirSync();
 * Deno.mkdirSync(`${dir}/default/web`, { recursive: true });
 * Deno.writeTextFileSync(`${dir}/default/web/address`, "unix:///run/containerd/s/ab");
 * Deno.writeTextFileSync(`${dir}/default/web/shim.pid`, String(Deno.pid)); // not launched by it
 * deepStrictEqual(findShims(dir, "/usr/local/bin/containerd-shim-mine-v1"), []);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function findShims(
  stateDir: string,
  launcher: string,
  filter?: { id: string; namespace?: string },
): RunningShim[] {
  // `start` records the server's pid (`shim.pid`) in the bundle of the group's first task only,
  // and every task's `address`: group by socket first, then pick.
  const bySocket = new Map<string, RunningShim & { pids: number[] }>();
  for (const [dir, ns] of namespaces([stateDir, sandboxStateDir(stateDir)])) {
    for (const id of entries(`${dir}/${ns}`)) {
      const bundle = `${dir}/${ns}/${id}`;
      const socket = socketOf(bundle);
      if (!socket) continue; // not a shim's bundle, or one being set up
      let pid = 0;
      try {
        pid = Number(Deno.readTextFileSync(`${bundle}/shim.pid`).trim());
      } catch { /* another task of the group has it */ }
      let s = bySocket.get(socket);
      if (!s) bySocket.set(socket, s = { socket, pid: 0, namespace: ns, ids: [], pids: [] });
      s.ids.push(id);
      if (pid > 0) s.pids.push(pid);
    }
  }
  const out: RunningShim[] = [];
  for (const { pids, ...s } of bySocket.values()) {
    const pid = pids.find((p) => launchedBy(p, launcher));
    if (pid === undefined) continue;
    if (
      filter &&
      !(s.ids.includes(filter.id) && (!filter.namespace || filter.namespace === s.namespace))
    ) {
      continue;
    }
    out.push({ ...s, pid });
  }
  return out;
}

/**
 * The socket a task's shim serves: `start`'s `address` file, else (a task containerd 2.x created
 * through its sandbox's endpoint, without a `start`) the address in containerd's
 * `bootstrap.json`.
 */
export function socketOf(bundle: string): string | undefined {
  try {
    const a = Deno.readTextFileSync(`${bundle}/${ADDRESS_FILE}`).trim();
    if (a) return socketPath(a);
  } catch { /* none: a task created through its sandbox's endpoint */ }
  try {
    const b = JSON.parse(Deno.readTextFileSync(`${bundle}/bootstrap.json`));
    return typeof b?.address === "string" && b.address ? socketPath(b.address) : undefined;
  } catch {
    return undefined;
  }
}

function namespaces(dirs: string[]): [string, string][] {
  return dirs.flatMap((dir) => entries(dir).map((ns): [string, string] => [dir, ns]));
}

function entries(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].filter((e) => e.isDirectory).map((e) => e.name).sort();
  } catch {
    return [];
  }
}

/**
 * Whether an upgrade failed because its shim ended while the command ran (its container exited
 * and was deleted), not because of the upgrade: the server said it was shutting down (its own
 * refusal, or its ttrpc server draining), or the call never reached it and its socket is gone
 * (Shutdown removes it first; an upgrade puts a new one in place atomically). A connection lost
 * while the call ran is a failure whatever is left: the upgrade may have ended the shim.
 *
 * @param e what the upgrade call threw
 * @param s the shim it was sent to
 */
export function endedMeanwhile(e: unknown, s: RunningShim): boolean {
  const err = e as { code?: number; rawMessage?: string };
  if (err?.code !== Code.Unavailable) return false;
  const said = err.rawMessage ?? "";
  if (said.startsWith(`${UPGRADE_ENDED}:`) || said === TTRPC_SHUTTING_DOWN) return true;
  if (!said.startsWith(TTRPC_DIAL_FAILED)) return false;
  try {
    return !Deno.lstatSync(s.socket).isSocket;
  } catch {
    return true;
  }
}

/** Whether process `pid` runs code started by `launcher` (its environment names it). */
function launchedBy(pid: number, launcher: string): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    const prefix = `${LAUNCHER_ENV.launcher}=`;
    const env = Deno.readTextFileSync(`/proc/${pid}/environ`).split("\0");
    const theirs = env.find((e) => e.startsWith(prefix))?.slice(prefix.length);
    // The same file, however it was named (a relative path, a symbolic link).
    return theirs !== undefined && (theirs === launcher || realPath(theirs) === realPath(launcher));
  } catch {
    return false;
  }
}

function realPath(path: string): string | undefined {
  try {
    return Deno.realPathSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Asks one server to upgrade; resolves with its report.
 *
 * @param socket the server's socket
 * @param request what to ask
 * @param timeoutMs how long to wait for the answer
 */
export async function upgradeShim(
  socket: string,
  request: UpgradeRequest,
  timeoutMs = 60_000,
): Promise<UpgradeReport> {
  const client = new TtrpcWireClient({ path: socket });
  try {
    return await client.call(
      UPGRADE_SERVICE,
      UPGRADE_METHOD,
      UPGRADE_REQUEST as never,
      UPGRADE_REPORT as never,
      request as never,
      { timeoutMs },
    ) as UpgradeReport;
  } finally {
    await client.close();
  }
}

interface UpgradeArgs {
  all: boolean;
  help?: boolean;
  id?: string;
  namespace?: string;
  "state-dir": string;
  force: boolean;
  "settle-timeout-ms"?: string;
}

/** The command's flags (no node:util: the server's graph loads no Node module). */
function parseUpgradeArgs(argv: readonly string[]): UpgradeArgs {
  const out: UpgradeArgs = { all: false, force: false, "state-dir": DEFAULT_TASK_STATE_DIR };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = argv[i].replace(/^--?/, "").split(/=(.*)/s, 2);
    if (!argv[i].startsWith("-")) throw new Error(`unexpected argument "${argv[i]}"`);
    if (name === "all" || name === "force" || name === "help") {
      out[name] = true;
      continue;
    }
    if (!["id", "namespace", "state-dir", "settle-timeout-ms"].includes(name)) {
      throw new Error(`unknown flag "${argv[i]}"`);
    }
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`flag --${name} needs a value`);
    out[name as "id"] = value;
  }
  return out;
}

const USAGE = "usage: <shim binary> upgrade (--all | --id ID) [--namespace NS] " +
  "[--state-dir DIR] [--force] [--settle-timeout-ms MS]\n" +
  "  run it as the installed shim binary containerd runs; --state-dir is containerd's task " +
  `state directory (default ${DEFAULT_TASK_STATE_DIR}; <state>/io.containerd.runtime.v2.task ` +
  "for a containerd whose state = <state>)";

/**
 * Runs the `upgrade` command; resolves with its exit code.
 *
 * @param argv the arguments after `upgrade`
 * @param launcher this binary's path (the launcher's `$0`)
 */
export async function runUpgrade(argv: readonly string[], launcher: string): Promise<number> {
  let values: UpgradeArgs;
  try {
    values = parseUpgradeArgs(argv);
  } catch (e) {
    console.error(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values.all === (values.id !== undefined)) {
    console.error(`give exactly one of --all and --id\n${USAGE}`);
    return 2;
  }
  const filter = values.id !== undefined
    ? { id: values.id, ...(values.namespace ? { namespace: values.namespace } : {}) }
    : undefined;
  const shims = findShims(values["state-dir"], launcher, filter);
  if (shims.length === 0) {
    const where = `looked in ${values["state-dir"]} and ${sandboxStateDir(values["state-dir"])}`;
    console.log(
      filter
        ? `no running shim of ${launcher} serves container "${filter.id}" (${where})`
        : `no running shim of ${launcher} (${where})`,
    );
    return filter ? 1 : 0;
  }
  const settle = values["settle-timeout-ms"];
  let failed = 0;
  // Four at a time: each holds its pod's requests for a moment and boots a Deno.
  const queue = [...shims];
  await Promise.all(Array.from({ length: Math.min(4, queue.length) }, async () => {
    for (let s; (s = queue.shift());) {
      const what = `pid ${s.pid} ${s.namespace}/${s.ids.join(",")}`;
      try {
        const r = await upgradeShim(s.socket, {
          token: crypto.randomUUID(),
          force: values.force,
          ...(settle ? { settleTimeoutMs: Number(settle) } : {}),
        });
        console.log(
          r.upgraded
            ? `${what}: upgraded ${r.from.code.slice(0, 12)} -> ${r.to.code.slice(0, 12)} ` +
              `(skiff ${r.from.version} -> ${r.to.version}), requests held ${r.heldMs} ms, ` +
              `${r.containers} containers, ${r.connections} connections`
            : `${what}: already runs the installed code ${r.to.code.slice(0, 12)}`,
        );
      } catch (e) {
        if (endedMeanwhile(e, s)) {
          console.log(`${what}: ended meanwhile, nothing to upgrade: ${(e as Error).message}`);
          continue;
        }
        failed++;
        console.log(`${what}: FAILED: ${(e as Error).message}`);
      }
    }
  }));
  return failed === 0 ? 0 : 1;
}
