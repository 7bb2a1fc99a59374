/**
 * Live upgrade: the server re-executes itself (`execve`, same pid) into the code installed now,
 * keeping containerd's connections, its listening socket, its children and every container's
 * stdio. The old code holds new requests, waits until only carried calls (`Wait`) run and no
 * exit or stdio chunk is mid-way, writes the state, clears close-on-exec on what it hands on
 * and re-executes the launcher; the new code ({@linkcode resumeUpgrade}) takes it all back and
 * replays the held requests. Before anything is held, the installed code is asked whether it
 * can take the state (`-upgrade-check`): a broken bundle or an unknown format is refused while
 * the old code keeps serving.
 *
 * @module
 */

import type { HandlerContext } from "@connectrpc/connect";
import type { TtrpcServer, WireMethod } from "../../ttrpc/server.ts";
import { Code, statusError } from "../../ttrpc/status_error.ts";
import { close } from "../../linux/libc.ts";
import {
  acceptPending,
  descriptorsByLink,
  execInPlace,
  linkOf,
  listeningSockets,
  setCloseOnExec,
  unixSocketName,
} from "../../linux/descriptors.ts";
import type { Reaper } from "../../linux/reaper.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import {
  type CodeIdentity,
  fromBase64,
  parseUpgradeState,
  toBase64,
  UPGRADE_CHECK_FLAG,
  UPGRADE_ENDED,
  UPGRADE_METHOD,
  UPGRADE_REPORT,
  UPGRADE_REQUEST,
  UPGRADE_SERVICE,
  UPGRADE_STATE_FORMAT,
  UPGRADE_STATE_SUFFIX,
  type UpgradeReport,
  type UpgradeRequest,
  type UpgradeState,
} from "../contract/upgrade.ts";
import { SKIFF_VERSION } from "../version.ts";
import type { Logger } from "../logger.ts";
import type { Shim } from "../shim.ts";
import type { EventPublisher } from "./events.ts";
import { carriedDescriptors, type ContainerCarry } from "./carry.ts";
import { fdConn } from "./fd_conn.ts";

const DEFAULT_SETTLE_MS = 5_000;
/** The installed code's check's bound when the caller gives no more time (see checkTimeoutMs). */
const CHECK_TIMEOUT_MS = 30_000;
/** Carried, not awaited: calls that may wait for a long time and answer the same again. */
const CARRIED_METHODS = new Set(["Wait", "WaitSandbox", UPGRADE_METHOD]);

/** What the upgrade needs of the task service (sdk/shim/server/task_service.ts). */
export interface UpgradableTasks {
  /** The containers served. */
  readonly containers: ReadonlyMap<string, unknown>;
  /** No exit and no stdio chunk mid-way. */
  readonly settled: boolean;
  /** Every container's state; throws saying why one cannot be carried. */
  carry(): ContainerCarry[];
  /** Takes carried containers back. */
  adopt(carried: readonly ContainerCarry[]): Promise<void>;
}

/** What the upgrade needs of the running server. */
export interface UpgradeDeps {
  /** containerd's flags, as the server was started with. */
  flags: ShimFlags;
  /** The server's socket. */
  socket: string;
  /** The bundle the server started in. */
  bundle: string;
  /** The ttrpc server. */
  server: TtrpcServer;
  /** The containers. */
  tasks: UpgradableTasks;
  /** Events still to publish. */
  publisher: Pick<EventPublisher, "stats">;
  /** The Sandbox API's sandboxes' state; throws saying why one cannot be carried. */
  carrySandboxes(): unknown[];
  /** Runtime options `start` handed over. */
  inheritedOptions(): unknown;
  /** The server's log. */
  logger: Logger;
  /** The shim's own upgrade hooks (`Shim.prepareUpgrade` and the rest), where it has them. */
  shim: Pick<Shim<object>, "prepareUpgrade" | "upgradeCancelled" | "carryUpgrade">;
  /** Set in the code an upgrade started: the state it resumed from. */
  resumed?: UpgradeState;
  /** Why this server cannot be upgraded live (a shared server), when it cannot. */
  refusal?: () => string | undefined;
  /** Why the pod's server is ending (containerd's Shutdown, a signal), once it is. */
  ending?: () => string | undefined;
}

/** The code this process runs. */
export function currentCode(): CodeIdentity {
  return { code: Deno.env.get(LAUNCHER_ENV.code) ?? "unknown", version: SKIFF_VERSION };
}

