/**
 * ttrpc connections served from descriptors the server owns: the ones a live upgrade inherits,
 * and every connection the server accepts, taken out of Deno at once. A `Deno.Conn` keeps a
 * read pending on the runtime's side, which can take a request off the socket while the old
 * code is re-executing; bytes read that way would be lost to the next code. An {@link FdStream}
 * reads only when asked, on the JS thread.
 *
 * @module
 */

import type { TtrpcByteStream } from "../../ttrpc/server.ts";
import { FdStream } from "../../linux/fd_stream.ts";
import { descriptorsByLink, dupCloseOnExec } from "../../linux/descriptors.ts";

/**
 * A ttrpc byte stream over a socket descriptor this process owns (closed with it).
 *
 * @param fd the connection's descriptor
 * @returns the stream
 * @example Usage
 * ```ts ignore
 * void server.serveInherited(fdConn(fd), fd);
 * ```
 */
export function fdConn(fd: number): TtrpcByteStream {
  const s = new FdStream(fd, `ttrpc connection (descriptor ${fd})`);
  return {
    read: (b) => s.read(b as Uint8Array<ArrayBuffer>),
    write: async (b) => {
      await s.write(b);
      return b.length;
    },
    close: () => void s.close(),
  };
}

/**
 * `TtrpcServerOptions.takeConnection`: an accepted connection served from a descriptor of its
 * own (a duplicate of Deno's, from which Deno never reads). Deno's stays open until the stream
 * is closed: its close shuts the socket down for every descriptor (EPIPE on ours); across a
 * live upgrade it is close-on-exec, which closes it without a shutdown.
 *
 * @param conn the connection Deno accepted
 * @param inode its socket's inode (the peer check found it)
 * @param fd its descriptor, when the peer check found it too (else looked up by `inode`: a scan
 *   of every descriptor, which grows with what the process serves)
 * @returns the stream to serve instead
 * @throws {Error} when no descriptor of this process is that socket
 * @example Usage
 * ```ts ignore
 * const server = new TtrpcServer({ requireSameUser: true, takeConnection: takeAccepted });
 * ```
 */
export function takeAccepted(conn: Deno.Conn, inode: number, fd?: number): TtrpcByteStream {
  const found = fd !== undefined && fd >= 0 ? fd : descriptorsByLink().get(`socket:[${inode}]`);
  if (found === undefined) throw new Error(`no descriptor for accepted socket inode ${inode}`);
  const stream = fdConn(dupCloseOnExec(found));
  return {
    read: stream.read,
    write: stream.write,
    close: () => {
      stream.close();
      try {
        conn.close();
      } catch { /* closed already */ }
    },
  };
}
