/**
 * Publishes task events to containerd over ttrpc (`TTRPC_ADDRESS`,
 * `containerd.services.events.ttrpc.v1.Events/Forward`).
 *
 * One worker drains a bounded FIFO queue, so events reach containerd in the order they were
 * published. A failed Forward is retried with a growing back-off (and a fresh connection)
 * until `retryForMs` has passed, so a briefly restarting containerd loses nothing.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { asStatusError, Code } from "../../ttrpc/status_error.ts";
import {
  EVENTS_SERVICE,
  packShimAny,
  shimCodec,
  type ShimWireTypes,
  timestampOf,
} from "../../../proto/shim_wire.ts";
import type { WireInit } from "../../../proto/wire_table.ts";
import { TtrpcWireClient } from "../../ttrpc/wire_client.ts";
import type { Logger } from "../logger.ts";

/** The task events a shim publishes, by full type name (`containerd.events.TaskExit`, ...). */
export type TaskEventType = Extract<keyof ShimWireTypes, `containerd.events.${string}`>;

const FORWARD = EVENTS_SERVICE.methods.forward;
const FORWARD_REQUEST = shimCodec(FORWARD.input);
const FORWARD_RESPONSE = shimCodec(FORWARD.output);

/** Header that carries the namespace on containerd's ttrpc calls. */
export const NAMESPACE_HEADER = "containerd-namespace-ttrpc";

/** An event as the shim queued it. */
export interface QueuedEvent {
  /** Topic, e.g. `/tasks/exit`. */
  topic: string;
  /** The event, packed with its bare type name. */
  event: Any;
  /** When it was published. */
  timestamp: Date;
}

/** Counters an operator may want to see. */
export interface PublisherStats {
  /** Events containerd accepted. */
  published: number;
  /** Events given up on. */
  failed: number;
  /** Events waiting now. */
  queued: number;
}

/** Options for {@link EventPublisher}. */
export interface EventPublisherOptions {
  /** containerd's ttrpc address (`TTRPC_ADDRESS`), a plain path or `unix://` URL. */
  address: string;
  /** Namespace put in each envelope and in the call metadata. */
  namespace: string;
  /** Logger for retries and drops. */
  logger?: Logger;
  /** Queue bound; beyond it the oldest event is dropped (and logged). Default 4096. */
  maxQueue?: number;
  /** How long one event is retried before it is dropped. Default 60 s. */
  retryForMs?: number;
  /** Per-call deadline. Default 5 s, as the Go shims use. */
  callTimeoutMs?: number;
  /** Called for each event once queued (for debug endpoints). */
  onQueued?: (e: QueuedEvent) => void;
}

