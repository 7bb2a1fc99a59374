/**
 * A shared server's join point (`SKIFF_SHARED_PODS`; the server side is
 * `sdk/shim/server/sharing.ts`): while the process serves fewer pods than the limit, it takes
 * new pods' `start`s the way a warm spare does, on a socket (Deno's `start`, `./join.ts`) and
 * on a door (the launcher's shell, `./door.ts`), and serves each pod beside the others.
 *
 * One server per launcher code, containerd and namespace takes new pods at a time: the one
 * holding its `shared-<…>.lock` in the spares' directory (`sharedJoinPaths`). It closes its socket
 * and door and lets the lock go when it is full, or when it ends; a server with room takes the
 * lock again when it is free (looking every {@linkcode RETRY_MS}), so pods fill the servers that
 * exist before a new one starts. A `start` that finds no server taking pods brings the next one
 * up (the spare, or cold) while the burst's other starts wait for it (`joinOrCreate` in
 * `./join.ts`); that server takes pods from before its first pod serves.
 *
 * @module
 */

import type { ShimFlags } from "../contract/flags.ts";
import type { Sharing, SharingHost } from "../server/sharing.ts";
import { containerdVersion } from "../contract/containerd_version.ts";
import { effectiveIds, PeerCredentialResolver } from "../../ttrpc/_peer_cred.ts";
import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import { loadSpareConfig, sharedJoinPaths, sharedPodsLimit, spareDir } from "./config.ts";
import { spawnSpare } from "./spawn.ts";
import { nameHolder } from "./lock.ts";
import {
  handoffServerFlags,
  SPARE_DAEMON_ENV,
  type SpareHandoff,
  type StartRunner,
  writeJsonLine,
} from "./handoff.ts";
import { handOffToSpare, sharedCodeId } from "./join.ts";
import { ourPeer, readHandoff } from "./vet.ts";
import {
  answerLauncher,
  type Door,
  failLauncher,
  openDoor,
  readLauncherStart,
  refuseLauncher,
  runLauncherStart,
  takeKnock,
} from "./door.ts";

/**
 * Connections read at once. More than a spare's: a burst's starts all come here, and one closed
 * unread would take itself for refused and bring another server up.
 */
const MAX_JOINING = 64;

/**
 * How often a server with room looks whether it may take new pods again (while another one
 * does, or did until it filled up): a few syscalls each time, on servers with room only.
 */
export const RETRY_MS = 500;

/**
 * How often a server looks in its first {@linkcode YOUNG_MS}: it was brought up for a burst's
 * starts, which wait for it to take pods (the server holding the lock fills up within moments),
 * so it takes the lock as soon as the full one lets go, not up to {@linkcode RETRY_MS} later
 * while the waiting starts find no server taking pods and bring another one up.
 */
const YOUNG_RETRY_MS = 20;
const YOUNG_MS = 10_000;

/**
 * Most a server brought up under the `create` lock holds it while another server keeps the join
 * lock (with room): the starts waiting on it then knock on that one's door.
 */
const CREATE_HOLD_MS = 2_000;

/** What {@linkcode sharedJoinPoint} needs. */
export interface SharedJoinOptions {
  /** Most pods one process serves (`SKIFF_SHARED_PODS`). */
  limit: number;
  /** containerd's address (`-address`). */
  address: string;
  /** containerd's binary (`-publish-binary`), asked for its version. */
  publishBinary: string;
  /** The directory of the pods' sockets (the first pod's). */
  socketDir: string;
  /** The launcher's code identity. */
  codeId: string;
  /** The containerd namespace of the server's pods (its first pod's). */
  namespace: string;
  /** The launcher's path (a door's knock must come from a shell running it). */
  launcher: string;
  /** `start` for a launcher's process; without it there is no door (socket only). */
  runStart?: StartRunner;
  /**
   * The `create` lock the server was brought up under (`joinOrCreate` in ./join.ts), let go
   * once the join point has opened: the starts waiting on it join this server then.
   */
  createLock?: Deno.FsFile;
}

/**
 * The join point of a shared server.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(shim, flags, { sharing: sharedJoinPoint({ limit: 8, address, namespace, publishBinary, socketDir, codeId, launcher }) });
 * ```
 */
export function sharedJoinPoint(opts: SharedJoinOptions): Sharing {
  return new JoinPoint(opts);
}

/** Room held for one pod while it joins. */
interface Reservation {
  /** The pod is counted among the process's pods. */
  counted(): void;
  /** The join is over, whichever way. */
  release(): void;
}

