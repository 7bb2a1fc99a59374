/**
 * Internal: SO_PEERCRED for connections accepted by a Deno unix listener.
 *
 * Deno exposes no file descriptor for an accepted `Deno.UnixConn`, so the descriptor is found
 * among our own: an accepted socket is named (getsockname) after its listener's path and is not
 * itself listening (SO_ACCEPTCONN). Called right after each `accept()` (and before the next
 * one), exactly one such socket is new, which is the connection just accepted. Anything else
 * (zero or several candidates, no FFI) is reported as unknown so that the caller can fail
 * closed. Only this process's descriptors are looked at: the node-wide /proc/net/unix grows with
 * every container on the node.
 *
 * @module
 */

/** Credentials of the process on the other end of a unix socket, as of its connect(). */
export interface PeerCredentials {
  pid: number;
  uid: number;
  gid: number;
}

const SOL_SOCKET = 1;
const SO_PEERCRED = 17;
const SO_ACCEPTCONN = 30;
const AF_UNIX = 1;

type Libc = Deno.DynamicLibrary<{
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"]; result: "i32" };
  getsockname: { parameters: ["i32", "buffer", "buffer"]; result: "i32" };
  geteuid: { parameters: []; result: "u32" };
  getegid: { parameters: []; result: "u32" };
}>;

let libc: Libc | undefined;

function openLibc(): Libc {
  // Opened lazily: only servers that ask for the peer check need --allow-ffi.
  libc ??= Deno.dlopen("libc.so.6", {
    getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
    getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
    geteuid: { parameters: [], result: "u32" },
    getegid: { parameters: [], result: "u32" },
  });
  return libc;
}

/** Our effective uid and gid, which a same-user peer must match (as Go's ttrpc checks). */
export function effectiveIds(): { uid: number; gid: number } {
  const lib = openLibc();
  return { uid: lib.symbols.geteuid(), gid: lib.symbols.getegid() };
}

/** True when `fd` is a unix socket named `path` that is not listening: one `accept` gave us. */
/**
 * The path a unix socket is bound to (an accepted socket reports its listener's), or
 * `undefined` for another kind of descriptor or an unnamed socket.
 */
export function socketName(fd: number): string | undefined {
  const addr = new Uint8Array(110);
  const len = new Uint32Array([addr.length]);
  if (openLibc().symbols.getsockname(fd, addr, len) !== 0) return undefined;
  if ((addr[0] | (addr[1] << 8)) !== AF_UNIX) return undefined;
  let end = Math.min(len[0], addr.length);
  while (end > 2 && addr[end - 1] === 0) end--;
  return end > 2 ? new TextDecoder().decode(addr.subarray(2, end)) : undefined;
}

function acceptedFrom(lib: Libc, fd: number, path: Uint8Array): boolean {
  // struct sockaddr_un: sa_family_t (2 bytes), then sun_path[108].
  const addr = new Uint8Array(110);
  const len = new Uint32Array([addr.length]);
  if (lib.symbols.getsockname(fd, addr, len) !== 0) return false; // not a socket
  if ((addr[0] | (addr[1] << 8)) !== AF_UNIX) return false;
  let end = Math.min(len[0], addr.length);
  while (end > 2 && addr[end - 1] === 0) end--;
  if (end - 2 !== path.length || path.some((b, i) => addr[2 + i] !== b)) return false;
  const listening = new Int32Array(1);
  const optLen = new Uint32Array([4]);
  if (lib.symbols.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, listening, optLen) !== 0) return false;
  return listening[0] === 0;
}

/** The inode of socket descriptor `fd`, or undefined when it is no longer one. */
function socketInode(fd: number): number | undefined {
  try {
    const m = /^socket:\[(\d+)\]$/.exec(Deno.readLinkSync(`/proc/self/fd/${fd}`));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined; // closed meanwhile
  }
}

