/**
 * The `start` action: containerd runs `<shim> -namespace … -address … -id … start` in the
 * bundle and reads one answer from its combined stdout+stderr. This module tells containerd's
 * dialects apart (1.6 → 2.3+), finds or spawns the long-running server, and answers in the
 * caller's dialect. It imports nothing heavy: no ttrpc server, no Linux mechanics.
 *
 * @module
 */

import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import type { Any } from "@bufbuild/protobuf/wkt";
import type { BootstrapParams } from "../../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import {
  decodeAny,
  decodeBootstrapParams,
  decodeRuncOptions,
  encodeBootstrapResult,
} from "../../../proto/wire.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { endpointJson, type TaskApiEndpoint } from "../endpoint.ts";
import { bareTypeName, resolveOptions, RUNC_OPTIONS_TYPE } from "../options.ts";
import type { Shim } from "../shim.ts";
import {
  ADDRESS_FILE,
  DEFAULT_SOCKET_DIR,
  shimSocketAddress,
  socketPath,
} from "../contract/socket_address.ts";
import { setOomScoreAdj, shimOomScore } from "../../linux/oom_score.ts";
import { niceOf } from "../../linux/proc_stat.ts";
import { containerdProcess, SPARE_DAEMON_ENV, type StartContext } from "../spare/handoff.ts";
import { handOffToSpare } from "../spare/join.ts";

export type { StartContext } from "../spare/handoff.ts";
import { containerdVersion } from "../contract/containerd_version.ts";
import { groupKey, pathPresent, socketAlive } from "../contract/server_socket.ts";
import { listenReady, READY_SOCKET_ENV, type ReadyListener } from "./ready.ts";

export { GROUP_ANNOTATIONS, groupKey, socketAlive } from "../contract/server_socket.ts";

/** Which protocol dialect containerd spoke on `start`'s stdin. */
export interface StartInput {
  /** "bootstrap" (containerd 2.3+: `BootstrapParams`) or "legacy" (an options `Any`, or nothing). */
  dialect: "bootstrap" | "legacy";
  /** The decoded params (bootstrap dialect). */
  params?: BootstrapParams;
  /** Option carriers found (the legacy `Any`, or every bootstrap extension). */
  carriers: Any[];
}

/**
 * Tells containerd's `start` stdin dialects apart. A `BootstrapParams` message also decodes as
 * an `Any`, so it is recognised only when its id and namespace equal the flags.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseStartInput } from "./start.ts";
 * const none = parseStartInput(new Uint8Array(), "c1", "default");
 * strictEqual(none.dialect, "legacy");
 * strictEqual(none.carriers.length, 0);
 * ```
 */
export function parseStartInput(stdin: Uint8Array, id: string, namespace: string): StartInput {
  if (stdin.length === 0) return { dialect: "legacy", carriers: [] };
  try {
    const params = decodeBootstrapParams(stdin);
    if (params.instanceId === id && params.namespace === namespace) {
      return {
        dialect: "bootstrap",
        params,
        carriers: params.extensions.flatMap((e) => e.value ? [e.value] : []),
      };
    }
  } catch { /* not bootstrap params */ }
  try {
    return { dialect: "legacy", carriers: [decodeAny(stdin)] };
  } catch {
    // containerd 2.x ignores undecodable start options too; Create carries them again.
    return { dialect: "legacy", carriers: [] };
  }
}

/**
 * Formats `start`'s answer. containerd 2.3+ (bootstrap dialect) gets a protobuf
 * `BootstrapResult`; 2.0–2.2 get JSON, which is the only way to advertise version 3 to them;
 * 1.6 and 1.7 get the plain address (1.6 takes the whole output as the address, 1.7 rejects
 * versions above 2).
 *
 * @param daemon containerd's version as `[major, minor]`, when known
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { formatStartAnswer } from "./start.ts";
 * const ep = { address: "unix:///run/containerd/s/x", version: 3, protocol: "ttrpc" } as const;
 * strictEqual(formatStartAnswer("legacy", ep, [1, 6]), "unix:///run/containerd/s/x");
 * ```
 */
export function formatStartAnswer(
  dialect: "bootstrap" | "legacy",
  ep: TaskApiEndpoint,
  daemon: [number, number] | undefined,
): string | Uint8Array {
  if (dialect === "bootstrap") {
    return encodeBootstrapResult(ep);
  }
  if (daemon && daemon[0] >= 2) return endpointJson(ep);
  if (ep.protocol === "ttrpc") return ep.address;
  return endpointJson({ ...ep, version: 2 });
}

