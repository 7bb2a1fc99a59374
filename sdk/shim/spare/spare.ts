/**
 * The warm spare server: a shim server process that has loaded everything before any container
 * needs it, and waits on a 0600 unix socket for the next `start` of the same installed code and
 * the same containerd to hand it one (`./handoff.ts` is that side). Once adopted it
 * takes what a server spawned by that `start` would have had (working directory, environment,
 * cgroups, `shim_cgroup`, OOM score, log FIFO, `-debug`) and runs {@linkcode serveShim}.
 *
 * It exits, removing its socket, when it has waited `SKIFF_SPARE_IDLE_SECONDS`, when its
 * containerd's socket or process is gone, or when the launcher that spawned it was reinstalled
 * (taking its containerd's spares' directory with it once nothing of that containerd runs).
 * Only one spare waits per key: the lock file is held from before loading until adoption.
 *
 * @module
 */

import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import type { ShimFlags } from "../contract/flags.ts";
import type { Shim } from "../shim.ts";
import type { ServerExtension } from "../server/extension.ts";
import { spareIdleSeconds } from "./config.ts";
import { takeSpareLock } from "./lock.ts";
import { loadingMarker, releaseLoading } from "./loading.ts";
import { tidySpareDir, watchLifetime } from "./lifetime.ts";
import {
  handoffServerFlags,
  SPARE_ADOPTION_MS,
  SPARE_DAEMON_ENV,
  SPARE_NICE_ENV,
  type SpareHandoff,
  type StartRunner,
  writeJsonLine,
} from "./handoff.ts";
import { joinOrCreate, takeCreateAhead } from "./join.ts";
import { MAX_VETTING, ourPeer, readHandoff } from "./vet.ts";
import { sharingFromEnv } from "./shared.ts";
import { effectiveIds, PeerCredentialResolver } from "../../ttrpc/_peer_cred.ts";
import { joinCgroup, joinCgroupsOf } from "../../linux/cgroup_join.ts";
import { setOomScoreAdj } from "../../linux/oom_score.ts";
import { niceOf, setAutogroupNice, setProcessNice } from "../../linux/nice.ts";
import { containerdVersion } from "../contract/containerd_version.ts";
import { trimMemory } from "../../linux/memory_trim.ts";
import {
  answerLauncher,
  type Door,
  doorPath,
  failLauncher,
  type LauncherStart,
  openDoor,
  readLauncherStart,
  refuseLauncher,
  runLauncherStart,
  takeKnock,
} from "./door.ts";

/** How long a leaving spare may take for its rehearsal's end and the tidy of its directory. */
const EXPIRE_TIDY_MS = 5_000;

/**
 * Sets this process's nice value and its autogroup's, best effort: priority is a hint (and
 * `adopt()` sets start's own, or refuses).
 */
function setPriority(nice: number, autogroup: number): void {
  if (niceOf("self") === nice) return;
  try {
    setProcessNice(nice);
  } catch { /* a hint */ }
  setAutogroupNice("self", autogroup);
}

/** Replaces the whole environment (children such as runc inherit it). */
function replaceEnv(env: Record<string, string>): void {
  for (const key of Object.keys(Deno.env.toObject())) {
    if (!(key in env)) Deno.env.delete(key);
  }
  for (const [key, value] of Object.entries(env)) Deno.env.set(key, value);
}

/**
 * Runs a spare until it is adopted (then it serves, and never returns) or it expires.
 * `flags.socket` is the handoff socket, `flags.address` containerd's.
 *
 * @example Usage
 * ```ts ignore
 * await runSpare(new RuncShim(), parseShimFlags(["-spare", "-address", a, "-socket", s]));
 * ```
 */
