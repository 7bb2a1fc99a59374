/**
 * `ShimOps`: everything the operations endpoint needs inside one shim server — the metrics,
 * the ttrpc interceptor, a short history of published events, and the Hono endpoint served on
 * `<ttrpc socket>.ops`. The ops extension (`./extension.ts`) imports this module only when it is enabled,
 * before the ttrpc server exists (the interceptor must be in place for the first call); the
 * Hono half is imported by {@linkcode ShimOps.attach}, once the ttrpc socket serves.
 *
 * @module
 */

import { type DescMessage, fromBinary, toJson } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import * as taskEvents from "../../proto/gen/containerd/events/task_pb.ts";
import type { PublisherStats, QueuedEvent } from "../shim/server/events.ts";
import type { Logger } from "../shim/logger.ts";
import type { OpsContainerView, OpsProcessView, ShimOpsContext } from "./hooks.ts";
import { opsSocketPath } from "../shim/contract/socket_address.ts";
import { rpcInterceptor } from "./rpc.ts";
import { liveProcesses, ShimMetrics } from "./shim_metrics.ts";
import type { UnixHttpServer } from "./unix_http.ts";
import { readSpareStatsSync } from "../shim/spare/mod.ts";

const EVENT_SCHEMAS: ReadonlyMap<string, DescMessage> = new Map(
  (Object.values(taskEvents) as unknown[])
    .filter((v): v is DescMessage => (v as DescMessage)?.kind === "message")
    .map((d) => [d.typeName, d]),
);

/**
 * Options of {@linkcode ShimOps}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Logger } from "@skiff/shim";
 * import { ShimOps, type ShimOpsOptions } from "@skiff/shim/ops";
 * const opts: ShimOpsOptions = {
 *   runtime: "io.containerd.skiff-runc.v2",
 *   version: "0.1.0",
 *   namespace: "default",
 *   id: "web",
 *   containerdAddress: "/run/containerd/containerd.sock",
 *   debug: false,
 *   logger: new Logger({ sink: () => {} }),
 * };
 * const ops = new ShimOps(opts);
 * strictEqual(ops.socket, undefined); // nothing served before attach
 * strictEqual(ops.interceptors.length, 1); // the per-call metrics
 * ```
 */
export interface ShimOpsOptions {
  /** Runtime name. */
  runtime: string;
  /** Shim version. */
  version: string;
  /**
   * The running code's identity (the launcher's `SKIFF_SHIM_CODE`), which a live upgrade
   * changes; default "unknown".
   */
  code?: string;
  /** Namespace from the command line. */
  namespace: string;
  /** The id the shim was started for. */
  id: string;
  /** containerd's gRPC address (`-address`). */
  containerdAddress: string;
  /** Whether the shim runs with `-debug` (adds the per-call debug log). */
  debug: boolean;
  /** The shim's logger. */
  logger: Logger;
  /** How many recent events `/debug/events` keeps. Default 256. */
  eventHistory?: number;
}

/**
 * An event as `/debug/events` shows it.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { EventRecord } from "@skiff/shim/ops";
 * const e: EventRecord = { time: "2025-01-01T00:00:00.000Z", topic: "/tasks/exit", type: "containerd.events.TaskExit", event: {} };
 * strictEqual(e.topic, "/tasks/exit");
 * ```
 */
export interface EventRecord {
  /** When it was published (ISO 8601). */
  time: string;
  /** Topic. */
  topic: string;
  /** Bare type name of the payload. */
  type: string;
  /** The payload as protobuf JSON, when its type is a known task event. */
  event: unknown;
}

function processJson(p: OpsProcessView): Record<string, unknown> {
  return {
    execId: p.execId,
    pid: p.pid,
    state: p.state,
    ...(p.exit ? { exitStatus: p.exit.status, exitedAt: p.exit.exitedAt.toISOString() } : {}),
    stdio: { ...p.stdio },
  };
}

function containerJson(c: OpsContainerView): Record<string, unknown> {
  return {
    id: c.id,
    namespace: c.namespace,
    bundle: c.bundle,
    rootfsMounted: c.rootfsMounted,
    options: c.options,
    init: processJson(c.init),
    execs: [...c.execs.values()].map(processJson),
  };
}

