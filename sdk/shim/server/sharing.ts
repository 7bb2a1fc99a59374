/**
 * Shared servers (`SKIFF_SHARED_PODS`): the seam between a server process that serves several
 * pods (`./serve.ts`) and what brings it more pods (the join point of `sdk/shim/spare/shared.ts`,
 * which takes `start`s as a spare does). Types only: the server does not load the join point.
 *
 * Each pod keeps everything a one-pod server has (its socket, `address` file, ttrpc server, Task
 * and Sandbox services, event publisher, log FIFO, shutdown); the process shares its reaper,
 * its loaded code and its heap. The process exits once its last pod has shut down.
 *
 * @module
 */

import type { ShimFlags } from "../contract/flags.ts";

/** One more pod for a shared server: what a spare adopting its `start` would serve. */
export interface JoiningPod {
  /** The pod's server flags (containerd's, with `socket` the pod's own). */
  flags: ShimFlags;
  /** The bundle `start` ran in. */
  bundle: string;
  /** The pod's socket, bound (0600) before `start` answers. */
  listener: Deno.UnixListener;
  /** How its `start` came: Deno's `start` on the join socket, or the launcher's door. */
  handoff: "socket" | "door";
  /**
   * Called as the pod is counted among the process's pods: the room the join point reserved for
   * it ends at the same moment, so that the pod is never counted twice.
   */
  counted(): void;
}

/** What a shared server offers its join point. */
export interface SharingHost {
  /** The namespace of the process's first pod: a pod of another one is not taken. */
  readonly namespace: string;
  /** Serves one more pod in this process; resolves once it serves, throws saying why not. */
  join(pod: JoiningPod): Promise<void>;
  /** Pods served now. */
  pods(): number;
  /** Spawns a child through the process's reaper (the next warm spare). */
  spawn(cmd: Deno.Command): Deno.ChildProcess;
}

/** The join point of a shared server (`sdk/shim/spare/shared.ts`). */
export interface Sharing {
  /** Most pods one process serves. */
  readonly limit: number;
  /** Starts taking pods for `host` while it has room. */
  open(host: SharingHost): void;
  /** The pod count changed: the join point closes when full and opens again with room. */
  changed(): void;
  /** Stops taking pods; resolves once the joins already taken have settled. */
  close(): Promise<void>;
}