/**
 * Tracks which sockets of one listener are already attributed to connections, so the one
 * accepted last can be identified.
 *
 * Each accept looks only at descriptors not yet attributed (one listing of /proc/self/fd and a
 * getsockname per unknown descriptor), so its cost does not grow with the connections being
 * served: a scan of every socket per accept made a flood of connections slower to accept the
 * more of them were open. When that finds no single candidate (a descriptor number reused
 * before its old connection was released), every descriptor is checked again.
 */
export class PeerCredentialResolver {
  #path: Uint8Array;
  #pathText: string;
  /** fd -> socket inode of the sockets attributed so far. */
  #known = new Map<number, number>();

  constructor(listenerPath: string) {
    this.#path = new TextEncoder().encode(listenerPath);
    this.#pathText = listenerPath;
  }

  /**
   * Credentials of the connection accepted last. Must be called after each accept and before
   * the next. Returns the socket inode too so that {@linkcode release} can forget it, and its
   * descriptor (Deno's, valid while the connection is open), so that no caller has to look for
   * it again.
   */
  resolveLatest(): { inode: number; fd: number; creds: PeerCredentials } {
    const lib = openLibc();
    let fresh = this.#scan(lib, false);
    if (fresh.length !== 1) fresh = this.#scan(lib, true);
    if (fresh.length !== 1) {
      throw new Error(
        `cannot identify the accepted socket of ${this.#pathText}: ${fresh.length} candidates`,
      );
    }
    const { fd, inode } = fresh[0];
    const cred = new Uint8Array(12);
    const len = new Uint32Array([12]);
    const rc = lib.symbols.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, len);
    if (rc !== 0) throw new Error(`getsockopt(SO_PEERCRED) failed on socket inode ${inode}`);
    this.#known.set(fd, inode);
    // struct ucred { pid_t pid; uid_t uid; gid_t gid; } in native byte order.
    const [pid, uid, gid] = new Uint32Array(cred.buffer);
    return { inode, fd, creds: { pid, uid, gid } };
  }

  /**
   * Attributes a socket this process did not accept itself (one inherited across a live
   * upgrade), so the next accept is still told apart; returns its peer's credentials.
   *
   * @param fd the accepted socket's descriptor
   */
  adopt(fd: number): { inode: number; creds: PeerCredentials } {
    const inode = socketInode(fd);
    if (inode === undefined) throw new Error(`descriptor ${fd} is not a socket`);
    const cred = new Uint8Array(12);
    const len = new Uint32Array([12]);
    if (openLibc().symbols.getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, len) !== 0) {
      throw new Error(`getsockopt(SO_PEERCRED) failed on descriptor ${fd} (socket inode ${inode})`);
    }
    this.#known.set(fd, inode);
    const [pid, uid, gid] = new Uint32Array(cred.buffer);
    return { inode, creds: { pid, uid, gid } };
  }

  /** Forgets a socket once its connection is closed. */
  release(inode: number): void {
    for (const [fd, known] of this.#known) {
      if (known === inode) this.#known.delete(fd);
    }
  }

  /**
   * Accepted sockets of this listener not attributed yet. `full` re-checks the attributed
   * descriptors too, forgetting those whose socket is gone or was replaced.
   */
  #scan(lib: Libc, full: boolean): { fd: number; inode: number }[] {
    const fresh: { fd: number; inode: number }[] = [];
    const open = new Set<number>();
    const knownInodes = new Set(this.#known.values());
    for (const entry of Deno.readDirSync("/proc/self/fd")) {
      const fd = Number(entry.name);
      const known = this.#known.get(fd);
      if (!full && known !== undefined) continue;
      if (!acceptedFrom(lib, fd, this.#path)) continue;
      const inode = socketInode(fd);
      if (inode === undefined) continue;
      if (known === inode) {
        open.add(fd);
        continue;
      }
      if (knownInodes.has(inode)) {
        // Another descriptor of an attributed socket (the server took a duplicate of it).
        this.#known.set(fd, inode);
        open.add(fd);
        continue;
      }
      fresh.push({ fd, inode });
    }
    if (full) {
      for (const fd of this.#known.keys()) if (!open.has(fd)) this.#known.delete(fd);
    }
    return fresh;
  }
}