export async function runSpare<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  loadExtensions: () => Promise<readonly ServerExtension[]> = () => Promise.resolve([]),
  runStart?: StartRunner,
): Promise<void> {
  // long: the spare's life in order (lock, preload, listen, rehearse, watch, vet handoffs);
  // the accept loop shares ten of these locals, so splitting it out would only pass them on
  const launcher = Deno.env.get(LAUNCHER_ENV.launcher);
  // As the launcher made it, for the starts that come through the door.
  const exported = Deno.env.toObject();
  if (!launcher || !flags.socket.endsWith(".sock")) {
    throw new Error("-spare needs -socket <dir>/spare-<code>.sock and SKIFF_SHIM_LAUNCHER");
  }
  const taken = await takeSpareLock(flags.socket, launcher);
  // Past the loading marker either way: the lock now says whether a spare is on its way.
  const marker = loadingMarker(flags.socket);
  releaseLoading(marker, Deno.pid);
  if (!taken) Deno.exit(0); // another spare holds it, or the launcher was reinstalled
  const { file: lock, codeId } = taken;

  // <socket dir>/skiff-<containerd>/: the spare's socket, door, tokens and rehearsal are here.
  const dir = flags.socket.slice(0, flags.socket.lastIndexOf("/"));
  const { serveShim, extensions, reaper, rehearse, containerd } = await preload(
    flags.publishBinary,
    // <socket dir>/skiff-<containerd>/spare-<code>.sock: `start` keeps containerd's version there
    dir.slice(0, dir.lastIndexOf("/")),
    loadExtensions,
  );

  const { listener, leave: leaveSocket } = await listenForStarts(flags.socket);
  // The launcher's door (./door.ts): a start without a Deno process of its own.
  const door = runStart ? tryOpenDoor(doorPath(flags.socket)) : undefined;
  // The knocks left in the door are refused at once: their shells go on (./door.ts).
  const leave =
    () => (leaveSocket(), door?.close((pid) => takeKnock(dir, pid) && refuseLauncher(pid)));
  const peers = new PeerCredentialResolver(flags.socket);
  const me = effectiveIds();

  // While nobody needs it, serve one pretend container, so that the adopted server's first calls
  // run code V8 has compiled; a start that connects stops it at its next step. Then leave the
  // loading's and the rehearsal's garbage behind: a spare may wait for minutes.
  const rehearsal = new AbortController();
  const rehearsed = rehearse(shim, reaper, dir, rehearsal.signal)
    .then(() => {
      if (!rehearsal.signal.aborted) trimMemory(); // unless a start has adopted us meanwhile
    });

  // The containerd that ran the spawning `start` ("<pid>:<start time>"): gone means leave.
  const daemon = Deno.env.get(SPARE_DAEMON_ENV) ?? "";
  Deno.env.delete(SPARE_DAEMON_ENV);
  // Taken by a start: a launcher's (the door), or Deno's (the socket, which stops the watch as
  // it begins). A launcher's start in hand is answered first: its shell waits for our word.
  let adopting = false;
  let expired = false;
  // Set once it leaves: a start whose handoff was still being read then is not taken (the tidy
  // and the exit below would end it as a server).
  let leaving = false;
  // Leaving, the rehearsal's files first: with containerd gone and nothing else of it running,
  // its spares' directory and the launcher's note go too (./lifetime.ts).
  const expire = () => {
    if (leaving) return;
    leaving = true;
    leave();
    rehearsal.abort();
    // Bounded: a rehearsal or a look that does not end never keeps a spare from leaving.
    setTimeout(() => Deno.exit(0), EXPIRE_TIDY_MS);
    void rehearsed.catch(() => {}).then(() => tidySpareDir(dir, flags.address, daemon))
      .finally(() => Deno.exit(0));
  };
  const stopWatch = watchLifetime({
    launcher,
    launcherText: taken.launcherText,
    address: flags.address,
    daemon,
    idleMs: 1000 * spareIdleSeconds(),
    onExpired: () => adopting ? (expired = true) : expire(),
  });
  // The priority a server gets back from its lowered loading one, once a start connects.
  const baseNice = Number(Deno.env.get(SPARE_NICE_ENV) ?? NaN);
  Deno.env.delete(SPARE_NICE_ENV);

  // Each connection must hand over a valid handoff line first (a start writes it at once):
  // anything else is closed and the spare keeps waiting, so that a peer sending garbage (or
  // nothing) can neither take the spare nor make it exit. A few are vetted at once, each for a
  // bounded time; more are closed unanswered.
  let vetting = 0;
  const spareNice = niceOf("self");
  const prepared = (deadline: ReturnType<typeof setTimeout>): Prepared => ({
    containerd,
    deadline,
    reaper,
    extensions,
    marker,
    runStart,
  });
  // A start through the door, once the spare is reserved for it.
  const byDoor = async (pid: number, start: LauncherStart) => {
    // Shared servers: the burst's other shells wait for the server this start may bring up.
    let ahead = takeCreateAhead(dir, start.flags.namespace, { get: (k) => start.env[k] });
    if (Number.isInteger(baseNice)) setPriority(baseNice, 0);
    let became:
      | { listener: Deno.UnixListener; handoff: SpareHandoff; create?: Deno.FsFile }
      | undefined;
    let left = false;
    try {
      const answer = await runLauncherStart(runStart!, start, async (request, socketDir) => {
        // Shared servers: a pod the server another start brings up can take joins it,
        // and this spare waits on; else this spare brings that server up.
        const held = ahead;
        ahead = undefined;
        const shared = await joinOrCreate(flags.address, socketDir, request, {
          get: (k) => start.env[k],
        }, held);
        if ("joined" in shared) return shared.joined;
        left = true;
        stopWatch();
        rehearsal.abort();
        leave();
        const handoff = { codeId, ...request };
        became = {
          listener: await becomeServer(handoff, pid),
          handoff,
          ...(shared.create ? { create: shared.create } : {}),
        };
        return { pid: Deno.pid, ...await containerd.then((v) => v ? { containerd: v } : {}) };
      });
      answerLauncher(dir, pid, answer);
    } catch (e) {
      failLauncher(dir, pid, (e as Error).message);
      if (left) Deno.exit(1); // no longer a spare, and no server: the next spare takes over
    } finally {
      ahead?.close(); // no pod of its own to bring a server up for
      try {
        Deno.removeSync(`${dir}/taken-${pid}`);
      } catch { /* the shell's to tidy */ }
    }
    if (became) {
      const deadline = setTimeout(() => Deno.exit(1), SPARE_ADOPTION_MS);
      const b = became as {
        listener: Deno.UnixListener;
        handoff: SpareHandoff;
        create?: Deno.FsFile;
      };
      await serveAdopted(
        shim,
        b.handoff,
        b.listener,
        lock,
        serveShim,
        prepared(deadline),
        "door",
        b.create,
      );
    }
    // Answered (a start that joined a shared server, or failed), and still a spare.
    adopting = false;
    if (expired) expire();
    if (vetting === 0) setPriority(spareNice, 19);
  };
  if (door) {
    void (async () => {
      for await (const pid of door.knocks()) {
        if (!takeKnock(dir, pid)) continue; // the shell gave up, or never asked
        if (adopting || leaving) {
          // Taken meanwhile: told at once, not after this spare has become a server (a burst's
          // shells queued at the door lost ~0.2 s each so); its shell waits on `create` behind
          // this start (shared servers) or goes the Deno way.
          refuseLauncher(pid);
          continue;
        }
        const start = readLauncherStart(pid, launcher, flags.address, exported);
        if (!start) {
          refuseLauncher(pid);
          continue;
        }
        // Reserved for this start until it is answered (the socket's starts go cold meanwhile).
        adopting = true;
        void byDoor(pid, start);
      }
    })();
  }
  for await (const conn of listener) {
    const peer = ourPeer(peers, me.uid);
    if (!peer) {
      conn.close(); // only containerd's user may hand us a container
      continue;
    }
    const { pid, inode } = peer;
    if (adopting || vetting >= MAX_VETTING) {
      peers.release(inode);
      conn.close();
      continue;
    }
    vetting++;
    // The handoff is on start's path: off the lowest priority at once, before reading it (at
    // nice 19 on a busy node the read could wait for seconds); back down if it is not one.
    if (Number.isInteger(baseNice)) setPriority(baseNice, 0); // 0: a cold server's new session
    void readHandoff(conn, codeId).then((handoff) => {
      vetting--;
      if (handoff === undefined || adopting || leaving) {
        peers.release(inode);
        try {
          conn.close();
        } catch { /* closed */ }
        if (!adopting && vetting === 0) setPriority(spareNice, 19);
        return;
      }
      adopting = true;
      stopWatch();
      rehearsal.abort();
      // A start waits for us without a timer of its own: serve within the bound, or go (the
      // start then goes cold).
      const deadline = setTimeout(() => Deno.exit(1), SPARE_ADOPTION_MS);
      leave();
      return adopt(shim, conn, pid, handoff, codeId, lock, serveShim, prepared(deadline));
    });
  }
  // The listener was closed by leave(): adopt() serves and ends the process itself.
  await new Promise(() => {});
}

