/**
 * How a shim server ends, whatever asked for it (Shutdown with nothing left, ShutdownSandbox,
 * SIGTERM, SIGINT, an abandoned bundle): once, in order, then the process exits.
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
  /** Everything else to release (the Task service's subscriptions, the reaper). */
  release(): void;
}

/**
 * The server's shutdown, also bound to SIGTERM and SIGINT. The returned function runs it once
 * and exits the process; later calls do nothing.
 *
 * @example Usage
 * ```ts ignore
 * const shutdown = serverShutdown({ logger, extensions, server, socket, publisher, release });
 * ```
 */
export function serverShutdown(parts: ShutdownParts): (why: string) => Promise<void> {
  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    parts.logger.info("shutting down", { reason: why });
    await parts.extensions().catch(() => {});
    await parts.server.close({ timeoutMs: 5_000 }).catch(() => {});
    try {
      Deno.removeSync(parts.socket); // a listener handed over is not the server's to remove
    } catch { /* removed */ }
    await parts.publisher.close(3_000).catch(() => {});
    parts.release();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGTERM", () => void shutdown("SIGTERM"));
  Deno.addSignalListener("SIGINT", () => void shutdown("SIGINT"));
  return shutdown;
}
