/**
 * ttrpc socket addresses as containerd writes them.
 *
 * @module
 */

import { Code, statusError } from "./status_error.ts";

/**
 * Returns the filesystem path of a ttrpc unix socket address. Accepts the forms containerd
 * uses: `unix:///path` (shim start output, `address` file), `ttrpc+unix:///path`
 * (`bootstrap.json`, sandbox endpoints; a `?query` is dropped) and a plain `/path`
 * (`TTRPC_ADDRESS`).
 *
 * @param address the address
 * @returns the socket path
 * @throws {ConnectError} `InvalidArgument` for an empty address or another scheme
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { socketPathOf } from "@skiff/shim/ttrpc";
 * strictEqual(socketPathOf("unix:///run/containerd/s/abc"), "/run/containerd/s/abc");
 * strictEqual(socketPathOf("ttrpc+unix:///run/x.sock?streaming_id=1"), "/run/x.sock");
 * strictEqual(socketPathOf("/run/containerd/containerd.sock.ttrpc"), "/run/containerd/containerd.sock.ttrpc");
 * ```
 */
export function socketPathOf(address: string): string {
  let path = address.trim();
  for (const scheme of ["ttrpc+unix://", "unix://"]) {
    if (path.startsWith(scheme)) {
      path = path.slice(scheme.length);
      const q = path.indexOf("?");
      if (q >= 0) path = path.slice(0, q);
      break;
    }
  }
  if (path.includes("://")) {
    throw statusError(
      `unsupported ttrpc address "${address}": only unix sockets are supported`,
      Code.InvalidArgument,
    );
  }
  if (path === "") {
    throw statusError(`empty ttrpc address "${address}"`, Code.InvalidArgument);
  }
  return path;
}
