/**
 * The agent's end of its virtio-serial port: serves ttrpc on it, one host connection after
 * another.
 *
 * The port is a character device (`/dev/vportNp1`) that can be opened once only, so the guest's
 * init opens it read-write as the agent's stdin and duplicates it as its stdout; reads and
 * writes then go through two descriptors of one open file and never wait on each other. While
 * no host process is connected to the socket QEMU binds the port to, a read returns end of
 * file at once (it does not block), and once a host connection ends, reads return end of file
 * again. So a host connection begins with the first bytes read (a ttrpc client always speaks
 * first) and ends with the first end of file after them.
 *
 * @module
 */

import type { TtrpcByteStream, TtrpcServer } from "@skiff/shim/ttrpc";

/** The two descriptors of the port. */
export interface PortFiles {
  /** Reads what the host wrote; 0 bytes (`null`) while no host is connected. */
  read(p: Uint8Array): Promise<number | null>;
  /** Writes to the host. */
  write(p: Uint8Array): Promise<number>;
}

/** How often the agent looks for a host connection while none is there. */
const IDLE_POLL_MS = 50;

/**
 * Serves `server` on the port until `signal` aborts: waits for a host connection, serves it
 * until it ends, and waits for the next.
 *
 * @param server the agent's ttrpc server
 * @param port the port's descriptors (the agent's stdin and stdout)
 * @param signal stops serving (after the connection being served ends)
 * @param onConnection called when a host connection begins and ends (for the console)
 */
export async function servePort(
  server: TtrpcServer,
  port: PortFiles,
  signal: AbortSignal,
  onConnection: (event: "connected" | "disconnected") => void = () => {},
): Promise<void> {
  const buf = new Uint8Array(64 * 1024);
  while (!signal.aborted) {
    const n = await port.read(buf);
    if (n === null || n === 0) {
      await new Promise((r) => setTimeout(r, IDLE_POLL_MS));
      continue;
    }
    onConnection("connected");
    await server.serveConn(portConnection(port, buf.slice(0, n)));
    onConnection("disconnected");
  }
}

/**
 * One host connection: the bytes that began it, then the port's until end of file. Writes after
 * its end are dropped: the port is the next connection's too, where a late answer (a handler
 * that finished after the host left) would be taken as the answer to an unrelated call, since
 * stream ids start at 1 again.
 *
 * @param port the port's descriptors
 * @param first the bytes that began the connection
 */
export function portConnection(port: PortFiles, first: Uint8Array): TtrpcByteStream {
  let pending: Uint8Array | undefined = first;
  let ended = false;
  return {
    read: async (p: Uint8Array): Promise<number | null> => {
      if (ended) return null;
      if (pending) {
        const n = Math.min(p.length, pending.length);
        p.set(pending.subarray(0, n));
        pending = n === pending.length ? undefined : pending.subarray(n);
        return n;
      }
      const n = await port.read(p);
      if (n === null || n === 0) {
        ended = true;
        return null;
      }
      return n;
    },
    write: (p: Uint8Array): Promise<number> => ended ? Promise.resolve(p.length) : port.write(p),
    // The descriptors outlive the connection: the next host connection uses them again.
    close: () => {
      ended = true;
    },
  };
}
