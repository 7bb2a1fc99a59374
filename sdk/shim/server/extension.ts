/**
 * The server's extension seam: how optional features (the operations endpoint in `sdk/ops`, the
 * warm spare in `sdk/shim/spare`) plug into a shim server without the server knowing them.
 * Types only: the server, and each extension, import this module without loading the others.
 *
 * An extension is set up before the ttrpc server exists (its interceptors must see the first
 * call) and may decline (a feature switched off returns nothing and costs nothing more); once
 * the socket serves it is told so, with read-only views of the server's state; on shutdown it
 * is closed before the server stops serving.
 *
 * @module
 */

import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "../logger.ts";
import type { PublisherStats, QueuedEvent } from "./events.ts";

/** containerd's flags, as far as an extension reads them. */
export interface ServerFlags {
  /** containerd namespace (`-namespace`). */
  readonly namespace: string;
  /** The id the server was started for (`-id`). */
  readonly id: string;
  /** containerd's address (`-address`). */
  readonly address: string;
  /** containerd's binary (`-publish-binary`). */
  readonly publishBinary: string;
  /** Whether the shim runs with `-debug`. */
  readonly debug: boolean;
}

/** What an extension knows when it is set up, before anything serves. */
export interface ServerSetup {
  /** The shim's runtime name and version. */
  shim: { readonly runtimeName: string; readonly version: string };
  /** containerd's flags as the server got them. */
  flags: ServerFlags;
  /** The server's logger. */
  logger: Logger;
  /**
   * How the pod's server came to run: spawned by `start` (`cold`), a warm spare it adopted, or
   * a pod that joined a shared server (`shared`: no process of its own started).
   */
  origin: "cold" | "spare" | "shared";
  /** The ttrpc socket the server serves. */
  socket: string;
  /** The bundle the server was started in (the server itself works from `/`). */
  bundle: string;
  /**
   * Set when the process is a shared server (`SKIFF_SHARED_PODS`): the most pods it serves. Its
   * join point, not each pod, then decides when the next warm spare is worth loading.
   */
  sharedPods?: number;
}

/**
 * One process of a container, as the endpoint reads it (a structural view of `ShimProcess`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ServedProcess } from "@skiff/shim/ops";
 * const p: ServedProcess = { execId: "", pid: 42, state: "running", exit: undefined,
 *   stdio: { stdin: "", stdout: "", stderr: "", terminal: false } };
 * strictEqual(p.pid, 42);
 * ```
 */
export interface ServedProcess {
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
 * A container as extensions read it: a read-only structural view of the Task service's records.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ServedContainer } from "@skiff/shim/ops";
 * const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
 * const view: ServedContainer = {
 *   id: "web",
 *   namespace: "default",
 *   bundle: "/run/b/web",
 *   options: {},
 *   rootfsMounted: true,
 *   init: { execId: "", pid: 42, state: "running", exit: undefined, stdio },
 *   execs: new Map([["sh", { execId: "sh", pid: 0, state: "created", exit: undefined, stdio }]]),
 * };
 * const views: ReadonlyMap<string, ServedContainer> = new Map([["web", view]]);
 * strictEqual(views.get("web")?.execs.get("sh")?.state, "created");
 * ```
 */
export interface ServedContainer {
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
  readonly init: ServedProcess;
  /** Execs by id. */
  readonly execs: ReadonlyMap<string, ServedProcess>;
}

/** What an extension may read once the server serves; functions, so each read is current. */
export interface ServerState {
  /** Spawns a child through the server's reaper (which then leaves its exit to Deno). */
  spawn(cmd: Deno.Command): Deno.ChildProcess;
  /** The containers served. */
  containers(): ReadonlyMap<string, ServedContainer>;
  /** How many sandboxes are served. */
  sandboxes(): number;
  /** Event publisher counters. */
  events(): PublisherStats;
  /** Shim-wide runtime options (from `start` or a sandbox), if any. */
  options(): unknown;
  /** Pods the process serves: 1, or more for a shared server (`SKIFF_SHARED_PODS`). */
  pods?(): number;
}

/** What an extension plugs in; every part is optional. */
export interface ServerHooks {
  /** ttrpc server interceptors (outermost first, in the order of the extensions). */
  interceptors?: Interceptor[];
  /** Sees every event as it is queued for containerd. */
  onEvent?(event: QueuedEvent): void;
  /** The socket serves; failures are the extension's to log, the server carries on. */
  onServing?(state: ServerState): Promise<void> | void;
  /** The server shuts down; called before it stops serving. */
  onShutdown?(): Promise<void> | void;
}

/**
 * A server extension.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ServerExtension } from "@skiff/shim/ops";
 * const hello: ServerExtension = {
 *   name: "hello",
 *   setup: ({ logger }) => ({ onServing: () => logger.info("hello") }),
 * };
 * strictEqual(hello.name, "hello");
 * ```
 */
export interface ServerExtension {
  /** A short name, for logs. */
  readonly name: string;
  /** Sets the extension up for one server; undefined when it has nothing to do. */
  setup(ctx: ServerSetup): Promise<ServerHooks | undefined> | ServerHooks | undefined;
}
