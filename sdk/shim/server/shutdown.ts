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

/**
 * A pod's shutdown. The returned function runs it once and then calls `ended`; later calls
 * return the same promise.
 *
 * @example Usage
 * ```ts ignore
 * const shutdown = serverShutdown({ logger, extensions, server, socket, publisher, release, ended });
 * ```
 */
export function serverShutdown(parts: ShutdownParts): (why: string) => Promise<void> {
  let done: Promise<void> | undefined;
  return (why: string) => done ??= run(parts, why);
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
