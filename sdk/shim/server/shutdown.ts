/**
 * How a pod's server ends, whatever asked for it (Shutdown with nothing left, ShutdownSandbox,
 * SIGTERM, SIGINT, an abandoned bundle): once, in order; then `ended` says so (the process
 * exits once no pod is left: `./serve.ts`).
 *
 * @module
 */

import type { TtrpcServer } from "../../ttrpc/server.ts";
import type { Logger } from "../logger.ts";
import type { EventPublisher } from "./events.ts";

/** What {@linkcode serverShutdown} stops. */
export interface ShutdownParts {
  /** The server's logger. */
  logger: Logger;
  /** The extensions' shutdown hook, first: an endpoint beside the socket goes before it. */
  extensions(): Promise<void>;
  /** The ttrpc server. */
  server: TtrpcServer;
  /** Its socket, removed once it stops serving. */
  socket: string;
  /** The event publisher, flushed (bounded) before the exit. */
  publisher: EventPublisher;
  /** Everything else to release (the Task service's subscriptions). */
  release(): void;
  /** Called once everything is released: the process exits when this was its last pod. */
  ended(): void;
}

/** A pod's shutdown, as {@linkcode serverShutdown} returns it. */
export interface PodShutdown {
  /**
   * Starts the shutdown (once) and resolves when it is done; later calls return the same
   * promise. It is marked at once and runs from the next macrotask, so that the answer of the
   * call that asked for it (Shutdown, ShutdownSandbox) is written first.
   */
  (why: string): Promise<void>;
  /** Why the pod is ending, from the moment it was asked; `undefined` while it serves. */
  readonly reason: string | undefined;
}

/**
 * A pod's shutdown. The returned function runs it once and then calls `ended`; what asked for
 * it stays readable (`reason`), so that nothing starts what would outlive it (a live upgrade).
 *
 * @example Usage
 * ```ts ignore
 * const shutdown = serverShutdown({ logger, extensions, server, socket, publisher, release, ended });
 * ```
 */
export function serverShutdown(parts: ShutdownParts): PodShutdown {
  let done: Promise<void> | undefined;
  let reason: string | undefined;
  const shutdown = (why: string) => {
    reason ??= why;
    return done ??= new Promise<void>((r) => setTimeout(r, 0)).then(() => run(parts, why));
  };
  return Object.defineProperty(shutdown, "reason", { get: () => reason }) as PodShutdown;
}

async function run(parts: ShutdownParts, why: string): Promise<void> {
  parts.logger.info("shutting down", { reason: why });
  await parts.extensions().catch(() => {});
  await parts.server.close({ timeoutMs: 5_000 }).catch(() => {});
  try {
    Deno.removeSync(parts.socket); // a listener handed over is not the server's to remove
  } catch { /* removed */ }
  await parts.publisher.close(3_000).catch(() => {});
  parts.release();
  parts.ended();
}
