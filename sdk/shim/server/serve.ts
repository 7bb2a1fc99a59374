/**
 * The long-running shim server process: its reaper and Linux platform, the pods it serves
 * (`./pod.ts`: one, or with a shared server's join point several, `./sharing.ts`), the signals
 * that shut them down, and the exit once the last pod has shut down.
 *
 * @module
 */

import { Reaper } from "../../linux/reaper.ts";
import type { ShimFlags } from "../contract/flags.ts";
import type { Shim } from "../shim.ts";
import { linuxPlatform } from "./linux_platform.ts";
import { idleTrim } from "../../linux/memory_trim.ts";
import { shimSocketAddress, socketPath } from "../contract/socket_address.ts";
import { groupKey } from "../contract/server_socket.ts";
import type { ServerExtension } from "./extension.ts";
import { trapUncaughtErrors, trapUnhandledRejections } from "./server_logger.ts";
import { takeUpgradeState } from "./upgrade.ts";
import { type PodProcess, type ServedPod, servePod } from "./pod.ts";
import type { Sharing } from "./sharing.ts";

/** How a server came to run, for {@linkcode serveShim}. */
export interface ServeOptions {
  /** "cold" (spawned by `start`, the default) or "spare" (a warm spare adopted by `start`). */
  origin?: "cold" | "spare";
  /** What plugs into the server, in order (`runShim` passes the spare and ops). */
  extensions?: readonly ServerExtension[];
  /** Called once the socket accepts connections (a spare answers its `start` then). */
  onListening?: () => Promise<void> | void;
  /** A reaper already started (a spare starts its own while it waits). Default: a new one. */
  reaper?: Reaper;
  /** The container's socket, already bound at `-socket` (by an adopted spare). */
  listener?: Deno.UnixListener;
  /**
   * How an adopted spare's `start` reached it, for the log: "socket" (Deno's `start`) or "door"
   * (the launcher's shell, no Deno `start`: sdk/shim/spare/door.ts).
   */
  handoff?: "socket" | "door";
  /**
   * Shared servers (`SKIFF_SHARED_PODS`, `./sharing.ts`): the join point that brings this
   * process more pods. Ignored when the shim's `sharedServers` is false, and after a live
   * upgrade.
   */
  sharing?: Sharing;
}

/**
 * Runs the server until it shuts down. Never returns normally: the process exits once its last
 * pod has shut down.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(new RuncShim(), parseShimFlags(Deno.args), { extensions });
 * ```
 */
export async function serveShim<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  options: ServeOptions = {},
): Promise<void> {
  // A live upgrade's new code: the state the old code left (sdk/shim/server/upgrade.ts).
  const resumed = takeUpgradeState();
  const bundle = resumed?.bundle ?? Deno.cwd();
  // Leave the bundle: containerd removes it when that container is deleted, while a shim that
  // serves a group of containers lives on, and Deno cannot spawn runc from a deleted cwd.
  Deno.chdir("/");
  const socket = flags.socket ||
    socketPath(shimSocketAddress(flags.address, flags.namespace, groupKey(bundle, flags.id)));
  // After an upgrade, the exits of the window wait as zombies until their processes are known.
  const reaper = options.reaper ?? Reaper.start({ held: resumed !== undefined });
  const sharing = shim.sharedServers && !resumed ? options.sharing : undefined;
  const pods = new Set<ServedPod>();
  const loggers = () => [...pods].map((p) => p.logger);
  trapUnhandledRejections(loggers);
  if (sharing) trapUncaughtErrors(loggers);
  let exiting = false;
  const proc: PodProcess<T> = {
    shim,
    reaper,
    platform: linuxPlatform(reaper),
    extensions: options.extensions ?? [],
    pods: () => Math.max(1, pods.size),
    trimLater: idleTrim(),
    ...(sharing
      ? {
        sharedPods: sharing.limit,
        upgradeRefusal: () =>
          `this server is shared by up to ${sharing.limit} pods (SKIFF_SHARED_PODS; ${pods.size} now): ` +
          "a live upgrade re-executes a server of one pod; new pods get the installed code, and " +
          "this server's pods keep theirs until they end",
      }
      : {}),
    ended: (pod) => {
      pods.delete(pod);
      sharing?.changed();
      if (pods.size === 0) void exitWhenEmpty();
    },
  };
  // The process ends with its last pod; a shared server first closes its join point, and a pod
  // that joined meanwhile keeps it serving.
  const exitWhenEmpty = async () => {
    if (exiting) return;
    exiting = true;
    await sharing?.close();
    if (pods.size > 0) {
      exiting = false;
      sharing?.changed();
      return;
    }
    reaper.close();
    Deno.exit(0);
  };
  const shutdownAll = (why: string) => {
    sharing?.close();
    for (const pod of pods) void pod.shutdown(why);
  };
  Deno.addSignalListener("SIGTERM", () => shutdownAll("SIGTERM"));
  Deno.addSignalListener("SIGINT", () => shutdownAll("SIGINT"));
  // A shared server takes pods from the start: the starts of a burst that found no server
  // taking pods wait for this one to (sdk/shim/spare/handoff.ts), not for its first pod.
  let firstServing = false;
  if (sharing) {
    sharing.open({
      namespace: flags.namespace,
      spawn: (cmd) => reaper.spawn(cmd),
      pods: () => pods.size + (firstServing ? 0 : 1),
      join: async (pod) => {
        const served = await servePod(proc, {
          flags: pod.flags,
          bundle: pod.bundle,
          socket: pod.flags.socket,
          origin: "shared",
          listener: pod.listener,
          handoff: pod.handoff,
          serving: { shared: sharing.limit, pods: pods.size + 1 },
        });
        pods.add(served);
        pod.counted();
      },
    });
  }
  const first = await servePod(proc, {
    flags,
    bundle,
    socket,
    origin: options.origin ?? "cold",
    ...(options.listener ? { listener: options.listener } : {}),
    ...(options.handoff ? { handoff: options.handoff } : {}),
    ...(options.onListening ? { onListening: options.onListening } : {}),
    ...(resumed ? { resumed } : {}),
    ...(sharing ? { serving: { shared: sharing.limit } } : {}),
  });
  pods.add(first);
  firstServing = true;
  if (!sharing && options.sharing) void options.sharing.close(); // never opened: nothing held
  if (!sharing && !shim.sharedServers && options.sharing) {
    first.logger.warn(
      `SKIFF_SHARED_PODS=${options.sharing.limit} ignored: ${shim.runtimeName} serves one pod per ` +
        "process (its Shim's sharedServers is false)",
    );
  }
  // Until the process exits (./pod.ts: the last pod's shutdown).
  await new Promise(() => {});
}