/** The code identity a launcher file states (`SKIFF_SHIM_CODE=...`), or "unknown". */
function installedCode(launcher: string): string {
  try {
    const m = new RegExp(`^${LAUNCHER_ENV.code}=([0-9a-f]+)$`, "m")
      .exec(Deno.readTextFileSync(launcher));
    return m ? m[1] : "unknown";
  } catch (e) {
    throw statusError(
      `cannot read the installed launcher "${launcher}": ${(e as Error).message}`,
      Code.FailedPrecondition,
    );
  }
}

/**
 * Serves the upgrade service on the shim's own socket (`skiff.shim.v1.Upgrade`).
 *
 * @param d the server's parts
 */
export function registerUpgradeService(d: UpgradeDeps): void {
  d.server.registerWire(UPGRADE_SERVICE, [upgradeMethod(d)]);
}

function upgradeMethod(d: UpgradeDeps): WireMethod {
  let running = false;
  return {
    name: UPGRADE_METHOD,
    input: UPGRADE_REQUEST as unknown as WireMethod["input"],
    output: UPGRADE_REPORT as unknown as WireMethod["output"],
    impl: async (req: UpgradeRequest, ctx?: Pick<HandlerContext, "timeoutMs">) => {
      // The call that started an upgrade, replayed in the code it started: answer it.
      if (d.resumed && d.resumed.token === req.token) return resumedReport(d.resumed, d);
      if (running) {
        throw statusError("a live upgrade is already under way", Code.FailedPrecondition);
      }
      running = true;
      try {
        return await upgrade(d, req, checkTimeoutMs(ctx));
      } finally {
        running = false;
      }
    },
  };
}

function resumedReport(s: UpgradeState, d: UpgradeDeps): UpgradeReport {
  if (s.failed) {
    throw statusError(
      `live upgrade failed: the installed code ${s.failed.code.code} (skiff ${s.failed.code.version}) ` +
        `could not take the state (${s.failed.error}); the previous code ${currentCode().code} ` +
        `took it back and serves again`,
      Code.Internal,
    );
  }
  return {
    pid: Deno.pid,
    from: s.from,
    to: currentCode(),
    upgraded: true,
    heldMs: resumedAt - s.heldAt,
    containers: d.tasks.containers.size,
    connections: s.connections.length,
  };
}

let resumedAt = 0;

/**
 * Refuses when the server is ending: its socket is gone or going, and a re-executed server
 * would take it back and serve on after containerd was told it had shut down.
 */
function refuseEnding(d: UpgradeDeps): void {
  const why = d.ending?.();
  if (why === undefined) return;
  throw statusError(
    `${UPGRADE_ENDED}: the shim is shutting down (${why}); nothing is left to upgrade`,
    Code.Unavailable,
  );
}

/**
 * How long the installed code's check (`<launcher> -upgrade-check`, a start of the new code)
 * may take: half of the time the caller left the call (the other half is for the hold, the
 * re-exec and the new code's start), and never less than 30 s. A slow machine (an emulated
 * guest under load: a start takes 30 s and more there) gets what its caller's deadline allows.
 *
 * @param ctx the Upgrade call's context, if any (its `timeoutMs()`: what is left of its deadline)
 * @returns the check's bound in ms
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { checkTimeoutMs } from "./upgrade.ts";
 * strictEqual(checkTimeoutMs(undefined), 30_000); // no deadline: 30 s
 * strictEqual(checkTimeoutMs({ timeoutMs: () => 60_000 }), 30_000); // the upgrade command's
 * strictEqual(checkTimeoutMs({ timeoutMs: () => 180_000 }), 90_000);
 * ```
 */
export function checkTimeoutMs(ctx?: Pick<HandlerContext, "timeoutMs">): number {
  const left = ctx?.timeoutMs?.();
  return left === undefined ? CHECK_TIMEOUT_MS : Math.max(CHECK_TIMEOUT_MS, Math.floor(left / 2));
}

