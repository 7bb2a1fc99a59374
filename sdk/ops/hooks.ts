/**
 * The operations features' seam: what the endpoint reads from a shim server. Types only (a
 * structural view of the server's records), so the server, the metrics and the endpoint can all
 * name them without importing one another.
 *
 * @module
 */

import type { PublisherStats } from "../shim/server/events.ts";
import type { ServedContainer, ServedProcess } from "../shim/server/extension.ts";

/** A process, as the endpoint reads it: {@linkcode ServedProcess}, the server's read-only view. */
export type OpsProcessView = ServedProcess;

/** A container, as the endpoint reads it: {@linkcode ServedContainer}, the server's read-only view. */
export type OpsContainerView = ServedContainer;

/**
 * What the endpoint reads once the server is serving. Functions, so every request sees the
 * current state; nothing here lets the endpoint change a task.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ShimOpsContext } from "@skiff/shim/ops";
 * const ctx: ShimOpsContext = {
 *   origin: "cold",
 *   spareStats: undefined, // spares off
 *   socket: "/run/containerd/s/ab12",
 *   bundle: "/run/b/web",
 *   containers: () => new Map(),
 *   sandboxes: () => 0,
 *   events: () => ({ published: 3, failed: 0, queued: 0 }),
 *   options: () => undefined,
 * };
 * strictEqual(ctx.events().published, 3); // read at each request, never cached
 * ```
 */
export interface ShimOpsContext {
  /** How this pod's server came to run: `start` spawned it (`cold`), a warm spare it adopted, or a shared server it joined. */
  origin: "cold" | "spare" | "shared";
  /**
   * The node-wide counters file (`{"adopted":N,"cold":M}`) of this shim's launcher under this
   * containerd, or undefined when spares are off (nothing is counted then).
   */
  spareStats: string | undefined;
  /** The ttrpc socket path the server listens on. */
  socket: string;
  /** The bundle the server runs in (its `address` file holds the advertised endpoint). */
  bundle: string;
  /** The containers served. */
  containers: () => ReadonlyMap<string, OpsContainerView>;
  /** How many sandboxes are served. */
  sandboxes: () => number;
  /** Event publisher counters. */
  events: () => PublisherStats;
  /** Shim-wide runtime options (from `start` or a sandbox), if any. */
  options: () => unknown;
  /** Pods the process serves (a shared server's: more than 1); absent: 1. */
  pods?: () => number;
}