/**
 * The point of a spare: the server's modules (and its extensions') are loaded and evaluated
 * now, not at start; the reaper runs; containerd's version is being asked.
 */
async function preload(
  publishBinary: string,
  socketDir: string,
  loadExtensions: () => Promise<readonly ServerExtension[]>,
) {
  const [{ serveShim }, extensions] = await Promise.all([
    import("../server/serve.ts"),
    loadExtensions(),
  ]);
  const [{ preloadLibc }, { Reaper }] = await Promise.all([
    import("../../linux/libc.ts"),
    import("../../linux/reaper.ts"),
    import("../../linux/oom.ts"), // every container's Create loads it (linux_platform.ts)
  ]);
  // The server's reaper (the subreaper flag, SIGCHLD, the sweep), ready before any handoff.
  const reaper = Reaper.start();
  preloadLibc(); // bound now, not when the server first calls them
  void Deno.Command; // Deno loads its process module on first use: now, not at the first runc
  const { rehearse } = await import("./rehearsal.ts");
  // containerd's version decides the format of `start`'s answer (1.7+ pass GRPC_ADDRESS); asked
  // now, needed only when a start is answered.
  const containerd = Deno.env.get("GRPC_ADDRESS") !== undefined
    ? containerdVersion(publishBinary, socketDir)
    : Promise.resolve(undefined);
  return { serveShim, extensions, reaper, rehearse, containerd };
}

