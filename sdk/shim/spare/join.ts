/**
 * `start`'s side of shared servers (`SKIFF_SHARED_PODS`, the server side is `./shared.ts`): join
 * the server that takes new pods, or bring the next one up holding the `create` lock while the
 * other starts of a burst wait for it; and {@linkcode handOffToSpare}, `start`'s whole part
 * (shared server, else the warm spare through `./handoff.ts`, else cold).
 *
 * @module
 */

import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import {
  CREATE_WAIT_MS,
  launcherCodeId,
  loadSpareConfig,
  sharedJoinPaths,
  sharedPodsLimit,
  spareDir,
} from "./config.ts";
import { type Adopted, exchange, handOff, type SpareHandoff, tryConnect } from "./handoff.ts";

/**
 * `start`'s whole part: hands the pod to the shared server that takes new pods, when shared
 * servers are on ({@linkcode joinSharedServer}), else to the spare of this shim binary for
 * containerd at `address`, if spares are on and one waits ({@linkcode handOff}); undefined means
 * go cold.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @param request the handoff, without the code id (the spare's configuration supplies it)
 * @example Usage
 * ```ts ignore
 * const adopted = await handOffToSpare(flags.address, socketDir, request);
 * ```
 */
export async function handOffToSpare(
  address: string,
  socketDir: string,
  request: Omit<SpareHandoff, "codeId">,
  opts: { waitForShared?: boolean } = {},
): Promise<Adopted | undefined> {
  if (opts.waitForShared) {
    const shared = await joinOrCreate(address, socketDir, request);
    if ("joined" in shared) return shared.joined;
    // Held until this short-lived process exits: its server serves and takes pods by then.
    if (shared.create) createLocks.push(shared.create);
  } else {
    const joined = await joinSharedServer(address, socketDir, request);
    if (joined) return joined;
  }
  const cfg = await loadSpareConfig(address, socketDir);
  return cfg && await handOff(cfg, { codeId: cfg.codeId, ...request });
}

/** The `create` locks this process holds (a `start` keeps its own until it exits). */
const createLocks: Deno.FsFile[] = [];

/**
 * What {@linkcode joinOrCreate} found: the shared server that took the pod, or that the caller
 * brings the next server up (holding `create`, when shared servers are on).
 */
export type JoinOrCreate = { joined: Adopted } | { create: Deno.FsFile | undefined };

/**
 * Shared servers: joins the server that takes pods; when none does, either becomes the one
 * `start` that brings the next server up (it gets `shared-<…>.create` locked, to hold until its
 * server takes pods) or, while another one does, waits for that server's join socket and joins
 * it. So a burst of starts fills one new server instead of starting one each. `create` is
 * undefined when shared servers are off, or the wait ran out.
 *
 * @param address containerd's address
 * @param socketDir the directory of shim sockets
 * @param request the handoff, without the code id
 * @param env the launcher's environment (a spare's door reads the launcher's)
 * @param held the `create` lock, taken ahead by a spare a launcher's shell knocked on
 *   ({@linkcode takeCreateAhead}): returned as `create` unless the pod joins a server (closed then)
 */