/**
 * The cgroup runc options ask the shim process to join (`shim_cgroup`), from `start`'s option
 * carriers; the last one that names it wins. Like containerd's runc shim, only runc options
 * carry it, whatever the runtime's own options type.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimCgroupOf } from "./start.ts";
 * strictEqual(shimCgroupOf([]), undefined);
 * ```
 */
export function shimCgroupOf(carriers: readonly Any[]): string | undefined {
  let cgroup: string | undefined;
  for (const carrier of carriers) {
    if (bareTypeName(carrier.typeUrl) !== RUNC_OPTIONS_TYPE) continue;
    try {
      cgroup = decodeRuncOptions(carrier.value).shimCgroup || cgroup;
    } catch { /* undecodable options: Create reports them */ }
  }
  return cgroup;
}

/**
 * This process as `start`: its working directory, environment and parent, and a waiting spare
 * ({@linkcode handOffToSpare}).
 */
export function ownStartContext(flags: Pick<ShimFlags, "address">): StartContext {
  return {
    bundle: Deno.cwd(),
    env: Deno.env.toObject(),
    process: "self",
    containerd: Deno.ppid,
    daemon: containerdProcess(),
    // Shared servers: a burst's starts wait for the one server one of them brings up.
    handOff: (request, socketDir) =>
      handOffToSpare(flags.address, socketDir, request, { waitForShared: true }),
  };
}

/**
 * Runs `start`: returns the bytes/string to print. Throws an Error with a message that
 * containerd will show when the server cannot be started.
 *
 * @example Usage
 * ```ts ignore
 * const answer = await runStart(shim, flags, await readAll(Deno.stdin));
 * ```
 */
export async function runStart<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  stdin: Uint8Array,
  ctx: StartContext = ownStartContext(flags),
): Promise<string | Uint8Array> {
  const bundle = ctx.bundle;
  const input = parseStartInput(stdin, flags.id, flags.namespace);
  const socketDir = input.params?.socketDir || DEFAULT_SOCKET_DIR;
  const group = groupKey(bundle, flags.id);
  const address = shimSocketAddress(flags.address, flags.namespace, group, socketDir);
  const path = socketPath(address);
  const ep: TaskApiEndpoint = { address, version: shim.taskApiVersion, protocol: "ttrpc" };
  // The answer's format depends on containerd's version, except with 2.3+'s bootstrap params
  // and on 1.6 (the only one without GRPC_ADDRESS), whose format is the unknown version's.
  const needVersion = input.dialect !== "bootstrap" && ctx.env.GRPC_ADDRESS !== undefined;
  let daemon: Promise<[number, number] | undefined> | undefined;
  const version = () =>
    daemon ??= needVersion ? containerdVersion(flags.publishBinary, socketDir) : undefined;

  // Options given at start are kept for the server; endpoint carriers are not options.
  let options: T | undefined;
  for (const carrier of input.carriers) {
    try {
      const r = resolveOptions(shim.options, carrier, options, shim.runtimeName);
      if (r.fromCarrier) options = r.options;
    } catch { /* Create validates options and reports errors with a code */ }
  }
  if (options !== undefined) {
    Deno.writeTextFileSync(`${bundle}/options.json`, JSON.stringify(options));
  }

  // A fresh container's socket is not there: nothing to ask, nothing to remove.
  const present = pathPresent(path);
  if (!present || !(await socketAlive(path))) {
    Deno.mkdirSync(socketDir, { recursive: true, mode: 0o700 });
    if (present) {
      try {
        Deno.removeSync(path); // a dead server's
      } catch { /* gone meanwhile */ }
    }
    const shimCgroup = shimCgroupOf(input.carriers);
    let oomScore: number | undefined;
    try {
      oomScore = shimOomScore(ctx.containerd);
    } catch { /* our parent is gone: nothing to be one above */ }
    // A warm spare (spare/handoff.ts) takes the container if one waits; else cold.
    const adopted = await ctx.handOff({
      flags: {
        namespace: flags.namespace,
        id: flags.id,
        address: flags.address,
        publishBinary: flags.publishBinary,
        debug: flags.debug,
        socket: path,
      },
      bundle,
      env: ctx.env,
      shimCgroup,
      oomScore,
      nice: niceOf(ctx.process),
      daemon: ctx.daemon,
    }, socketDir);
    // A spare knows containerd's version already; else ask containerd while the server starts.
    if (adopted?.containerd) daemon = Promise.resolve(adopted.containerd);
    version();
    const pid = adopted?.pid ??
      await spawnServer(flags, path, bundle, shimCgroup, oomScore, ctx.daemon);
    // As containerd's Go shims: the server's pid in the bundle, for operators and tools (an
    // adopted spare's command line does not name the container).
    try {
      Deno.writeTextFileSync(`${bundle}/shim.pid`, String(pid));
    } catch { /* the bundle is containerd's; the pid file is a courtesy */ }
  }
  Deno.writeTextFileSync(`${bundle}/${ADDRESS_FILE}`, address);
  return formatStartAnswer(input.dialect, ep, await version());
}