/** Listens on the spare socket (0600); `leave` closes it and removes the socket file. */
async function listenForStarts(socket: string) {
  // Listening comes first: in a burst of starts the next one comes as soon as this spare can be
  // ready, and a start waits for a spare still loading.
  // We hold the lock, so a socket file left here is a dead spare's.
  await Deno.remove(socket).catch(() => {});
  const listener = Deno.listen({ transport: "unix", path: socket });
  await Deno.chmod(socket, 0o600);
  const leave = () => {
    try {
      listener.close();
    } catch { /* closed */ }
    try {
      Deno.removeSync(socket);
    } catch { /* gone */ }
  };
  return { listener, leave };
}

/** What the adoption needs that the spare prepared. */
interface Prepared {
  containerd: Promise<[number, number] | undefined>;
  deadline: ReturnType<typeof setTimeout>;
  reaper: import("../../linux/reaper.ts").Reaper;
  extensions: readonly ServerExtension[];
  /** The loading marker, which names us if our spawner wrote it after we took the lock. */
  marker: string;
  /** `start` for a launcher's process (a shared server's door). */
  runStart: StartRunner | undefined;
}

/**
 * Becomes what the cold server of this start would be (working directory, environment,
 * cgroups, OOM score, priority) and binds the container's socket; throws saying why not.
 *
 * @param handoff the start's handoff
 * @param peer the start's process (its cgroups are the server's)
 */
