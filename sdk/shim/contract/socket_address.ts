/**
 * containerd's convention for a shim's socket address:
 * `unix://<socket dir>/<hex sha256 of filepath.Join(containerd address, namespace, group)>`.
 * Using the same convention as the Go shims means `ctr shim` and containerd's own tooling
 * find a skiff shim where they expect one.
 *
 * @module
 */

import { sha256Hex } from "./sha256.ts";
import { cleanPath } from "../../linux/clean_path.ts";

/**
 * Written by `start`: the address of the server that serves the container, one line
 * (`unix://…`), as containerd's shims do. `delete` reads it to find a dead server's socket; a
 * launcher reads it to see that the server's socket is gone.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ADDRESS_FILE } from "./socket_address.ts";
 * strictEqual(ADDRESS_FILE, "address");
 * ```
 */
export const ADDRESS_FILE = "address";

/** containerd's default shim socket directory for root. */
export const DEFAULT_SOCKET_DIR = "/run/containerd/s";

/** Unix socket paths longer than this do not fit in `sockaddr_un` (Go shims use 106). */
export const SOCKET_PATH_LIMIT = 106;

/**
 * Computes the socket address a shim for `group` listens on.
 *
 * @param containerdAddress the `-address` flag (containerd's gRPC socket)
 * @param namespace the `-namespace` flag
 * @param group the grouping key (the container id, or a pod/group annotation)
 * @param socketDir where sockets live; containerd 2.3+ passes `BootstrapParams.socket_dir`
 * @returns a `unix://` address
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimSocketAddress } from "./socket_address.ts";
 * const addr = shimSocketAddress("/run/containerd/containerd.sock", "default", "c1");
 * strictEqual(addr.startsWith("unix:///run/containerd/s/"), true);
 * ```
 */
export function shimSocketAddress(
  containerdAddress: string,
  namespace: string,
  group: string,
  socketDir: string = DEFAULT_SOCKET_DIR,
): string {
  const key = cleanPath([containerdAddress, namespace, group].filter((s) => s !== "").join("/"));
  const digest = sha256Hex(key);
  const path = `${cleanPath(socketDir)}/${digest}`;
  if (path.length > SOCKET_PATH_LIMIT) {
    throw new RangeError(
      `shim socket path "${path}" is ${path.length} bytes, over the limit of ${SOCKET_PATH_LIMIT}`,
    );
  }
  return `unix://${path}`;
}

/**
 * Strips `unix://` (or `ttrpc+unix://`) from an address, leaving the socket path.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { socketPath } from "./socket_address.ts";
 * strictEqual(socketPath("unix:///run/x"), "/run/x");
 * ```
 */
export function socketPath(address: string): string {
  return address.replace(/^(ttrpc\+|grpc\+)?unix:\/\//, "");
}

/**
 * Suffix of a shim's operations socket (sdk/ops): it sits beside the shim's ttrpc socket, so
 * the node monitor finds every shim by listing the socket directory, and `delete` removes a
 * dead server's along with its ttrpc socket.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { OPS_SOCKET_SUFFIX } from "@skiff/shim/ops";
 * strictEqual(OPS_SOCKET_SUFFIX, ".ops");
 * ```
 */
export const OPS_SOCKET_SUFFIX = ".ops";

/**
 * The operations socket of a shim whose ttrpc socket is `ttrpcSocket`.
 *
 * @param ttrpcSocket path (or `unix://` address) of the ttrpc socket
 * @returns `<path>.ops`
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { opsSocketPath } from "@skiff/shim/ops";
 * strictEqual(opsSocketPath("unix:///run/containerd/s/ab"), "/run/containerd/s/ab.ops");
 * ```
 */
export function opsSocketPath(ttrpcSocket: string): string {
  return socketPath(ttrpcSocket) + OPS_SOCKET_SUFFIX;
}
