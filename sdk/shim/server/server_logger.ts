/**
 * The server's logger: containerd's level and fields, lines to the bundle's `log` FIFO (logrus
 * text, or JSON with `SKIFF_LOG_FORMAT=json`), and the trap that turns a stray promise rejection
 * into a log line instead of the end of every container's stdio and exit reporting.
 *
 * @module
 */

import { O, open } from "../../linux/libc.ts";
import { FdStream } from "../../linux/fd_stream.ts";
import type { ShimFlags } from "../contract/flags.ts";
import { Logger } from "../logger.ts";

/**
 * Opens the bundle's `log` FIFO for writing, without blocking. containerd holds it open for
 * reading before it runs the shim; when nobody does (a shim run by hand, or containerd died while
 * `start` was running), lines go nowhere instead of the server hanging in `open` for good, where
 * it could never notice that it was abandoned.
 */
export function openLogSink(path: string): ((line: string) => void) | undefined {
  let stream: FdStream;
  try {
    stream = new FdStream(open(path, O.WRONLY | O.NONBLOCK), `log fifo "${path}"`);
  } catch {
    return undefined; // ENXIO (no reader), ENOENT (no FIFO)
  }
  const enc = new TextEncoder();
  let pending = 0;
  let chain = Promise.resolve();
  return (line: string) => {
    // A stalled reader must not make the shim buffer without bound.
    if (pending > 1000) return;
    pending++;
    chain = chain.then(async () => {
      try {
        await stream.write(enc.encode(line));
      } catch { /* reader gone */ }
      pending--;
    });
  };
}

/**
 * The logger of a pod's server started in `bundle` (its lines go to that bundle's `log` FIFO).
 *
 * @example Usage
 * ```ts ignore
 * const logger = serverLogger(shim.runtimeName, flags, Deno.cwd());
 * ```
 */
export function serverLogger(runtime: string, flags: ShimFlags, bundle: string): Logger {
  const logger = new Logger({
    level: flags.debug ? "debug" : "info",
    fields: { runtime, namespace: flags.namespace },
  });
  const sink = openLogSink(`${bundle}/log`);
  if (sink) logger.setSink(sink);
  if (Deno.env.get("SKIFF_LOG_FORMAT") === "json") logger.setFormat("json");
  return logger;
}

/**
 * The process's trap that turns a stray promise rejection into a log line instead of the end of
 * every container's stdio and exit reporting: a shim outlives any one call, so a stray
 * rejection is a bug to log. Installed once per process; the line goes to every pod's log
 * (a rejection names no pod).
 *
 * @param loggers the live pods' loggers, read when a rejection happens
 * @example Usage
 * ```ts ignore
 * trapUnhandledRejections(() => pods.map((p) => p.logger));
 * ```
 */
export function trapUnhandledRejections(loggers: () => Iterable<Logger>): void {
  globalThis.addEventListener("unhandledrejection", (e) => {
    e.preventDefault();
    for (const logger of loggers()) {
      logger.error("unhandled rejection", { error: String(e.reason?.stack ?? e.reason) });
    }
  });
}

/**
 * A shared server's trap for an uncaught exception (a throw in a timer or an event callback):
 * logged to every pod's log instead of ending the process, whose other pods would all be lost
 * with it. A server of one pod ends as before (its pod is what failed).
 *
 * @param loggers the live pods' loggers, read when an exception goes uncaught
 * @example Usage
 * ```ts ignore
 * trapUncaughtErrors(() => pods.map((p) => p.logger));
 * ```
 */
export function trapUncaughtErrors(loggers: () => Iterable<Logger>): void {
  globalThis.addEventListener("error", (e) => {
    e.preventDefault();
    const error = e.error instanceof Error ? e.error.stack ?? e.error.message : String(e.error);
    for (const logger of loggers()) logger.error("uncaught exception", { error });
  });
}
