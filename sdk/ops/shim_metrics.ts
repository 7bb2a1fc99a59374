/**
 * The metrics one shim exposes on `/metrics`. Counters are fed by the ttrpc interceptor (every
 * call, and from those the Create and CreateSandbox outcomes); gauges and the event counters are read at scrape time from the
 * server's own state, so nothing is kept twice.
 *
 * @module
 */

import { type Counter, type Histogram, MetricsRegistry } from "./metrics.ts";
import type { OpsContainerView } from "./hooks.ts";
import type { RpcObservation } from "./rpc.ts";
import { processMemory } from "../linux/smaps.ts";

/** The Task API's service names (`containerd.task.v2.Task`, `containerd.task.v3.Task`). */
const TASK_SERVICE = /^containerd\.task\.v\d+\.Task$/;
/** The Sandbox API's service name. */
const SANDBOX_SERVICE = "containerd.runtime.sandbox.v1.Sandbox";

/**
 * Who a shim is; carried by `skiff_shim_info` and the create counters.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ShimIdentity } from "@skiff/shim/ops";
 * const who: ShimIdentity = { runtime: "io.containerd.skiff-runc.v2", namespace: "default", id: "c1", version: "0.1.0" };
 * strictEqual(who.id, "c1");
 * ```
 */
export interface ShimIdentity {
  /** Runtime name, e.g. `io.containerd.skiff-runc.v2`. */
  runtime: string;
  /** containerd namespace of the shim. */
  namespace: string;
  /** The id the shim was started for (its first container, or its sandbox). */
  id: string;
  /** The shim's version. */
  version: string;
  /** The running code's identity (changed by a live upgrade); "unknown" when not given. */
  code?: string;
}

/**
 * Where scrape-time values come from.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ShimMetrics, type ShimMetricsSource } from "@skiff/shim/ops";
 * const metrics = new ShimMetrics({
 *   runtime: "io.containerd.skiff-runc.v2",
 *   namespace: "default",
 *   id: "web",
 *   version: "0.1.0",
 * });
 * const source: ShimMetricsSource = {
 *   containers: () => [],
 *   events: () => ({ published: 5, failed: 1, queued: 0 }),
 * };
 * metrics.setSource(source);
 * strictEqual(metrics.render().includes("skiff_events_failed_total"), true);
 * ```
 */
export interface ShimMetricsSource {
  /** The containers served now. */
  containers(): Iterable<OpsContainerView>;
  /** Event publisher counters. */
  events(): { published: number; failed: number; queued: number };
  /** Pods the process serves (`skiff_process_pods`); absent: 1. */
  pods?(): number;
  /** How the server came to run (`skiff_shim_origin`); absent: not shown. */
  origin?(): "cold" | "spare" | "shared";
  /**
   * Node-wide server starts of this shim's launcher under this containerd, read at scrape
   * time; absent when spares are off (the counters are not shown then).
   */
  starts?(): { adopted: number; cold: number };
}

/**
 * Counts live processes: started (a pid is known) and not yet exited.
 *
 * @param containers containers to look at
 * @returns the number of live init and exec processes
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OpsContainerView } from "@skiff/shim/ops";
 * import { liveProcesses } from "@skiff/shim/ops";
 * const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
 * const view: OpsContainerView = {
 *   id: "web",
 *   namespace: "default",
 *   bundle: "/run/b/web",
 *   options: {},
 *   rootfsMounted: true,
 *   init: { execId: "", pid: 42, state: "running", exit: undefined, stdio },
 *   execs: new Map([["sh", { execId: "sh", pid: 0, state: "created", exit: undefined, stdio }]]),
 * };
 * strictEqual(liveProcesses([view]), 1); // the running init; the exec has no pid yet
 * ```
 */
export function liveProcesses(containers: Iterable<OpsContainerView>): number {
  let n = 0;
  for (const c of containers) {
    for (const p of [c.init, ...c.execs.values()]) if (p.pid !== 0 && p.state !== "stopped") n++;
  }
  return n;
}

/**
 * The shim's metrics.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ShimMetrics } from "@skiff/shim/ops";
 * const m = new ShimMetrics({ runtime: "io.containerd.skiff-runc.v2", namespace: "default", id: "c1", version: "0.1.0" });
 * m.taskCreated("error");
 * strictEqual(m.render().includes('skiff_task_create_requests_total{runtime="io.containerd.skiff-runc.v2",result="error"} 1'), true);
 * ```
 */
export class ShimMetrics {
  /** The registry everything is registered in (add your own metrics here). */
  readonly registry: MetricsRegistry = new MetricsRegistry();
  #identity: ShimIdentity;
  #source: ShimMetricsSource | undefined;
  #taskCreates: Counter;
  #sandboxCreates: Counter;
  #requests: Counter;
  #durations: Histogram;
  #originShown = false;
  #startsShown = false;