async function upgrade(
  d: UpgradeDeps,
  req: UpgradeRequest,
  checkMs: number,
): Promise<UpgradeReport> {
  refuseEnding(d);
  const refused = d.refusal?.();
  if (refused) throw statusError(refused, Code.FailedPrecondition);
  const launcher = Deno.env.get(LAUNCHER_ENV.launcher);
  if (!launcher) {
    throw statusError(
      "this shim was not started by an installed launcher, so there is no installed code to upgrade to",
      Code.FailedPrecondition,
    );
  }
  const from = currentCode();
  const to = installedCode(launcher);
  const unchanged: UpgradeReport = {
    pid: Deno.pid,
    from,
    to: from,
    upgraded: false,
    heldMs: 0,
    containers: d.tasks.containers.size,
    connections: d.server.connectionCount,
  };
  if (to === from.code && to !== "unknown" && !req.force) return unchanged;
  refuseUncarriable(() => (d.tasks.carry(), d.carrySandboxes(), d.shim.carryUpgrade?.()));
  await checkInstalledCode(launcher, checkMs);

  const heldAt = Date.now();
  d.logger.info("live upgrade: holding requests", { to });
  d.server.hold((_service, method) => CARRIED_METHODS.has(method));
  const settleMs = req.settleTimeoutMs ?? DEFAULT_SETTLE_MS;
  const deadline = heldAt + settleMs;
  let prepared = false;
  try {
    if (d.shim.prepareUpgrade) {
      prepared = true;
      await prepare(d.shim.prepareUpgrade.bind(d.shim), settleMs);
    }
    for (;;) {
      // A macrotask: every read that completed has been handled by its reader by now.
      await new Promise((r) => setTimeout(r, 2));
      // Shutdown may have run before the hold, or been answered while it settled.
      refuseEnding(d);
      const pending = whatIsPending(d);
      if (pending === undefined) {
        const err = reexecute(d, launcher, req.token, heldAt, from);
        throw statusError(`live upgrade failed, still serving the old code: ${err}`, Code.Internal);
      }
      if (Date.now() > deadline) {
        throw statusError(
          `refused: not settled within ${settleMs} ms (${pending}); still serving the old code`,
          Code.FailedPrecondition,
        );
      }
    }
  } finally {
    if (prepared) d.shim.upgradeCancelled?.();
    d.server.release();
  }
}

/** Runs the shim's `prepareUpgrade` within the settle timeout; refuses when it fails. */
async function prepare(run: () => Promise<void>, timeoutMs: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      run(),
      new Promise((_, reject) =>
        timer = setTimeout(() => reject(new Error(`not done within ${timeoutMs} ms`)), timeoutMs)
      ),
    ]);
  } catch (e) {
    throw statusError(
      `refused: the shim could not prepare for the upgrade: ${
        (e as Error).message
      }; still serving the old code`,
      Code.FailedPrecondition,
    );
  } finally {
    clearTimeout(timer);
  }
}

function refuseUncarriable(carry: () => unknown): void {
  try {
    carry();
  } catch (e) {
    throw statusError(`refused: ${(e as Error).message}`, Code.FailedPrecondition);
  }
}

/** Asks the installed code whether it loads and takes this state format. */
async function checkInstalledCode(launcher: string, timeoutMs: number): Promise<void> {
  const env = { ...Deno.env.toObject() };
  delete env[LAUNCHER_ENV.upgradeState];
  let out: Deno.CommandOutput;
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    out = await new Deno.Command(launcher, {
      args: [`-${UPGRADE_CHECK_FLAG}`, UPGRADE_STATE_FORMAT],
      env,
      clearEnv: true,
      stdin: "null",
      signal,
    }).output();
  } catch (e) {
    throw statusError(
      `refused: the installed code at "${launcher}" did not answer its check: ${
        (e as Error).message
      }`,
      Code.FailedPrecondition,
    );
  }
  if (!out.success && signal.aborted) {
    throw statusError(
      `refused: the installed code at "${launcher}" did not finish its check within ${timeoutMs} ms`,
      Code.FailedPrecondition,
    );
  }
  if (!out.success) {
    const said = new TextDecoder().decode(out.stderr).trim() ||
      new TextDecoder().decode(out.stdout).trim();
    throw statusError(
      `refused: the installed code at "${launcher}" failed its check (exit ${out.code}): ${said}`,
      Code.FailedPrecondition,
    );
  }
}

/** What still keeps the upgrade waiting, or `undefined` when it may go ahead. */
function whatIsPending(d: UpgradeDeps): string | undefined {
  if (!d.server.quiet) return "calls still running or answers unwritten";
  if (!d.tasks.settled) return "an exit or a stdio chunk is mid-way";
  if (d.publisher.stats.queued > 0) return `${d.publisher.stats.queued} events to publish`;
  return undefined;
}