async function spawnServer(
  flags: ShimFlags,
  path: string,
  bundle: string,
  shimCgroup: string | undefined,
  oomScore: number | undefined,
  daemon: string,
): Promise<number> {
  // Re-run the same launcher containerd ran, so the server gets the same Deno flags.
  const launcher = Deno.env.get(LAUNCHER_ENV.launcher);
  const [cmd, ...pre] = launcher
    ? [launcher]
    : [Deno.execPath(), "run", "-A", "--quiet", "--no-prompt", new URL(Deno.mainModule).pathname];
  const args = [
    ...pre,
    "-namespace",
    flags.namespace,
    "-id",
    flags.id,
    "-address",
    flags.address,
    "-publish-binary",
    flags.publishBinary,
    "-socket",
    path,
    ...(flags.debug ? ["-debug"] : []),
  ];
  // The server says when it listens (./ready.ts); `start` waits for that instead of polling.
  const ready = listenReady(path);
  try {
    // stdio on /dev/null: containerd reads start's combined output until EOF, so the server
    // must not inherit our pipes. detached: a new session, so it outlives us.
    const child = new Deno.Command(cmd, {
      args,
      cwd: bundle,
      stdin: "null",
      stdout: "null",
      stderr: "null",
      detached: true,
      env: {
        // For the next spare, which the server spawns (serve.ts); the server drops it from its env.
        [SPARE_DAEMON_ENV]: daemon,
        ...(ready ? { [READY_SOCKET_ENV]: ready.path } : {}),
      },
    }).spawn();
    child.unref();
    if (oomScore !== undefined) {
      try {
        setOomScoreAdj(child.pid, oomScore);
      } catch (e) {
        // As containerd's runc shim: a start that cannot set the shim's OOM score fails.
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
        throw e;
      }
    }
    if (shimCgroup) {
      // Loaded only when asked for: most starts never touch cgroups.
      const { joinCgroup } = await import("../../linux/cgroup_join.ts");
      try {
        await joinCgroup(child.pid, shimCgroup);
      } catch (e) {
        // As containerd's runc shim: a start that cannot honour shim_cgroup fails, server and all.
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
        throw e;
      }
    }
    await untilServing(child, path, bundle, ready);
    return child.pid;
  } finally {
    ready?.close();
  }
}

/** How often `start` looks for the server's socket when the server has not said it listens. */
const POLL_MS = 2;
/** How often it looks while it waits to hear from the server (a fallback: it should not need to). */
const POLL_WHILE_LISTENING_MS = 100;

/**
 * Waits until the server's socket answers: woken by the server's notice (`ready`), by its exit,
 * or by a slow poll; without a ready socket, or once a notice came that the socket did not
 * confirm, by a 2 ms poll.
 */
async function untilServing(
  child: Deno.ChildProcess,
  path: string,
  bundle: string,
  ready: ReadyListener | undefined,
): Promise<void> {
  const state: { exited?: Deno.CommandStatus } = {};
  const exited = child.status.then((s) => void (state.exited = s));
  let notice: Promise<void> | undefined = ready?.notified.then(() => void (notice = undefined));
  // Generous: under emulation (the cgroup v2 test guest runs ~10x slower) a first start of
  // deno can take longer than 20 s; a server that dies early is reported at once anyway.
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (await socketAlive(path)) return;
    if (state.exited) {
      throw new Error(
        `shim server exited with code ${state.exited.code} before serving on "${path}"; ` +
          `see the shim log in ${bundle}/log`,
      );
    }
    await (notice
      ? Promise.race([notice, exited, pause(POLL_WHILE_LISTENING_MS)])
      : pause(POLL_MS));
  }
  throw new Error(`shim server did not serve on "${path}" within 60s`);
}

/**
 * Waits `ms` without `setTimeout`: a process's first timer makes Deno load its Node-compatible
 * timers (10-17 ms of CPU here, taken from the server booting beside it); `AbortSignal.timeout`
 * does not (~1 ms). It cannot be cancelled, which a poll that always waits it out never needs.
 */
function pause(ms: number): Promise<void> {
  return new Promise((r) => AbortSignal.timeout(ms).addEventListener("abort", () => r()));
}