  /**
   * Registers the metrics.
   *
   * @param identity who the shim is
   * @param source scrape-time values (or later with {@linkcode setSource})
   */
  constructor(identity: ShimIdentity, source?: ShimMetricsSource) {
    // long: one registration per metric, in the order /metrics lists them
    this.#identity = identity;
    this.#source = source;
    const r = this.registry;
    r.gauge({
      name: "skiff_shim_info",
      help:
        "Identity of the shim: always 1, with its runtime, namespace, id, version and running code as labels.",
      labelNames: ["runtime", "namespace", "id", "version", "code"],
    }).set({ ...identity, code: identity.code ?? "unknown" }, 1);
    this.#taskCreates = r.counter({
      name: "skiff_task_create_requests_total",
      help: "Task API Create calls handled, by result (ok or error).",
      labelNames: ["runtime", "result"],
    });
    this.#sandboxCreates = r.counter({
      name: "skiff_sandbox_create_requests_total",
      help: "Sandbox API CreateSandbox calls handled, by result (ok or error).",
      labelNames: ["runtime", "result"],
    });
    // Both results exist from the start, so a ratio never divides by a missing series.
    for (const result of ["ok", "error"]) {
      this.#taskCreates.inc({ runtime: identity.runtime, result }, 0);
      this.#sandboxCreates.inc({ runtime: identity.runtime, result }, 0);
    }
    this.#requests = r.counter({
      name: "skiff_ttrpc_requests_total",
      help: "ttrpc calls served, by service, method and gRPC status code.",
      labelNames: ["service", "method", "code"],
    });
    this.#durations = r.histogram({
      name: "skiff_ttrpc_request_duration_seconds",
      help: "Time spent handling ttrpc calls (Wait lasts as long as the process it waits for).",
      labelNames: ["service", "method"],
    });
    r.counter({
      name: "skiff_events_published_total",
      help: "Task events containerd accepted.",
      read: () => this.#source?.events().published ?? 0,
    });
    r.counter({
      name: "skiff_events_failed_total",
      help: "Task events given up on (retries exhausted, rejected, or dropped from a full queue).",
      read: () => this.#source?.events().failed ?? 0,
    });
    r.gauge({
      name: "skiff_events_queued",
      help: "Task events waiting to be forwarded to containerd.",
      read: () => this.#source?.events().queued ?? 0,
    });
    r.gauge({
      name: "skiff_containers",
      help: "Containers the shim serves.",
      read: () => this.#source ? [...this.#source.containers()].length : 0,
    });
    r.gauge({
      name: "skiff_processes",
      help: "Live processes (init and exec) the shim tracks: started and not yet exited.",
      read: () => this.#source ? liveProcesses(this.#source.containers()) : 0,
    });
    r.gauge({
      name: "skiff_process_pods",
      help: "Pods this shim's process serves: 1, more for a shared server (SKIFF_SHARED_PODS), " +
        "whose process figures every pod's endpoint reports.",
      read: () => this.#source?.pods?.() ?? 1,
    });
    r.gauge({
      name: "process_resident_memory_bytes",
      help: "Resident memory size of the shim process in bytes.",
      read: () => Deno.memoryUsage().rss,
    });
    // RSS counts every page of the deno binary in every shim; PSS (shared pages split among the
    // processes mapping them) is what a shim costs the node, USS what its exit would free.
    r.gauge({
      name: "skiff_process_proportional_memory_bytes",
      help: "Proportional set size (PSS) of the shim process in bytes (smaps_rollup).",
      read: () => processMemory().pss,
    });
    r.gauge({
      name: "skiff_process_unique_memory_bytes",
      help: "Unique set size (USS: private pages) of the shim process in bytes (smaps_rollup).",
      read: () => processMemory().uss,
    });
    r.gauge({
      name: "process_start_time_seconds",
      help: "Start time of the shim process since the Unix epoch in seconds.",
      read: () => Math.round(performance.timeOrigin) / 1000,
    });
    this.#registerStarts();
  }

  /** Who the shim is. */
  get identity(): ShimIdentity {
    return { ...this.#identity };
  }

  /** Sets where scrape-time values come from. */
  setSource(source: ShimMetricsSource): void {
    this.#source = source;
    this.#registerStarts();
  }

  /** Registers the origin and start counters the first time a source offers them. */
  #registerStarts(): void {
    const source = this.#source;
    const r = this.registry;
    if (source?.origin && !this.#originShown) {
      this.#originShown = true;
      r.gauge({
        name: "skiff_shim_origin",
        help: "How this shim server came to run: always 1, with origin cold (spawned by start) " +
          "or spare (a warm spare adopted by start).",
        labelNames: ["origin"],
      }).set({ origin: source.origin() }, 1);
    }
    if (source?.starts && !this.#startsShown) {
      this.#startsShown = true;
      r.counter({
        name: "skiff_spares_adopted_total",
        help: "Starts that handed their container to a warm spare, node-wide for this shim's " +
          "launcher and containerd (the same value in every such shim).",
        read: () => this.#source?.starts?.().adopted ?? 0,
      });
      r.counter({
        name: "skiff_cold_starts_total",
        help: "Starts that spawned a server and waited for it, node-wide for this shim's " +
          "launcher and containerd (the same value in every such shim).",
        read: () => this.#source?.starts?.().cold ?? 0,
      });
    }
  }

  /** Counts a Task API Create outcome. */
  taskCreated(result: "ok" | "error"): void {
    this.#taskCreates.inc({ runtime: this.#identity.runtime, result });
  }

  /** Counts a CreateSandbox outcome. */
  sandboxCreated(result: "ok" | "error"): void {
    this.#sandboxCreates.inc({ runtime: this.#identity.runtime, result });
  }

  /**
   * Records one finished ttrpc call (the interceptor's observer). A Task API `Create` (v2 or v3
   * name) or a Sandbox API `CreateSandbox` also counts as a create outcome: the services need
   * no hook of their own for it.
   */
  observeRpc(o: RpcObservation): void {
    this.#requests.inc({ service: o.service, method: o.method, code: o.code });
    this.#durations.observe({ service: o.service, method: o.method }, o.seconds);
    const result = o.code === "OK" ? "ok" : "error";
    if (o.method === "Create" && TASK_SERVICE.test(o.service)) this.taskCreated(result);
    else if (o.method === "CreateSandbox" && o.service === SANDBOX_SERVICE) {
      this.sandboxCreated(result);
    }
  }

  /** The text exposition. */
  render(): string {
    return this.registry.render();
  }
}
