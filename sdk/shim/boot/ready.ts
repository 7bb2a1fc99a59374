/**
 * How a cold server tells the `start` that spawned it that it listens: `start` listens on a
 * socket beside the server's (`<socket>.ready`) and names it in the server's environment; the
 * server connects to it once its own socket is bound. `start` then waits without spending CPU.
 *
 * Polling for the server's socket every 2 ms cost `start` ~0.5 ms of CPU per attempt (a refused
 * connect and a timer in V8's lite mode): ~15 ms in a quiet cold start, and in a burst of 20
 * starts on 2 cores, where servers take 1-3 s to come up, `start` processes used 1.47 CPU-s of
 * the burst's 7.75 (`perf` sched_stat_runtime, `bench/scale_bench.ts --only burst`). A slow poll
 * stays as the fallback (a server that cannot connect, a path too long to listen on).
 *
 * @module
 */
import { LAUNCHER_ENV } from "../contract/launcher_env.ts";

/** The environment variable naming `start`'s ready socket to the server it spawns. */
export const READY_SOCKET_ENV: typeof LAUNCHER_ENV.readySocket = LAUNCHER_ENV.readySocket;

/** `start`'s side: the ready socket it listens on until the server has connected. */
export interface ReadyListener {
  /** The socket's path (for the server's environment). */
  path: string;
  /** Resolves once a process has connected (the server, after binding its socket). */
  notified: Promise<void>;
  /** Stops listening and removes the socket file. */
  close(): void;
}

/**
 * Listens on `<socket>.ready` for the server about to be spawned, or returns undefined when it
 * cannot (the path is too long for a unix socket, the directory refuses it): `start` then polls.
 *
 * @param socket the server's socket path
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { listenReady, notifyReady, READY_SOCKET_ENV } from "./ready.ts";
 * const dir = Deno.makeTempDirSync();
 * const ready = listenReady(`${dir}/server.sock`)!;
 * Deno.env.set(READY_SOCKET_ENV, ready.path); // as the spawned server's environment has it
 * await notifyReady();
 * await ready.notified;
 * strictEqual(Deno.env.get(READY_SOCKET_ENV), undefined); // not passed on to the runtime
 * ready.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function listenReady(socket: string): ReadyListener | undefined {
  const path = `${socket}.ready`;
  let listener: Deno.UnixListener;
  try {
    try {
      Deno.removeSync(path); // a crashed start's
    } catch { /* none */ }
    listener = Deno.listen({ transport: "unix", path });
  } catch {
    return undefined;
  }
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    try {
      listener.close();
    } catch { /* closed */ }
    try {
      Deno.removeSync(path);
    } catch { /* gone */ }
  };
  const notified = listener.accept().then((conn) => {
    try {
      conn.close();
    } catch { /* closed */ }
  }, () => new Promise<void>(() => {})); // closed before anyone connected: never
  return { path, notified, close };
}

/**
 * The server's side: connects to the ready socket its `start` named, if any (best effort: `start`
 * polls as well), and drops the name from the environment, which the runtime's processes inherit.
 *
 * @example Usage
 * ```ts
 * import { notifyReady } from "./ready.ts";
 * await notifyReady(); // no ready socket named: nothing to do
 * ```
 */
export async function notifyReady(): Promise<void> {
  const path = Deno.env.get(READY_SOCKET_ENV);
  if (path === undefined) return;
  Deno.env.delete(READY_SOCKET_ENV);
  try {
    (await Deno.connect({ transport: "unix", path })).close();
  } catch { /* start has gone, or polls */ }
}
