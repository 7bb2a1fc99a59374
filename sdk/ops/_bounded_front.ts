/**
 * Internal: a bounded front for a unix-socket HTTP server. `Deno.serve` gives no hold on its
 * connections (a peer that connects and sends nothing, or half a request, is kept forever), so
 * the public socket is served here and each connection is relayed to `Deno.serve`'s private
 * socket, with a cap on connections at once (more are closed unanswered) and on each
 * connection's lifetime (an ops request takes milliseconds; the node monitor opens a connection
 * per request).
 *
 * @module
 */

/** Default connections relayed at once; more are closed at once. */
export const MAX_OPS_CONNECTIONS = 16;
/** Default lifetime of a connection from its accept, whatever it is doing. */
export const OPS_CONNECTION_MS = 30_000;

/** A running front. */
export interface BoundedFront {
  /** Stops accepting and closes every relayed connection. */
  close(): void;
}

async function pump(from: Deno.Conn, to: Deno.Conn): Promise<void> {
  const buf = new Uint8Array(16 * 1024);
  for (;;) {
    const n = await from.read(buf);
    if (n === null) return;
    let off = 0;
    while (off < n) off += await to.write(buf.subarray(off, n));
  }
}

function closeQuietly(c: Deno.Conn): void {
  try {
    c.close();
  } catch { /* closed */ }
}

/**
 * Accepts on `listener` and relays each connection to the unix socket `backend`.
 *
 * @param listener the public listener
 * @param backend the private socket `Deno.serve` listens on
 * @param limits connections at once, their lifetime, and where relay errors go
 * @returns the front
 */
export function serveBoundedFront(
  listener: Deno.Listener,
  backend: string,
  limits: { onError?: (error: unknown) => void; maxConnections: number; connectionMs: number },
): BoundedFront {
  const { onError, maxConnections, connectionMs } = limits;
  const open = new Set<() => void>();
  let closed = false;
  void (async () => {
    for (;;) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (e) {
        if (closed || e instanceof Deno.errors.BadResource) return;
        onError?.(e);
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      if (open.size >= maxConnections) {
        closeQuietly(conn);
        continue;
      }
      void relay(conn);
    }
  })();

  async function relay(client: Deno.Conn): Promise<void> {
    let inner: Deno.Conn | undefined;
    const end = () => {
      closeQuietly(client);
      if (inner) closeQuietly(inner);
    };
    open.add(end);
    const timer = setTimeout(end, connectionMs);
    Deno.unrefTimer(timer as unknown as number);
    try {
      inner = await Deno.connect({ transport: "unix", path: backend });
      const up = pump(client, inner).then(() => (inner as Deno.UnixConn).closeWrite());
      // The answer ends the relay; a request side that fails first ends it too.
      await Promise.race([pump(inner, client), up.then(() => new Promise(() => {}))]);
    } catch (e) {
      if (!(e instanceof Deno.errors.BadResource) && !(e instanceof Deno.errors.Interrupted)) {
        // A peer that leaves mid-request is ordinary here; anything else is worth a line.
        if (!(e instanceof Deno.errors.BrokenPipe) && !(e instanceof Deno.errors.ConnectionReset)) {
          onError?.(e);
        }
      }
    } finally {
      clearTimeout(timer);
      open.delete(end);
      end();
    }
  }

  return {
    close() {
      closed = true;
      try {
        listener.close();
      } catch { /* closed */ }
      for (const end of open) end();
      open.clear();
    },
  };
}