async function becomeServer(handoff: SpareHandoff, peer: number): Promise<Deno.UnixListener> {
  Deno.chdir(handoff.bundle);
  replaceEnv(handoff.env);
  // As start's environment names containerd's process to a cold server (the spare extension
  // takes it out again).
  if (handoff.daemon) Deno.env.set(SPARE_DAEMON_ENV, handoff.daemon);
  await joinCgroupsOf(Deno.pid, peer);
  if (handoff.shimCgroup) await joinCgroup(Deno.pid, handoff.shimCgroup);
  if (handoff.oomScore !== undefined) setOomScoreAdj("self", handoff.oomScore);
  // Loaded at the lowest priority (spawnSpare); serve at the one a cold server would have.
  if (handoff.nice !== undefined && niceOf("self") !== handoff.nice) {
    setProcessNice(handoff.nice);
  }
  // The container's socket, bound before the answer: start then answers containerd at once,
  // and containerd's connection waits in the backlog until the server accepts it. What can
  // refuse a cold server (its cgroups, its OOM score) has been done above.
  const listener = Deno.listen({ transport: "unix", path: handoff.flags.socket });
  Deno.chmodSync(handoff.flags.socket, 0o600);
  // From here on the socket is ours: a spare that dies before serving (start gone mid-handoff,
  // the adoption bound passed, serving failed) must not leave it, since nothing else may ever
  // remove it (a restarted containerd removes the bundle and runs no `delete` for it).
  const bound = Deno.statSync(handoff.flags.socket).ino;
  globalThis.addEventListener("unload", () => removeIfOurs(handoff.flags.socket, bound));
  return listener;
}

/** The handoff through the spare's socket (a Deno `start`): hello, become, answer, serve. */
async function adopt<T extends object>(
  shim: Shim<T>,
  conn: Deno.Conn,
  peer: number,
  handoff: SpareHandoff,
  codeId: string,
  lock: Deno.FsFile,
  serveShim: typeof import("../server/serve.ts").serveShim,
  ready: Prepared,
): Promise<never> {
  let listener: Deno.UnixListener;
  try {
    await writeJsonLine(conn, { pid: Deno.pid, codeId });
    listener = await becomeServer(handoff, peer);
  } catch (e) {
    await writeJsonLine(conn, { ok: false, error: (e as Error).message }).catch(() => {});
    Deno.exit(1);
  }
  // Serving begins before start hears back: a shared server's join point opens at once (in
  // serveShim's first, synchronous steps), so that the starts waiting on the `create` lock this
  // start holds until it exits find it open, instead of bringing up a server of their own.
  const serving = serveAdopted(shim, handoff, listener, lock, serveShim, ready, "socket");
  try {
    await writeJsonLine(conn, { ok: true, pid: Deno.pid, containerd: await ready.containerd });
  } catch {
    Deno.exit(1); // start has gone: containerd never uses this pod (one joined meanwhile ends too)
  }
  try {
    conn.close();
  } catch { /* start has gone */ }
  return await serving;
}

/** Serves the container the spare became the server of; never returns. */
async function serveAdopted<T extends object>(
  shim: Shim<T>,
  handoff: SpareHandoff,
  listener: Deno.UnixListener,
  lock: Deno.FsFile,
  serveShim: typeof import("../server/serve.ts").serveShim,
  ready: Prepared,
  via: "socket" | "door",
  create?: Deno.FsFile,
): Promise<never> {
  // The next spare may load now (a marker naming us, written after we took the lock, goes too).
  releaseLoading(ready.marker, Deno.pid);
  lock.close();
  const flags = handoffServerFlags(handoff);
  try {
    // Shared servers: with room, this server takes the next pods too (./shared.ts).
    const sharing = sharingFromEnv(flags, ready.runStart, create);
    await serveShim(shim, flags, {
      origin: "spare",
      handoff: via,
      extensions: ready.extensions,
      reaper: ready.reaper,
      listener,
      onListening: () => clearTimeout(ready.deadline),
      ...(sharing ? { sharing } : {}),
    });
  } catch (e) {
    // start has answered: containerd's calls fail on the closed socket, as with a cold server
    // that dies after it bound its socket.
    console.error(`spare: serving failed after the handoff: ${(e as Error).message}`);
    Deno.exit(1);
  }
  Deno.exit(0);
}

/** The door, or none where a FIFO cannot be made (the launcher's shell then runs Deno's start). */
function tryOpenDoor(path: string): Door | undefined {
  try {
    return openDoor(path);
  } catch {
    return undefined;
  }
}

/** Removes `path` if it is still the socket this process bound (inode `ino`), at its exit. */
function removeIfOurs(path: string, ino: number | null): void {
  try {
    if (ino !== null && Deno.statSync(path).ino === ino) Deno.removeSync(path);
  } catch { /* gone already, or another server's */ }
}