export async function joinOrCreate(
  address: string,
  socketDir: string,
  request: Omit<SpareHandoff, "codeId">,
  env: { get(key: string): string | undefined } = Deno.env,
  held?: Deno.FsFile,
): Promise<JoinOrCreate> {
  const target = sharedTarget(address, socketDir, request, env);
  if (!target) {
    held?.close();
    return { create: undefined };
  }
  // The launcher's shell took `create` for this process (held on an inherited fd until it exits).
  const inherited = env.get(LAUNCHER_ENV.createFd) !== undefined;
  const until = Date.now() + CREATE_WAIT_MS;
  for (;;) {
    const joined = await tryJoin(target);
    if (joined) {
      held?.close();
      return { joined };
    }
    if (inherited) return { create: undefined };
    const create = held ?? takeCreateLock(target.paths.create);
    if (create !== false) return { create };
    if (Date.now() > until) return { create: undefined };
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * The `create` lock of a namespace's shared servers, taken by a spare as it accepts a launcher's
 * knock, before it runs `start`: while it is held the burst's other launchers wait for the
 * server this spare becomes (their shells block on the lock, `startDoorPath`) instead of each
 * booting Deno's `start` to wait. Undefined when shared servers are off, or another start holds
 * it (`joinOrCreate` then waits as usual).
 *
 * @param dir the spares' directory (the spare's own)
 * @param namespace the pod's containerd namespace
 * @param env the launcher's environment
 */
export function takeCreateAhead(
  dir: string,
  namespace: string,
  env: { get(key: string): string | undefined },
): Deno.FsFile | undefined {
  let paths: SharedTarget["paths"] | undefined;
  try {
    paths = sharedPaths(dir, namespace, env);
  } catch {
    return undefined; // malformed: `start` says so (joinOrCreate throws)
  }
  return paths && (takeCreateLock(paths.create) || undefined);
}

/** The `create` lock, taken; false while another holds it; undefined when there is none to take. */
function takeCreateLock(path: string): Deno.FsFile | undefined | false {
  let file: Deno.FsFile;
  try {
    Deno.mkdirSync(path.slice(0, path.lastIndexOf("/")), { recursive: true, mode: 0o700 });
    file = Deno.openSync(path, { read: true, write: true, create: true, mode: 0o600 });
  } catch {
    return undefined; // no lock to take: bring a server up, as without shared servers
  }
  if (!file.tryLockSync(true)) {
    file.close();
    return false;
  }
  return file;
}

/**
 * Shared servers (`SKIFF_SHARED_PODS`): hands the pod to the shared server of this launcher's
 * code that takes new pods (`./shared.ts`), if one does. Undefined when shared servers are off,
 * none takes pods, or it refuses (full, another namespace, a pod asking for its own
 * `shim_cgroup`): the spare or a cold server then serves the pod, and with room takes the
 * next ones. Throws on a malformed `SKIFF_SHARED_PODS`.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @param request the handoff, without the code id
 * @param env the launcher's environment
 */
export async function joinSharedServer(
  address: string,
  socketDir: string,
  request: Omit<SpareHandoff, "codeId">,
  env: { get(key: string): string | undefined } = Deno.env,
): Promise<Adopted | undefined> {
  const target = sharedTarget(address, socketDir, request, env);
  return target && await tryJoin(target);
}

/** Where a pod would join a shared server, and the handoff it would send there. */
interface SharedTarget {
  paths: ReturnType<typeof sharedJoinPaths>;
  handoff: SpareHandoff;
}

/** The shared servers' join point for this pod, or undefined when it may not join one. */
function sharedTarget(
  address: string,
  socketDir: string,
  request: Omit<SpareHandoff, "codeId">,
  env: { get(key: string): string | undefined },
): SharedTarget | undefined {
  if (request.shimCgroup) return undefined;
  const paths = sharedPaths(spareDir(address, socketDir), request.flags.namespace, env);
  return paths && { paths, handoff: { codeId: paths.codeId, ...request } };
}

/**
 * The join point's files of `namespace`'s shared servers in the spares' directory `dir`, and
 * the code identity they are keyed on; undefined when shared servers are off or there is no
 * launcher to key them on. Throws on a malformed `SKIFF_SHARED_PODS`.
 */
function sharedPaths(
  dir: string,
  namespace: string,
  env: { get(key: string): string | undefined },
): (ReturnType<typeof sharedJoinPaths> & { codeId: string }) | undefined {
  if (sharedPodsLimit(env) === undefined) return undefined;
  const codeId = sharedCodeId(env);
  return codeId ? { ...sharedJoinPaths(dir, codeId, namespace), codeId } : undefined;
}

/** One attempt to hand the pod to the server taking pods at `target`. */
async function tryJoin(target: SharedTarget): Promise<Adopted | undefined> {
  const conn = await tryConnect(target.paths.socket);
  return conn && await exchange(conn, target.handoff);
}

/**
 * The code identity shared servers are keyed on: the one a bundle launcher states, else the
 * hash of the launcher's text (a source launcher); undefined without a launcher.
 *
 * @param env the launcher's environment
 */
export function sharedCodeId(
  env: { get(key: string): string | undefined } = Deno.env,
): string | undefined {
  const stated = env.get(LAUNCHER_ENV.code);
  if (stated && /^[0-9a-f]{64}$/.test(stated)) return stated;
  const launcher = env.get(LAUNCHER_ENV.launcher);
  if (!launcher) return undefined;
  try {
    return launcherCodeId(Deno.readFileSync(launcher));
  } catch {
    return undefined;
  }
}