/**
 * Queues events and forwards them to containerd in order.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { createServiceImplSpec } from "@connectrpc/connect";
 * import { EventsService as Events } from "@skiff/shim/proto";
 * import { TtrpcServer } from "@skiff/shim/ttrpc";
 * import { EventPublisher } from "./events.ts";
 *
 * // containerd's TTRPC_ADDRESS, played by a server that keeps what it is sent.
 * const got: string[] = [];
 * const containerd = new TtrpcServer().register(
 *   createServiceImplSpec<typeof Events>(Events, {
 *     forward: (req) => (got.push(`${req.envelope?.namespace} ${req.envelope?.topic}`), {}),
 *   }),
 *   "containerd.services.events.ttrpc.v1.Events",
 * );
 * const dir = await Deno.makeTempDir();
 * await containerd.listen(`${dir}/containerd.sock.ttrpc`);
 *
 * const pub = new EventPublisher({ address: `${dir}/containerd.sock.ttrpc`, namespace: "default" });
 * pub.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: "c1" });
 * await pub.close(); // after the queue is delivered
 * deepStrictEqual(got, ["default /tasks/oom"]);
 * deepStrictEqual(pub.stats, { published: 1, failed: 0, queued: 0 });
 * await containerd.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export class EventPublisher {
  #opts:
    & Required<Pick<EventPublisherOptions, "maxQueue" | "retryForMs" | "callTimeoutMs">>
    & EventPublisherOptions;
  #queue: QueuedEvent[] = [];
  #wake: (() => void) | undefined;
  #idle: PromiseWithResolvers<void> | undefined;
  #closed = false;
  #abort = new AbortController();
  #client: TtrpcWireClient | undefined;
  #worker: Promise<void>;
  #stats: PublisherStats = { published: 0, failed: 0, queued: 0 };

  /** Creates a publisher and starts its worker. */
  constructor(opts: EventPublisherOptions) {
    this.#opts = { maxQueue: 4096, retryForMs: 60_000, callTimeoutMs: 5_000, ...opts };
    this.#worker = this.#run();
  }

  /** Counters. */
  get stats(): PublisherStats {
    return { ...this.#stats, queued: this.#queue.length };
  }

  /** Queues an event; never blocks and never throws for transport problems. */
  publish<K extends TaskEventType>(
    topic: string,
    type: K,
    message: WireInit<ShimWireTypes[K]>,
  ): void {
    if (this.#closed) return;
    const e: QueuedEvent = { topic, event: packShimAny(type, message), timestamp: new Date() };
    if (this.#queue.length >= this.#opts.maxQueue) {
      const dropped = this.#queue.shift()!;
      this.#stats.failed++;
      this.#opts.logger?.error("event queue full, dropped oldest event", { topic: dropped.topic });
    }
    this.#queue.push(e);
    this.#opts.onQueued?.(e);
    this.#wake?.();
  }

  /** Resolves once the queue is empty (or after `timeoutMs`). */
  async flush(timeoutMs = 10_000): Promise<void> {
    if (this.#queue.length === 0) return;
    this.#idle ??= Promise.withResolvers();
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#idle.promise,
      new Promise<void>((r) => timer = setTimeout(r, timeoutMs)),
    ]);
    clearTimeout(timer);
  }

  /** Flushes (bounded), stops the worker and closes the connection. */
  async close(timeoutMs = 5_000): Promise<void> {
    await this.flush(timeoutMs);
    this.#closed = true;
    this.#abort.abort();
    this.#wake?.();
    await this.#worker;
    await this.#client?.close();
  }

  async #run(): Promise<void> {
    while (!this.#closed) {
      const next = this.#queue[0];
      if (!next) {
        this.#idle?.resolve();
        this.#idle = undefined;
        await new Promise<void>((r) => this.#wake = r);
        this.#wake = undefined;
        continue;
      }
      await this.#deliver(next);
      if (this.#queue[0] === next) this.#queue.shift();
    }
  }

  async #deliver(e: QueuedEvent): Promise<void> {
    const started = Date.now();
    for (let attempt = 1;; attempt++) {
      try {
        const client = this.#client ??= new TtrpcWireClient({ path: this.#opts.address });
        await client.call(
          EVENTS_SERVICE.typeName,
          FORWARD.name,
          FORWARD_REQUEST,
          FORWARD_RESPONSE,
          {
            envelope: {
              timestamp: timestampOf(e.timestamp),
              namespace: this.#opts.namespace,
              topic: e.topic,
              event: e.event,
            },
          },
          {
            timeoutMs: this.#opts.callTimeoutMs,
            headers: { [NAMESPACE_HEADER]: this.#opts.namespace },
            signal: this.#abort.signal,
          },
        );
        this.#stats.published++;
        return;
      } catch (err) {
        const ce = asStatusError(err);
        // containerd rejects malformed envelopes with InvalidArgument: retrying cannot help.
        const hopeless = ce.code === Code.InvalidArgument || this.#closed;
        if (hopeless || Date.now() - started > this.#opts.retryForMs) {
          this.#stats.failed++;
          this.#opts.logger?.error("dropped event", { topic: e.topic, error: ce.message, attempt });
          return;
        }
        this.#opts.logger?.warn("forwarding event failed, will retry", {
          topic: e.topic,
          error: ce.message,
          attempt,
        });
        const c = this.#client;
        this.#client = undefined;
        await c?.close();
        await sleep(Math.min(250 * attempt, 2_000), this.#abort.signal);
      }
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });
}
