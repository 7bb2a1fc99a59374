/**
 * Records the `/tasks/exit` events containerd publishes, through its Events service (what
 * `ctr events` shows), across containerd restarts, so a soak can check that every exit it
 * learned through Wait also reached containerd as an event, with the same status.
 *
 * @example Usage
 * ```ts ignore
 * const log = new ExitEventLog();
 * log.subscribe(client);
 * // ... run things; after a containerd restart: log.subscribe(newClient)
 * await log.close();
 * console.log(log.find("c1", "x7")?.exitStatus);
 * ```
 *
 * @module
 */

import { fromBinary } from "@bufbuild/protobuf";
import type { ContainerdClient } from "../../sdk/testing/containerd_client.ts";
import { TaskExitSchema } from "../../proto/gen/containerd/events/task_pb.ts";

/** One `/tasks/exit` event as received. */
export interface ExitEvent {
  /** Container id. */
  containerId: string;
  /** Process id: the exec id, or the container id for its init. */
  id: string;
  /** pid of the process. */
  pid: number;
  /** Exit status. */
  exitStatus: number;
}

/** A span of time during which a subscription was open. */
export interface Span {
  /** Opened (ms since the epoch, once the stream answered or after a settle pause). */
  from: number;
  /** Closed, or undefined while open. */
  to?: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * `/tasks/exit` events of one namespace, over one or more subscriptions.
 *
 * @example Usage
 * ```ts ignore
 * const log = new ExitEventLog();
 * await log.subscribe(client);
 * ```
 */
export class ExitEventLog {
  /** Every exit event received, in arrival order. */
  readonly events: ExitEvent[] = [];
  /** When a subscription was open. */
  readonly spans: Span[] = [];
  #abort: AbortController | undefined;
  #loops: Promise<void>[] = [];

  /**
   * Opens a new subscription (ending the previous one, e.g. after a containerd restart).
   *
   * @param client a client connected to the (restarted) containerd
   */
  async subscribe(client: ContainerdClient): Promise<void> {
    this.#end();
    const abort = new AbortController();
    this.#abort = abort;
    const span: Span = { from: Number.MAX_SAFE_INTEGER };
    this.spans.push(span);
    this.#loops.push((async () => {
      try {
        for await (
          const env of client.events.subscribe({ filters: ['topic=="/tasks/exit"'] }, {
            signal: abort.signal,
          })
        ) {
          if (!env.event || env.topic !== "/tasks/exit") continue;
          const e = fromBinary(TaskExitSchema, env.event.value);
          this.events.push({
            containerId: e.containerId,
            id: e.id,
            pid: e.pid,
            exitStatus: e.exitStatus,
          });
        }
      } catch { /* containerd went away or we aborted: the span ends here */ }
      span.to ??= Date.now();
    })());
    // A server stream has no "subscribed" reply: give containerd a moment to register it.
    await sleep(300);
    span.from = Date.now();
  }

  /**
   * True when a subscription was open for all of `[from, to]`.
   *
   * @param from start (ms since the epoch)
   * @param to end (ms since the epoch)
   * @returns whether an exit in that interval had to be seen
   */
  covered(from: number, to: number): boolean {
    return this.spans.some((s) => s.from <= from && (s.to ?? Infinity) >= to);
  }

  /**
   * The last exit event of a process.
   *
   * @param containerId container id
   * @param id exec id, or the container id for the init process
   * @returns the event, or undefined
   */
  find(containerId: string, id: string): ExitEvent | undefined {
    return this.events.findLast((e) => e.containerId === containerId && e.id === id);
  }

  #end(): void {
    this.#abort?.abort();
    const open = this.spans.at(-1);
    if (open && open.to === undefined) open.to = Date.now();
  }

  /** Ends the subscription and waits for its reader. */
  async close(): Promise<void> {
    this.#end();
    await Promise.all(this.#loops);
  }
}
