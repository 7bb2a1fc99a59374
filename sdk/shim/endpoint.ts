/**
 * The task-API endpoint: where a shim's Task API is served, with which protocol and version.
 *
 * This is a generic concept owned by the {@link Shim} base class. It is what `start` advertises
 * (bootstrap answer, `address` file), what a sandbox shim serves for the containers of its pod,
 * and what containerd hands over when it routes a container to a sandbox
 * (`CreateTaskRequest.task_api_address/version`, or the deprecated runc options fields 12/13).
 * Runtime hooks never see it.
 *
 * @module
 */

/** Wire protocol of a task-API endpoint. */
export type TaskApiProtocol = "ttrpc" | "grpc";

/** Task API version: 2 (`containerd.task.v2.Task`) or 3 (`containerd.task.v3.Task`). */
export type TaskApiVersion = 2 | 3;

/** Where and how a Task API is served. */
export interface TaskApiEndpoint {
  /** Transport address, e.g. `unix:///run/containerd/s/<hash>` or `vsock://3:1024`. */
  readonly address: string;
  /** Task API version. */
  readonly version: TaskApiVersion;
  /** Wire protocol. */
  readonly protocol: TaskApiProtocol;
}

/**
 * Parses an endpoint URL as containerd writes it: `ttrpc+unix:///path`, `grpc+vsock://cid:port`,
 * or a bare transport address (`unix:///path`, taken as ttrpc).
 *
 * @param url the endpoint URL
 * @param version the version that travels beside it (0 or absent means 2)
 * @returns the endpoint; throws a TypeError naming the value when it is not an endpoint
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseTaskApiEndpoint } from "@skiff/shim/seam";
 * const ep = parseTaskApiEndpoint("ttrpc+unix:///run/containerd/s/abc", 3);
 * strictEqual(ep.protocol, "ttrpc");
 * strictEqual(ep.address, "unix:///run/containerd/s/abc");
 * ```
 */
export function parseTaskApiEndpoint(url: string, version?: number): TaskApiEndpoint {
  const m = /^(?:(ttrpc|grpc)\+)?([a-z]+):\/\/(.+)$/.exec(url.trim());
  if (!m) {
    throw new TypeError(`invalid task API endpoint "${url}": expected proto+scheme://address`);
  }
  const [, proto, scheme, rest] = m;
  if (!["unix", "vsock", "hvsock"].includes(scheme)) {
    throw new TypeError(`invalid task API endpoint "${url}": unsupported transport "${scheme}"`);
  }
  if (scheme === "unix" && !rest.startsWith("/")) {
    throw new TypeError(`invalid task API endpoint "${url}": unix path must be absolute`);
  }
  const v = version === undefined || version === 0 ? 2 : version;
  if (v !== 2 && v !== 3) {
    throw new TypeError(`invalid task API version ${version} for "${url}": expected 2 or 3`);
  }
  return {
    address: `${scheme}://${rest}`,
    version: v,
    protocol: (proto ?? "ttrpc") as TaskApiProtocol,
  };
}

/**
 * Prints an endpoint as containerd's sandbox API does: `<protocol>+<address>`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { formatTaskApiEndpoint } from "@skiff/shim/seam";
 * const url = formatTaskApiEndpoint({ address: "unix:///s/a", version: 3, protocol: "ttrpc" });
 * strictEqual(url, "ttrpc+unix:///s/a");
 * ```
 */
export function formatTaskApiEndpoint(ep: TaskApiEndpoint): string {
  return `${ep.protocol}+${ep.address}`;
}

/**
 * The JSON form containerd 1.7+ accepts from `start` and writes to `bootstrap.json`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { endpointJson } from "./endpoint.ts";
 * const j = endpointJson({ address: "unix:///s/a", version: 2, protocol: "ttrpc" });
 * strictEqual(j, '{"version":2,"address":"unix:///s/a","protocol":"ttrpc"}');
 * ```
 */
export function endpointJson(ep: TaskApiEndpoint): string {
  return JSON.stringify({ version: ep.version, address: ep.address, protocol: ep.protocol });
}
