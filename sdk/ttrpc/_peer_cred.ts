/**
 * Internal: SO_PEERCRED for connections accepted by a Deno unix listener.
 *
 * Deno exposes no file descriptor for an accepted `Deno.UnixConn`, so the descriptor is found
 * indirectly: the kernel lists every server-side socket of a listener in /proc/net/unix with the
 * listener's path, and /proc/self/fd maps socket inodes to our descriptors. Called right after
 * each `accept()` (and before the next one), exactly one socket of that listener is new, which
 * is the connection just accepted. Anything else (zero or several candidates, no FFI) is
 * reported as unknown so that the caller can fail closed.
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
/** In /proc/net/unix, the flag of a listening socket (__SO_ACCEPTCON). */
const ACCEPTCON = 0x10000;

type Libc = Deno.DynamicLibrary<{
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"]; result: "i32" };
  geteuid: { parameters: []; result: "u32" };
  getegid: { parameters: []; result: "u32" };
}>;

let libc: Libc | undefined;

function openLibc(): Libc {
  // Opened lazily: only servers that ask for the peer check need --allow-ffi.
  libc ??= Deno.dlopen("libc.so.6", {
    getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
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

/** Inodes of the server-side sockets of the listener bound to `path`. */
function acceptedInodes(path: string): Set<number> {
  const out = new Set<number>();
  const lines = Deno.readTextFileSync("/proc/net/unix").split("\n");
  for (let i = 1; i < lines.length; i++) {
    // Num RefCount Protocol Flags Type St Inode Path
    const cols = lines[i].trim().split(/\s+/);
    if (cols.length < 8 || cols.slice(7).join(" ") !== path) continue;
    if ((parseInt(cols[3], 16) & ACCEPTCON) !== 0) continue;
    out.add(Number(cols[6]));
  }
  return out;
}

/** Maps socket inodes to our descriptors. */
function socketFds(): Map<number, number> {
  const out = new Map<number, number>();
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    let target: string;
    try {
      target = Deno.readLinkSync(`/proc/self/fd/${entry.name}`);
    } catch {
      continue; // closed meanwhile
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) out.set(Number(m[1]), Number(entry.name));
  }
  return out;
}

/**
 * Tracks which sockets of one listener are already attributed to connections, so the one
 * accepted last can be identified.
 */
export class PeerCredentialResolver {
  #path: string;
  #known = new Set<number>();

  constructor(listenerPath: string) {
    this.#path = listenerPath;
  }

  /**
   * Credentials of the connection accepted last. Must be called after each accept and before
   * the next. Returns the socket inode too so that {@linkcode release} can forget it.
   */
  resolveLatest(): { inode: number; creds: PeerCredentials } {
    const lib = openLibc();
    const fds = socketFds();
    const fresh: number[] = [];
    for (const inode of acceptedInodes(this.#path)) {
      if (fds.has(inode) && !this.#known.has(inode)) fresh.push(inode);
    }
    // Forget inodes whose sockets are gone (connections closed without release()).
    for (const inode of this.#known) if (!fds.has(inode)) this.#known.delete(inode);
    if (fresh.length !== 1) {
      throw new Error(
        `cannot identify the accepted socket of ${this.#path}: ${fresh.length} candidates`,
      );
    }
    const inode = fresh[0];
    const cred = new Uint8Array(12);
    const len = new Uint32Array([12]);
    const rc = lib.symbols.getsockopt(fds.get(inode)!, SOL_SOCKET, SO_PEERCRED, cred, len);
    if (rc !== 0) throw new Error(`getsockopt(SO_PEERCRED) failed on socket inode ${inode}`);
    this.#known.add(inode);
    // struct ucred { pid_t pid; uid_t uid; gid_t gid; } in native byte order.
    const [pid, uid, gid] = new Uint32Array(cred.buffer);
    return { inode, creds: { pid, uid, gid } };
  }

  /** Forgets a socket once its connection is closed. */
  release(inode: number): void {
    this.#known.delete(inode);
  }
}