/**
 * The operations features of one shim server.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { TtrpcServer } from "../ttrpc/mod.ts";
 * import { Logger } from "@skiff/shim";
 * import { ShimOps } from "@skiff/shim/ops";
 * import { unixGet } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync(); // stands in for /run/containerd/s
 * const lines: string[] = [];
 * const ops = new ShimOps({
 *   runtime: "io.containerd.skiff-runc.v2",
 *   version: "0.1.0",
 *   namespace: "default",
 *   id: "web",
 *   containerdAddress: "/run/containerd/containerd.sock",
 *   debug: false,
 *   logger: new Logger({ sink: (l) => lines.push(l) }),
 * });
 * const server = new TtrpcServer({ interceptors: ops.interceptors });
 * await server.listen(`${dir}/ab12`);
 * await ops.attach({
 *   origin: "cold",
 *   spareStats: undefined,
 *   socket: `${dir}/ab12`,
 *   bundle: dir,
 *   containers: () => new Map(),
 *   sandboxes: () => 0,
 *   events: () => ({ published: 0, failed: 0, queued: 0 }),
 *   options: () => undefined,
 * });
 * strictEqual(ops.socket, `${dir}/ab12.ops`); // beside the ttrpc socket
 * const state = JSON.parse((await unixGet(ops.socket!, "/debug/state", { timeoutMs: 5000 })).body);
 * strictEqual(state.id, "web");
 * strictEqual(state.endpoint.address, `unix://${dir}/ab12`);
 * await ops.close();
 * await server.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export class ShimOps {
  /** The shim's metrics. */
  readonly metrics: ShimMetrics;
  /** Server interceptors: per-call metrics, and the debug log line with `-debug`. */
  readonly interceptors: Interceptor[];
  /** Records an event for `/debug/events` (pass as `EventPublisherOptions.onQueued`). */
  readonly onQueued: (e: QueuedEvent) => void;
  #opts: ShimOpsOptions;
  #history: QueuedEvent[] = [];
  #capacity: number;
  #ctx: ShimOpsContext | undefined;
  #server: UnixHttpServer | undefined;
  /** Set before serving: the socket accepts before `serveUnixHttp()` returns. */
  #opsPath: string | undefined;
  #attaching: Promise<void> | undefined;
  #closed = false;
  #started = new Date();

  /** Creates the metrics and hooks; nothing is served until {@linkcode attach}. */
  constructor(opts: ShimOpsOptions) {
    this.#opts = opts;
    this.#capacity = opts.eventHistory ?? 256;
    this.metrics = new ShimMetrics({
      runtime: opts.runtime,
      namespace: opts.namespace,
      id: opts.id,
      version: opts.version,
      code: opts.code ?? "unknown",
    });
    this.interceptors = [rpcInterceptor({
      observe: (o) => this.metrics.observeRpc(o),
      ...(opts.debug ? { logger: opts.logger } : {}),
    })];
    this.onQueued = (e) => {
      this.#history.push(e);
      if (this.#history.length > this.#capacity) this.#history.shift();
    };
  }

  /** The socket the endpoint serves on, once attached. */
  get socket(): string | undefined {
    return this.#server?.path;
  }

  /** Starts serving beside `ctx.socket`; logs (and carries on) when it cannot. */
  attach(ctx: ShimOpsContext): Promise<void> {
    // close() waits for this: a Shutdown that arrives while the endpoint is starting must
    // still find, and remove, the socket it creates.
    this.#attaching ??= this.#attach(ctx);
    return this.#attaching;
  }

  async #attach(ctx: ShimOpsContext): Promise<void> {
    this.#ctx = ctx;
    const stats = ctx.spareStats;
    this.metrics.setSource({
      containers: () => ctx.containers().values(),
      events: () => ctx.events(),
      origin: () => ctx.origin,
      ...(ctx.pods ? { pods: ctx.pods } : {}),
      ...(stats ? { starts: () => readSpareStatsSync(stats) } : {}),
    });
    const path = opsSocketPath(ctx.socket);
    try {
      // Hono and the HTTP server load here, after the ttrpc socket serves, so they never
      // delay the moment containerd's `start` waits for.
      const [{ createOpsApp }, { serveUnixHttp }] = await Promise.all([
        import("./app.ts"),
        import("./unix_http.ts"),
      ]);
      if (this.#closed) return;
      const app = createOpsApp({
        metrics: () => this.metrics.render(),
        state: () => this.state(),
        events: (limit) => this.events(limit),
        maxEvents: this.#capacity,
      });
      // The endpoint may answer its first request before serveUnixHttp() returns (the socket
      // accepts from its rename into place), so it must know its own socket first.
      this.#opsPath = path;
      this.#server = await serveUnixHttp(path, app.fetch, {
        onError: (e) => this.#opts.logger.warn("operations endpoint error", { error: String(e) }),
      });
      this.#opts.logger.info("operations endpoint serving", { socket: path });
    } catch (e) {
      this.#opsPath = undefined;
      // The shim's job is its containers; a missing endpoint must not stop it.
      this.#opts.logger.warn("operations endpoint unavailable", {
        socket: path,
        error: (e as Error).message,
      });
    }
  }

  /** Stops the endpoint (once it has started, if it is starting) and removes its socket. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#attaching;
    await this.#server?.close();
  }

  /** The most recent `limit` events, oldest first. */
  events(limit: number): EventRecord[] {
    return this.#history.slice(-limit).map((e) => {
      const schema = EVENT_SCHEMAS.get(e.event.typeUrl);
      let event: unknown = null;
      if (schema) {
        try {
          event = toJson(schema, fromBinary(schema, e.event.value));
        } catch { /* shown without its payload */ }
      }
      return { time: e.timestamp.toISOString(), topic: e.topic, type: e.event.typeUrl, event };
    });
  }

  /** The `/debug/state` snapshot. */
  state(): Record<string, unknown> {
    const ctx = this.#ctx;
    const o = this.#opts;
    let advertised = "";
    if (ctx) {
      try {
        advertised = Deno.readTextFileSync(`${ctx.bundle}/address`).trim();
      } catch { /* written by start after the server serves; absent when run by hand */ }
    }
    const containers = ctx ? [...ctx.containers().values()] : [];
    const events: PublisherStats = ctx?.events() ?? { published: 0, failed: 0, queued: 0 };
    return {
      runtime: o.runtime,
      version: o.version,
      namespace: o.namespace,
      id: o.id,
      pid: Deno.pid,
      startedAt: this.#started.toISOString(),
      endpoint: {
        address: advertised || (ctx ? `unix://${ctx.socket}` : ""),
        socket: ctx?.socket ?? "",
        ops: this.#opsPath ?? "",
      },
      containerdAddress: o.containerdAddress,
      bundle: ctx?.bundle ?? "",
      debug: o.debug,
      origin: ctx?.origin ?? "",
      starts: ctx?.spareStats ? readSpareStatsSync(ctx.spareStats) : null,
      options: ctx?.options() ?? null,
      sandboxes: ctx?.sandboxes() ?? 0,
      events,
      processes: liveProcesses(containers),
      containers: containers.map(containerJson),
    };
  }
}