/** The socket, door and lock while this server takes pods. */
interface Open {
  lock: Deno.FsFile;
  listener: Deno.UnixListener;
  door: Door | undefined;
}

class JoinPoint implements Sharing {
  readonly limit: number;
  #o: SharedJoinOptions;
  #dir: string;
  #paths: ReturnType<typeof sharedJoinPaths>;
  #host: SharingHost | undefined;
  #open: Open | undefined;
  #joining = 0;
  #inFlight = new Set<Promise<void>>();

  #closing = false;
  #openedAt = 0;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #containerd: Promise<[number, number] | undefined> | undefined;
  /** Lets `create` go if the join point has not opened by then ({@linkcode CREATE_HOLD_MS}). */
  #createHold: ReturnType<typeof setTimeout> | undefined;
  /** Whether the next spare was spawned for this filling. */
  #spared = false;
  /** containerd's process (`<pid>:<start time>`), for the next spare (./handoff.ts). */
  #daemon = Deno.env.get(SPARE_DAEMON_ENV) ?? "";

  constructor(opts: SharedJoinOptions) {
    this.#o = opts;
    this.limit = opts.limit;
    this.#dir = spareDir(opts.address, opts.socketDir);
    this.#paths = sharedJoinPaths(this.#dir, opts.codeId, opts.namespace);
  }