/**
 * Writes the state and replaces the process image; returns only when that failed (with why),
 * having undone what it changed.
 */
function reexecute(
  d: UpgradeDeps,
  launcher: string,
  token: string,
  heldAt: number,
  from: CodeIdentity,
): string {
  retireListener(d.server);
  let containers: ContainerCarry[];
  let state: UpgradeState;
  const statePath = `${d.socket}${UPGRADE_STATE_SUFFIX}`;
  const kept: number[] = [];
  try {
    containers = d.tasks.carry();
    const fds = descriptorsByLink();
    const served = d.server.carry();
    const connections = served.map((c) => {
      const fd = fds.get(`socket:[${c.inode}]`);
      if (fd === undefined) throw new Error(`no descriptor for connection socket ${c.inode}`);
      return {
        fd,
        lastStreamId: c.carry.lastStreamId,
        replay: c.carry.replay.map((r) => ({ id: r.id, payload: toBase64(r.payload) })),
        partial: toBase64(c.carry.partial),
      };
    });
    const listeners = listeningSockets([d.socket, `${d.socket}.next`]);
    if (listeners.length !== 1) {
      throw new Error(`found ${listeners.length} listening sockets for ${d.socket}, expected 1`);
    }
    const known = new Set(served.map((c) => c.inode));
    for (const fd of unseenConnections(fds, known, listeners, d.socket)) {
      connections.push({ fd, lastStreamId: 0, replay: [], partial: "" });
    }
    const rollback = rollbackCommand(serverArgs(d));
    const runtime = d.shim.carryUpgrade?.();
    state = {
      format: UPGRADE_STATE_FORMAT,
      token,
      from,
      heldAt,
      socket: d.socket,
      bundle: d.bundle,
      listener: listeners[0],
      connections,
      containers,
      sandboxes: d.carrySandboxes(),
      inheritedOptions: d.inheritedOptions() ?? null,
      ...(runtime ? { runtime } : {}),
      ...(rollback ? { rollback } : {}),
    };
    Deno.writeTextFileSync(statePath, JSON.stringify(state), { mode: 0o600 });
    for (const fd of stateDescriptors(state)) {
      setCloseOnExec(fd, false);
      kept.push(fd);
    }
  } catch (e) {
    undo(kept, statePath);
    return (e as Error).message;
  }
  const env = { ...Deno.env.toObject(), [LAUNCHER_ENV.upgradeState]: statePath };
  // The server's cwd is "/"; the new code learns its bundle from the state.
  const err = execInPlace(launcher, [launcher, ...serverArgs(d)], env);
  undo(kept, statePath);
  return err.message;
}

/**
 * Connections on `socket` that this process accepted and its server has not seen yet: Deno
 * accepts as soon as a connection arrives, and hands it to the accept loop on a later turn, so
 * one can arrive in the very turn the process image is replaced (containerd's connect for a
 * Create, seen as "ttrpc: closed"). Nothing of them has been read: the next code serves them from
 * their first byte.
 *
 * @param fds this process's descriptors by link (`descriptorsByLink`)
 * @param known the socket inodes of the connections the server carries
 * @param listeners the listening sockets' descriptors
 * @param socket the path the server listens on
 * @returns their descriptors
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { acceptPending, descriptorsByLink, listeningSockets } from "../../linux/descriptors.ts";
 * import { close } from "../../linux/libc.ts";
 * import { unseenConnections } from "./upgrade.ts";
 * const dir = Deno.makeTempDirSync();
 * const listener = Deno.listen({ transport: "unix", path: `${dir}/s` });
 * const client = await Deno.connect({ transport: "unix", path: `${dir}/s` });
 * const listeners = listeningSockets([`${dir}/s`]);
 * const fd = acceptPending(listeners[0])!; // accepted, and no server has seen it
 * const unseen = unseenConnections(descriptorsByLink(), new Set(), listeners, `${dir}/s`);
 * strictEqual(unseen.length, 1);
 * strictEqual(unseen[0], fd);
 * close(fd);
 * client.close();
 * listener.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function unseenConnections(
  fds: ReadonlyMap<string, number>,
  known: ReadonlySet<number>,
  listeners: readonly number[],
  socket: string,
): number[] {
  const out: number[] = [];
  // By link: a listening socket may have more than one descriptor.
  const listening = new Set(listeners.map((fd) => linkOf(Deno.pid, fd)));
  for (const [link, fd] of fds) {
    const m = /^socket:\[(\d+)\]$/.exec(link);
    if (!m || known.has(Number(m[1])) || listening.has(link)) continue;
    // An accepted socket is named after its listener; a client's connection has no name.
    if (unixSocketName(fd) === socket) out.push(fd);
  }
  return out;
}

/** The server's arguments, as containerd's `start` gave them (the socket made explicit). */
function serverArgs(d: Pick<UpgradeDeps, "flags" | "socket">): string[] {
  const f = d.flags;
  return [
    "-namespace",
    f.namespace,
    "-id",
    f.id,
    "-address",
    f.address,
    "-publish-binary",
    f.publishBinary,
    "-socket",
    d.socket,
    ...(f.debug ? ["-debug"] : []),
  ];
}

