/**
 * Conversion between `google.rpc.Status` (what a ttrpc Response carries) and Connect's own
 * `ConnectError`, details included: for Connect's clients over `createTtrpcTransport`, where
 * `findDetails` must work. (The server converts with status.ts, which loads neither.)
 *
 * @module
 */

import { create, type DescMessage, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { Status } from "../../proto/gen/google/rpc/status_pb.ts";
import { setDetailEncoder, statusErrorOf, statusOf } from "./status.ts";

// Details given with a schema: this module loads protobuf-es anyway (the server's own path,
// status.ts, leaves them out unless a Connect service was registered).
setDetailEncoder((desc, value) =>
  toBinary(desc, create(desc as DescMessage, value as MessageInitShape<DescMessage>))
);

/**
 * Converts anything a handler threw into the `google.rpc.Status` to send.
 *
 * A `ConnectError` keeps its code, its message without the `[code]` prefix, and its details
 * (packed with bare type names, as containerd's typeurl expects). Any other value becomes
 * `Code.Unknown` with its message (or its string form), like Go ttrpc does for plain errors.
 *
 * @param reason the thrown value
 * @returns a status with a non-zero code
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code, ConnectError } from "@connectrpc/connect";
 * import { statusFromError } from "@skiff/shim/ttrpc";
 * const s = statusFromError(new ConnectError("task x not found", Code.NotFound));
 * strictEqual(s.code, 5);
 * strictEqual(s.message, "task x not found");
 * strictEqual(statusFromError(new Error("boom")).code, 2);
 * ```
 */
export function statusFromError(reason: unknown): Status {
  return statusOf(ConnectError.from(reason));
}

/**
 * Converts a non-OK `google.rpc.Status` received in a ttrpc Response into a `ConnectError`.
 * Codes outside 1..16 become `Code.Unknown`; details are kept so `findDetails()` works.
 * Callers must treat an absent status or code 0 as success before calling this.
 *
 * @param status the received status
 * @returns the error to throw to the caller
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { create } from "@bufbuild/protobuf";
 * import { Code } from "@connectrpc/connect";
 * import { StatusSchema } from "../../proto/gen/google/rpc/status_pb.ts";
 * import { errorFromStatus } from "@skiff/shim/ttrpc";
 * const err = errorFromStatus(create(StatusSchema, { code: 12, message: "service x" }));
 * strictEqual(err.code, Code.Unimplemented);
 * strictEqual(err.rawMessage, "service x");
 * ```
 */
export function errorFromStatus(status: Status): ConnectError {
  // The same code and details as the wire client's error, in Connect's own class.
  const light = statusErrorOf(status);
  const err = new ConnectError(light.rawMessage, light.code);
  err.details.push(...light.details);
  return err;
}
