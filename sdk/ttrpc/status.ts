/**
 * Conversion between `google.rpc.Status` (what a ttrpc Response carries) and `ConnectError`-shaped
 * errors, without loading Connect or protobuf-es's reflection (the server's path; see
 * status_error.ts). Codes are the gRPC codes on both sides, so they map one to one.
 *
 * @module
 */

import type { DescMessage } from "@bufbuild/protobuf";
import type { Status } from "../../proto/gen/google/rpc/status_pb.ts";
import { asStatusError, Code, statusError } from "./status_error.ts";

/**
 * Encodes a detail given with its schema: set by `TtrpcServer.register` and by status_connect.ts,
 * which load protobuf-es anyway (only Connect code makes such details). Kept out of this module
 * so the server's wire path never loads protobuf-es's reflection.
 */
let encodeDetail: ((desc: DescMessage, value: unknown) => Uint8Array) | undefined;

/**
 * Sets how details given with a schema are encoded (internal: the ttrpc server's Connect path).
 *
 * @param encode `toBinary(desc, create(desc, value))`
 */
export function setDetailEncoder(
  encode: (desc: DescMessage, value: unknown) => Uint8Array,
): void {
  encodeDetail = encode;
}

/**
 * Converts anything a handler threw into the `google.rpc.Status` to send, without loading
 * Connect or protobuf-es (the server's; `statusFromError` in status_connect.ts is the public one).
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
 * import { statusOf } from "./status.ts";
 * const s = statusOf(new ConnectError("task x not found", Code.NotFound));
 * strictEqual(s.code, 5);
 * strictEqual(s.message, "task x not found");
 * strictEqual(statusOf(new Error("boom")).code, 2);
 * ```
 */
export function statusOf(reason: unknown): Status {
  const err = asStatusError(reason);
  const details: Status["details"] = [];
  for (const d of err.details) {
    if ("desc" in d) {
      // Only a Connect implementation's handler makes these, and registering one set the encoder.
      if (!encodeDetail) continue;
      details.push({
        $typeName: "google.protobuf.Any",
        typeUrl: d.desc.typeName,
        value: encodeDetail(d.desc, d.value),
      });
    } else {
      details.push({ $typeName: "google.protobuf.Any", typeUrl: d.type, value: d.value });
    }
  }
  // Code.OK does not exist in Connect; a ConnectError always carries a failure code. A plain
  // object of the message's shape: the server encodes it with its wire codecs.
  return { $typeName: "google.rpc.Status", code: err.code, message: err.rawMessage, details };
}

/**
 * A non-OK `google.rpc.Status` as a `ConnectError`-shaped error, without loading Connect (the
 * wire client's; `errorFromStatus` makes Connect's own, with `findDetails`). Codes outside 1..16
 * become `Unknown`; details are kept by type name.
 *
 * @param status the received status
 * @returns the error to throw
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { statusErrorOf } from "./status.ts";
 * const err = statusErrorOf({ $typeName: "google.rpc.Status", code: 5, message: "gone", details: [] });
 * strictEqual(err.code, 5);
 * ```
 */
export function statusErrorOf(status: Status): ReturnType<typeof statusError> {
  const code = status.code >= Code.Canceled && status.code <= Code.Unauthenticated
    ? status.code as typeof Code[keyof typeof Code]
    : Code.Unknown;
  const err = statusError(status.message, code);
  for (const any of status.details) {
    (err.details as unknown[]).push({
      type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1),
      value: any.value,
    });
  }
  return err;
}
