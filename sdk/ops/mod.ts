/**
 * Operations for skiff shims: a Prometheus metrics registry, the per-shim operations
 * endpoint (metrics and debug state on `<ttrpc socket>.ops`, enabled with `-debug` or
 * `SKIFF_OPS=1`), the ttrpc interceptor behind the RPC metrics and debug log lines, and the
 * node monitor that merges every shim's metrics into one scrape.
 *
 * @example Scrape every skiff shim on the node
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { NodeMonitor } from "@skiff/shim/ops";
 *
 * const dir = await Deno.makeTempDir(); // /run/containerd/s on a node
 * const { shims, text } = await new NodeMonitor({ socketDirs: [dir] }).scrape();
 * strictEqual(shims.length, 0);
 * strictEqual(text.includes("skiff_monitor_shims"), true);
 * await Deno.remove(dir);
 * ```
 *
 * @module
 */

export {
  Counter,
  DEFAULT_BUCKETS,
  formatValue,
  Gauge,
  Histogram,
  type HistogramOptions,
  type Labels,
  type MetricFamily,
  type MetricOptions,
  MetricsRegistry,
  type MetricType,
  parseExposition,
  type ReadMetricOptions,
  renderExposition,
  type Sample,
} from "./metrics.ts";
export {
  grpcCodeName,
  rpcInterceptor,
  type RpcInterceptorOptions,
  type RpcObservation,
} from "./rpc.ts";
export {
  liveProcesses,
  type ShimIdentity,
  ShimMetrics,
  type ShimMetricsSource,
} from "./shim_metrics.ts";
export { createOpsApp, type OpsAppSource } from "./app.ts";
export { type EventRecord, ShimOps, type ShimOpsOptions } from "./shim_ops.ts";
export {
  opsExtension,
  type OpsExtensionOptions,
  type OpsSettings,
  opsSettings,
} from "./extension.ts";
export type { OpsContainerView, OpsProcessView, ShimOpsContext } from "./hooks.ts";
export { OPS_SOCKET_SUFFIX, opsSocketPath } from "../shim/contract/socket_address.ts";
export {
  serveUnixHttp,
  unixGet,
  type UnixGetOptions,
  type UnixGetResult,
  type UnixHttpServer,
  type UnixHttpServerOptions,
} from "./unix_http.ts";
export {
  createMonitorApp,
  DEFAULT_OPS_SOCKET_DIR,
  isLoopback,
  mergeFamilies,
  type MonitorServer,
  NodeMonitor,
  type NodeMonitorOptions,
  type NodeScrape,
  serveMonitor,
  type ServeMonitorOptions,
  type ShimIdentityLabels,
  type ShimScrape,
} from "./monitor.ts";
export { parseMonitorArgs } from "./monitor_cli.ts";
// Shim types the extension and the hooks above mention, so the ops API documents itself.
export type { PublisherStats, QueuedEvent } from "../shim/server/events.ts";
export type {
  ServedContainer,
  ServedProcess,
  ServerExtension,
  ServerFlags,
  ServerHooks,
  ServerSetup,
  ServerState,
} from "../shim/server/extension.ts";
