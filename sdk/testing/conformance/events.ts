/**
 * A recorder of containerd's task events for one namespace, through the typed client's
 * `events.subscribe` (what containerd's clients do), decoded to the fields scenarios compare.
 *
 * @module
 */

import { create, fromBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import type { ContainerdClient } from "../containerd_client.ts";
import {
  TaskCreateSchema,
  TaskDeleteSchema,
  TaskExecAddedSchema,
  TaskExecStartedSchema,
  TaskExitSchema,
  TaskOOMSchema,
  TaskPausedSchema,
  TaskResumedSchema,
  TaskStartSchema,
} from "../../../proto/gen/containerd/events/task_pb.ts";

/** One task event as the scenarios see it. */
export interface TaskEvent {
  /** e.g. `/tasks/exit`. */
  topic: string;
  /** The container the event is about. */
  containerId: string;
  /** Exec id for exec events and an exec's exit; the container id for the init's exit. */
  id: string;
  /** `/tasks/exit` and `/tasks/delete` only. */
  exitStatus?: number;
}

const MARKER_TOPIC = "/skiff/conformance/ready";

type Decoded = { containerId?: string; id?: string; execId?: string; exitStatus?: number };
// deno-lint-ignore no-explicit-any
const SCHEMAS: Record<string, any> = {
  "containerd.events.TaskCreate": TaskCreateSchema,
  "containerd.events.TaskStart": TaskStartSchema,
  "containerd.events.TaskDelete": TaskDeleteSchema,
  "containerd.events.TaskExit": TaskExitSchema,
  "containerd.events.TaskOOM": TaskOOMSchema,
  "containerd.events.TaskExecAdded": TaskExecAddedSchema,
  "containerd.events.TaskExecStarted": TaskExecStartedSchema,
  "containerd.events.TaskPaused": TaskPausedSchema,
  "containerd.events.TaskResumed": TaskResumedSchema,
};

/**
 * Records every `/tasks/*` event of a namespace from the moment {@linkcode EventRecorder.open}
 * resolves (it waits until its own marker event comes back, so nothing is missed after it).
 *
 * @example Usage
 * ```ts ignore
 * const ev = await EventRecorder.open(client, "conf-run");
 * // ... run a task ...
 * await ev.until((e) => e.topic === "/tasks/delete", "the delete event");
 * console.log(ev.events.map((e) => e.topic));
 * ev.close();
 * ```
 */
export class EventRecorder {
  /** Task events in arrival order. */
  readonly events: TaskEvent[] = [];
  readonly #abort = new AbortController();
  #wake: (() => void) | undefined;
  #failure: Error | undefined;
  readonly #ms: number;

  private constructor(ms: number) {
    this.#ms = ms;
  }

  /**
   * Subscribes to the namespace's events and waits until the stream is live.
   *
   * @param client a containerd client bound to `namespace`
   * @param namespace whose events to record
   * @param ms default bound of {@linkcode EventRecorder.until}
   * @returns the live recorder; call `close()` when done
   */
  static async open(
    client: ContainerdClient,
    namespace: string,
    ms = 60_000,
  ): Promise<EventRecorder> {
    const r = new EventRecorder(ms);
    let live!: () => void;
    const ready = new Promise<void>((res) => (live = res));
    const stream = client.events.subscribe(
      { filters: [`namespace==${namespace}`] },
      { signal: r.#abort.signal },
    );
    (async () => {
      try {
        for await (const env of stream) {
          if (env.topic === MARKER_TOPIC) live();
          if (!env.topic.startsWith("/tasks/") || !env.event) continue;
          const schema = SCHEMAS[env.event.typeUrl.replace(/^.*\//, "")];
          const d = (schema ? fromBinary(schema, env.event.value) : {}) as Decoded;
          r.events.push({
            topic: env.topic,
            containerId: d.containerId ?? "",
            id: d.execId || d.id || d.containerId || "",
            ...(d.exitStatus !== undefined ? { exitStatus: d.exitStatus } : {}),
          });
          r.#wake?.();
        }
      } catch (e) {
        if (!r.#abort.signal.aborted) r.#failure = e as Error;
        r.#wake?.();
      }
    })();
    // containerd has no "subscribed" reply: publish a marker until it comes back.
    for (let i = 0; i < 100; i++) {
      await client.events.publish({
        topic: MARKER_TOPIC,
        event: create(AnySchema, { typeUrl: "types.skiff.dev/conformance.Ready" }),
      });
      const got = await Promise.race([ready.then(() => true), sleep(100).then(() => false)]);
      if (got) return r;
    }
    r.close();
    throw new Error(`the event stream of namespace "${namespace}" never delivered its marker`);
  }

  /** Events about one container, in order. */
  of(containerId: string): TaskEvent[] {
    return this.events.filter((e) => e.containerId === containerId);
  }

  /**
   * Waits until an event matching `pred` has arrived (bounded: a hang fails, never wedges).
   *
   * @param pred what to wait for
   * @param what named in the error
   * @param ms bound. Default: the one given to `open`
   * @returns the matching event
   */
  async until(
    pred: (e: TaskEvent) => boolean,
    what: string,
    ms: number = this.#ms,
  ): Promise<TaskEvent> {
    const end = Date.now() + ms;
    for (;;) {
      const hit = this.events.find(pred);
      if (hit) return hit;
      if (this.#failure) throw new Error(`event stream failed: ${this.#failure.message}`);
      if (Date.now() > end) {
        throw new Error(`no ${what} (events: ${this.events.map((e) => e.topic).join(" ")})`);
      }
      await new Promise<void>((res) => {
        this.#wake = res;
        setTimeout(res, 200);
      });
    }
  }

  /** Ends the subscription. */
  close(): void {
    this.#abort.abort();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