  open(host: SharingHost): void {
    this.#host = host;
    this.#openedAt = Date.now();
    this.changed();
    // The starts waiting on `create` knock on our door once we take pods, so it is let go then
    // (#tryOpen), or when another server keeps taking pods for longer (they go to that one).
    if (!this.#open) {
      this.#createHold = setTimeout(() => this.#letCreateGo(), CREATE_HOLD_MS);
      Deno.unrefTimer(this.#createHold);
    }
  }

  #letCreateGo(): void {
    clearTimeout(this.#createHold);
    try {
      this.#o.createLock?.close();
    } catch { /* closed already */ }
  }

  changed(): void {
    if (!this.#host || this.#closing) return;
    this.#spareAhead();
    if (this.#room() && !this.#open) this.#tryOpen();
    else if (!this.#room() && this.#open) this.#shut();
  }

  async close(): Promise<void> {
    this.#letCreateGo();
    this.#closing = true;
    this.#shut();
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
    this.#closing = false;
    // The server ends with its last pod: the next pod finds a spare, as in one-pod mode.
    if (this.#host?.pods() === 0) await this.#spawnSpare();
  }

  /**
   * The next warm spare, spawned as this server fills up (room for a quarter of its pods or one
   * left), not as each pod starts: the pods until then join this server, and the spare's memory
   * is paid only once the next server will be needed. Once per filling: again after the server
   * had more room.
   */
  #spareAhead(): void {
    const host = this.#host!;
    const ahead = Math.max(1, Math.floor(this.limit / 4));
    const filling = host.pods() + this.#joining >= this.limit - ahead;
    if (!filling) {
      this.#spared = false;
      return;
    }
    if (this.#spared) return;
    this.#spared = true;
    void this.#spawnSpare();
  }

  /** The next warm spare, unless one waits or loads already (spawnSpare looks). */
  async #spawnSpare(): Promise<void> {
    try {
      const spare = await loadSpareConfig(this.#o.address, this.#o.socketDir);
      const spawn = this.#host!.spawn;
      if (spare) spawnSpare(spare, this.#o.address, this.#o.publishBinary, this.#daemon, spawn);
    } catch { /* no spare: the next server starts cold */ }
  }

  #room(): boolean {
    return this.#host !== undefined && this.#host.pods() + this.#joining < this.limit;
  }

  /** Takes the lock and opens the socket and the door; with the lock taken, looks again later. */
  #tryOpen(): void {
    clearTimeout(this.#retry);
    this.#retry = undefined;
    let lock: Deno.FsFile;
    try {
      Deno.mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
      lock = Deno.openSync(this.#paths.lock, {
        read: true,
        write: true,
        create: true,
        mode: 0o600,
      });
    } catch {
      this.#letCreateGo();
      return; // no directory for it: this server serves the pods it has
    }
    if (!lock.tryLockSync(true)) {
      lock.close();
      const young = Date.now() - this.#openedAt < YOUNG_MS;
      this.#retry = setTimeout(() => this.changed(), young ? YOUNG_RETRY_MS : RETRY_MS);
      Deno.unrefTimer(this.#retry);
      return;
    }
    try {
      nameHolder(lock); // a live holder, seen by the launcher's shell without an exec
    } catch { /* the shell asks flock instead */ }
    // The lock is ours: a socket or door left here is a previous holder's.
    let listener: Deno.UnixListener;
    try {
      Deno.removeSync(this.#paths.socket);
    } catch { /* none */ }
    try {
      listener = Deno.listen({ transport: "unix", path: this.#paths.socket });
      Deno.chmodSync(this.#paths.socket, 0o600);
    } catch {
      lock.close();
      this.#letCreateGo();
      return;
    }
    let door: Door | undefined;
    if (this.#o.runStart) {
      try {
        door = openDoor(this.#paths.door);
      } catch { /* no FIFO: the launcher's shell runs Deno's start, which uses the socket */ }
    }
    const open = { lock, listener, door };
    this.#open = open;
    void this.#accept(open);
    if (door) void this.#knocks(open, door);
    this.#letCreateGo();
  }

  /** Stops taking pods: the socket and door go first, then the lock. */
  #shut(): void {
    clearTimeout(this.#retry);
    this.#retry = undefined;
    const open = this.#open;
    if (!open) return;
    this.#open = undefined;
    try {
      open.listener.close();
    } catch { /* closed */ }
    try {
      Deno.removeSync(this.#paths.socket);
    } catch { /* gone */ }
    // Knocks still in the door are sent on at once (to the spare's door, or Deno's start)
    // rather than left to find the door gone at their shell's next look.
    open.door?.close((pid) => takeKnock(this.#dir, pid) && refuseLauncher(pid));
    open.lock.close(); // releases the lock
  }

  /**
   * Reserves room for one pod while its join runs; undefined when there is none. `counted` ends
   * the reservation as the host counts the pod (so that it is never counted twice), `release`
   * ends the join (and the reservation, if the pod was not counted).
   */
  #reserve(): Reservation | undefined {
    if (!this.#room() || this.#closing) return undefined;
    this.#joining++;
    const done = Promise.withResolvers<void>();
    this.#inFlight.add(done.promise);
    this.changed(); // full now: the join point closes
    let reserved = true;
    const counted = () => {
      if (!reserved) return;
      reserved = false;
      this.#joining--;
    };
    return {
      counted,
      release: () => {
        counted();
        this.#inFlight.delete(done.promise);
        done.resolve();
        this.changed();
      },
    };
  }

  async #accept(open: Open): Promise<void> {
    const peers = new PeerCredentialResolver(this.#paths.socket);
    const me = effectiveIds();
    let vetting = 0;
    try {
      for await (const conn of open.listener) {
        const peer = ourPeer(peers, me.uid);
        if (!peer || vetting >= MAX_JOINING) {
          if (peer) peers.release(peer.inode);
          conn.close(); // only containerd's user may hand us a pod
          continue;
        }
        vetting++;
        // Forgotten once closed: the next accept is told apart from the sockets still open.
        void this.#joinBySocket(conn).finally(() => (vetting--, peers.release(peer.inode)));
      }
    } catch { /* closed */ }
  }

  /** Deno's `start` on the join socket: its handoff, our hello, the pod served, our answer. */
  async #joinBySocket(conn: Deno.Conn): Promise<void> {
    try {
      const handoff = await readHandoff(conn, this.#o.codeId);
      if (!handoff) return;
      const room = this.#fits(handoff) ? this.#reserve() : undefined;
      try {
        await writeJsonLine(conn, { pid: Deno.pid, codeId: this.#o.codeId });
        if (!room) {
          await writeJsonLine(conn, { ok: false, error: "this shared server takes no more pods" });
          return;
        }
        await this.#take(handoff, "socket", room.counted);
        await writeJsonLine(conn, { ok: true, pid: Deno.pid, containerd: await this.#version() });
      } catch (e) {
        await writeJsonLine(conn, { ok: false, error: (e as Error).message }).catch(() => {});
      } finally {
        room?.release();
      }
    } catch {
      /* start has gone */
    } finally {
      try {
        conn.close();
      } catch { /* closed */ }
    }
  }

  /**
   * Whether the pod may join: the namespace of the process's pods (their events' and runtimes'
   * environment), and no `shim_cgroup` of its own (a shared process is in one cgroup).
   */
  #fits(handoff: Pick<SpareHandoff, "flags" | "shimCgroup">): boolean {
    return handoff.flags.namespace === this.#host?.namespace && !handoff.shimCgroup;
  }

  /** The launcher's door: a `start` without a Deno process, answered here. */
  async #knocks(open: Open, door: Door): Promise<void> {
    const exported = Deno.env.toObject();
    for await (const pid of door.knocks()) {
      if (!takeKnock(this.#dir, pid)) continue; // the shell gave up, or never asked
      const start = this.#open === open
        ? readLauncherStart(pid, this.#o.launcher, this.#o.address, exported)
        : undefined;
      const room = start && start.flags.namespace === this.#host?.namespace
        ? this.#reserve()
        : undefined;
      if (!start || !room) {
        this.#untake(pid);
        refuseLauncher(pid); // its shell tries the spare's door, or Deno's start
        continue;
      }
      void this.#joinByDoor(pid, start, room);
    }
  }

  async #joinByDoor(
    pid: number,
    start: NonNullable<ReturnType<typeof readLauncherStart>>,
    room: Reservation,
  ): Promise<void> {
    try {
      const answer = await runLauncherStart(
        this.#o.runStart!,
        start,
        async (request, socketDir) => {
          // A pod that cannot share this process is handed on as Deno's `start` would.
          if (!this.#fits(request)) {
            return await handOffToSpare(this.#o.address, socketDir, request);
          }
          await this.#take({ codeId: this.#o.codeId, ...request }, "door", room.counted);
          const containerd = await this.#version();
          return { pid: Deno.pid, ...(containerd ? { containerd } : {}) };
        },
      );
      answerLauncher(this.#dir, pid, answer);
    } catch (e) {
      failLauncher(this.#dir, pid, (e as Error).message);
    } finally {
      this.#untake(pid);
      room.release();
    }
  }

  #untake(pid: number): void {
    try {
      Deno.removeSync(`${this.#dir}/taken-${pid}`);
    } catch { /* the shell's to tidy */ }
  }

  /** Binds the pod's socket and serves the pod; a pod that cannot be served leaves no socket. */
  async #take(
    handoff: SpareHandoff,
    via: "socket" | "door",
    counted: () => void,
  ): Promise<void> {
    // The containerd of this pod's start: the next spare names it (one from before containerd
    // restarted spawns none).
    if (handoff.daemon) this.#daemon = handoff.daemon;
    const path = handoff.flags.socket;
    const listener = Deno.listen({ transport: "unix", path });
    try {
      Deno.chmodSync(path, 0o600);
      await this.#host!.join({
        flags: handoffServerFlags(handoff),
        bundle: handoff.bundle,
        listener,
        handoff: via,
        counted,
      });
    } catch (e) {
      try {
        listener.close();
      } catch { /* closed */ }
      try {
        Deno.removeSync(path);
      } catch { /* gone */ }
      throw e;
    }
  }

  /** containerd's version, asked once (1.7+ pass GRPC_ADDRESS), for the answer's format. */
  #version(): Promise<[number, number] | undefined> {
    return this.#containerd ??= Deno.env.get("GRPC_ADDRESS") !== undefined
      ? containerdVersion(this.#o.publishBinary, this.#o.socketDir).catch(() => undefined)
      : Promise.resolve(undefined);
  }
}

/**
 * The join point for a server whose pod socket is `socket`, when this process's environment
 * turns shared servers on (`SKIFF_SHARED_PODS`, its launcher's); undefined otherwise (a malformed
 * value too: `start` has refused it already, naming it).
 *
 * @param flags the server's flags (`socket`: its first pod's)
 * @param runStart `start` for a launcher's process (the door), when the caller has it
 * @param createLock the `create` lock to let go once the join point has opened
 * @example Usage
 * ```ts ignore
 * await serveShim(shim, flags, { sharing: sharingFromEnv(flags, runStart) });
 * ```
 */
export function sharingFromEnv(
  flags: Pick<ShimFlags, "address" | "publishBinary" | "socket" | "namespace">,
  runStart?: StartRunner,
  createLock?: Deno.FsFile,
): Sharing | undefined {
  let limit: number | undefined;
  try {
    limit = sharedPodsLimit();
  } catch {
    return undefined;
  }
  const launcher = Deno.env.get(LAUNCHER_ENV.launcher);
  const codeId = sharedCodeId();
  if (limit === undefined || !launcher || !codeId || !flags.socket.includes("/")) return undefined;
  return sharedJoinPoint({
    limit,
    address: flags.address,
    namespace: flags.namespace,
    publishBinary: flags.publishBinary,
    socketDir: flags.socket.slice(0, flags.socket.lastIndexOf("/")) || "/",
    codeId,
    launcher,
    ...(runStart ? { runStart } : {}),
    ...(createLock ? { createLock } : {}),
  });
}