function undo(kept: number[], statePath: string): void {
  for (const fd of kept) {
    try {
      setCloseOnExec(fd, true);
    } catch { /* closed meanwhile */ }
  }
  try {
    Deno.removeSync(statePath);
  } catch { /* not written */ }
}

/**
 * Every descriptor a state hands on (close-on-exec cleared across `execve`): the listener,
 * containerd's connections, the containers' stdio and runtime descriptors, the shim's own.
 *
 * @param s the state
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { stateDescriptors } from "./upgrade.ts";
 * deepStrictEqual(stateDescriptors({
 *   format: "skiff.upgrade/1", token: "t", from: { code: "a", version: "0.1.0" }, heldAt: 0,
 *   socket: "/s", bundle: "/b", listener: 3,
 *   connections: [{ fd: 4, lastStreamId: 0, replay: [], partial: "" }],
 *   containers: [], sandboxes: [], inheritedOptions: null,
 *   runtime: { descriptors: { console: 9 } },
 * }), [3, 4, 9]);
 * ```
 */
export function stateDescriptors(s: UpgradeState): number[] {
  return [
    s.listener,
    ...s.connections.map((c) => c.fd),
    ...carriedDescriptors(s.containers as ContainerCarry[]),
    ...Object.values(s.runtime?.descriptors ?? {}),
  ];
}

/**
 * In the code an upgrade started: the state, read and removed, or `undefined` for an ordinary
 * start. A state this code cannot read ends the process (the old code's check said it could).
 */
export function takeUpgradeState(): UpgradeState | undefined {
  const path = Deno.env.get(LAUNCHER_ENV.upgradeState);
  if (!path) return undefined;
  Deno.env.delete(LAUNCHER_ENV.upgradeState);
  const text = Deno.readTextFileSync(path);
  try {
    Deno.removeSync(path);
  } catch { /* already gone */ }
  return parseUpgradeState(text);
}

/**
 * In the code an upgrade started, when it cannot take the containers back (a bug, a carried
 * runtime option it rejects): starts the code that wrote the state again, in place, from the
 * same state, which then answers the `Upgrade` call with this failure. Nothing has been served
 * yet: no connection was read, the reaper is still held. Returns only when there is no way
 * back (no rollback command in the state, or this is already the way back) or `execve` failed.
 *
 * @param s the state this code read
 * @param error why this code cannot take it
 * @param logger the server's log
 */
export function rollBackUpgrade(s: UpgradeState, error: unknown, logger: Logger): void {
  const why = error instanceof Error ? error.message : String(error);
  if (!s.rollback || s.failed) {
    logger.error("live upgrade: this code cannot take the state, and there is no way back", {
      error: why,
      ...(s.failed ? { after: s.failed.error } : {}),
    });
    return;
  }
  logger.error("live upgrade: this code cannot take the state; starting the previous code again", {
    error: why,
    previous: s.from.code,
  });
  const statePath = `${s.socket}${UPGRADE_STATE_SUFFIX}`;
  try {
    // This code's adoption may have set close-on-exec on some of them again.
    for (const fd of stateDescriptors(s)) setCloseOnExec(fd, false);
    const back: UpgradeState = { ...s, failed: { code: currentCode(), error: why } };
    Deno.writeTextFileSync(statePath, JSON.stringify(back), { mode: 0o600 });
  } catch (e) {
    logger.error("live upgrade: cannot hand the state back", { error: (e as Error).message });
    return;
  }
  const env = { ...s.rollback.env, [LAUNCHER_ENV.upgradeState]: statePath };
  const err = execInPlace(s.rollback.path, s.rollback.argv, env);
  logger.error("live upgrade: cannot start the previous code again", { error: err.message });
}

