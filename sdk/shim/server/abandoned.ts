/**
 * A server that containerd gave up on before handing it anything. containerd can stop or crash
 * while a shim's `start` is still waiting for its server to listen; the restarted containerd then
 * finds no `address` file (2.x) or cleans up after the shim (1.6/1.7), and removes the bundle.
 * Nobody will ever connect to that server, so it must exit by itself. The sign is the bundle
 * directory: it exists from before `start` until the container is deleted.
 *
 * @module
 */

/** Options of {@linkcode exitWhenAbandoned}. */
export interface AbandonedWatchOptions {
  /** The bundle directory the server was started in. */
  bundle: string;
  /** True once containerd handed the server a container or a sandbox (the watch then ends). */
  claimed: () => boolean;
  /** Called once when the bundle is gone and nothing was ever claimed. */
  onAbandoned: () => void;
  /** How often to look; 1 s. */
  intervalMs?: number;
}

/**
 * Watches, until the first container or sandbox arrives, for the bundle to disappear.
 *
 * @param opts what to watch and what to call
 * @returns a function that stops the watch
 * @example Usage
 * ```ts ignore
 * const stop = exitWhenAbandoned({
 *   bundle,
 *   claimed: () => tasks.containers.size > 0,
 *   onAbandoned: () => void shutdown("abandoned"),
 * });
 * ```
 */
export function exitWhenAbandoned(opts: AbandonedWatchOptions): () => void {
  const timer = setInterval(() => {
    if (opts.claimed()) return clearInterval(timer);
    try {
      Deno.statSync(opts.bundle);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) return;
      clearInterval(timer);
      opts.onAbandoned();
    }
  }, opts.intervalMs ?? 1_000);
  // The listening socket keeps the server alive; this watch must not.
  Deno.unrefTimer(timer);
  return () => clearInterval(timer);
}
