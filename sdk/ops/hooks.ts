/**
 * The operations features' seam: what the endpoint reads from a shim server. Types only (a
 * structural view of the server's records), so the server, the metrics and the endpoint can all
 * name them without importing one another.
 *
 * @module
 */

import type { PublisherStats } from "../shim/server/events.ts";

/**
 * One process of a container, as the endpoint reads it (a structural view of `ShimProcess`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OpsProcessView } from "@skiff/shim/ops";
 * const p: OpsProcessView = { execId: "", pid: 42, state: "running", exit: undefined,
 *   stdio: { stdin: "", stdout: "", stderr: "", terminal: false } };
 * strictEqual(p.pid, 42);
 * ```
 */
export interface OpsProcessView {
  /** Exec id ("" for the init process). */
  readonly execId: string;
  /** pid, 0 before it is known. */
  readonly pid: number;
  /** Lifecycle state (`created`, `running`, `paused`, `stopped`, …). */
  readonly state: string;
  /** How it ended, once it has. */
  readonly exit: { status: number; exitedAt: Date } | undefined;
  /** Stdio as containerd described it. */
  readonly stdio: { stdin: string; stdout: string; stderr: string; terminal: boolean };
}

/**
 * A container, as the endpoint reads it (a structural view of the Task service's records).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OpsContainerView } from "@skiff/shim/ops";
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
 * const views: ReadonlyMap<string, OpsContainerView> = new Map([["web", view]]);
 * strictEqual(views.get("web")?.execs.get("sh")?.state, "created");
 * ```
 */
export interface OpsContainerView {
  /** Container id. */
  readonly id: string;
  /** containerd namespace. */
  readonly namespace: string;
  /** Bundle directory. */
  readonly bundle: string;
  /** Runtime options in effect. */
  readonly options: unknown;
  /** Whether the shim mounted the rootfs. */
  readonly rootfsMounted: boolean;
  /** The init process. */
  readonly init: OpsProcessView;
  /** Execs by id. */
  readonly execs: ReadonlyMap<string, OpsProcessView>;
}

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
  /** How this server came to run: spawned by `start` (`cold`) or a warm spare it adopted. */
  origin: "cold" | "spare";
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
}