/**
 * In the code an upgrade started, until it serves: an error nobody catches (a timer's throw, a
 * rejected promise nobody awaits) while it takes the state back rolls back as a thrown one does
 * ({@linkcode rollBackUpgrade}), instead of ending the process and losing the containers.
 *
 * @param s the state this code read
 * @param logger the server's log
 * @returns removes the handlers (call it before serving)
 */
export function rollBackOnUncaught(s: UpgradeState, logger: Logger): () => void {
  const onError = (e: Event) => {
    e.preventDefault();
    const error = e instanceof ErrorEvent ? e.error : (e as PromiseRejectionEvent).reason;
    rollBackUpgrade(s, error, logger);
    // No way back: end as the uncaught error would have.
    Deno.exit(1);
  };
  addEventListener("error", onError);
  addEventListener("unhandledrejection", onError);
  return () => {
    removeEventListener("error", onError);
    removeEventListener("unhandledrejection", onError);
  };
}

/**
 * How to start the code running now again in place, with the server's arguments: its own
 * command line (the runtime's flags and main module, not the launcher, which an install
 * replaces; the main module's content-hashed bundle stays) and environment. Undefined when the
 * main module is not on the command line.
 */
function rollbackCommand(serverArgs: readonly string[]): UpgradeState["rollback"] {
  let cmdline: string[];
  try {
    cmdline = Deno.readTextFileSync("/proc/self/cmdline").split("\0").slice(0, -1);
  } catch {
    return undefined;
  }
  const main = Deno.mainModule.startsWith("file://")
    ? decodeURIComponent(new URL(Deno.mainModule).pathname)
    : "";
  const at = cmdline.indexOf(main);
  if (at < 0) return undefined;
  return {
    path: Deno.execPath(),
    argv: [...cmdline.slice(0, at + 1), ...serverArgs],
    env: Deno.env.toObject(),
  };
}

/** The inherited listening socket, until its backlog is drained and it is closed. */
let retiring: number | undefined;

/** Serves what waits in a listening socket's backlog. */
function drainListener(fd: number, server: TtrpcServer): void {
  for (let conn; (conn = acceptPending(fd)) !== null;) {
    void server.serveInherited(fdConn(conn), conn);
  }
}

/** Drains and closes the inherited listening socket, once (also before the next upgrade). */
function retireListener(server: TtrpcServer): void {
  const fd = retiring;
  if (fd === undefined) return;
  retiring = undefined;
  try {
    drainListener(fd, server);
  } finally {
    close(fd);
  }
}

/**
 * In the code an upgrade started, once the containers are taken back (the task service's
 * `adopt`; {@linkcode rollBackUpgrade} when that fails): takes back the socket path (a new
 * listener renamed onto it, so no connect is refused), then every connection with its held
 * requests, then drains what waited in the old listener's backlog; reaping resumes once the
 * carried processes are known again.
 *
 * @param s the state
 * @param d the new server's parts
 * @param reaper the reaper, held until now
 */
export async function resumeUpgrade(
  s: UpgradeState,
  d: Pick<UpgradeDeps, "server" | "logger">,
  reaper: Reaper,
): Promise<void> {
  reaper.release();
  for (const fd of [s.listener, ...s.connections.map((c) => c.fd)]) setCloseOnExec(fd, true);
  await d.server.listen(s.socket, { replace: true });
  resumedAt = Date.now();
  for (const c of s.connections) {
    void d.server.serveInherited(fdConn(c.fd), c.fd, {
      lastStreamId: c.lastStreamId,
      replay: c.replay.map((r) => ({ id: r.id, payload: fromBase64(r.payload) })),
      partial: fromBase64(c.partial),
    });
  }
  retiring = s.listener;
  drainListener(s.listener, d.server);
  // A connect that found the old socket just before the rename may still be queueing.
  setTimeout(() => retireListener(d.server), 200);
  d.logger.info("live upgrade: resumed", {
    from: s.from.code,
    to: currentCode().code,
    containers: s.containers.length,
    connections: s.connections.length,
    heldMs: resumedAt - s.heldAt,
  });
}
