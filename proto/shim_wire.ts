/**
 * Typed wire codecs for every message the shim server decodes or encodes, from the tables
 * generated into `gen/wire/shim_wire.ts` (see `wire_table.ts`). The server uses these instead of
 * protobuf-es's generated schemas, so a cold server evaluates no descriptor.
 *
 * @module
 */

import { SHIM_WIRE_TABLES, type ShimWireTypes } from "./gen/wire/shim_wire.ts";
import { type WireCodec, type WireInit, WireRegistry } from "./wire_table.ts";

export {
  EVENTS_SERVICE,
  type ShimWireTypes,
  TASK_SERVICE,
  TASK_STATUS,
} from "./gen/wire/shim_wire.ts";

let registry: WireRegistry | undefined;

/** The tables' registry, built on first use. */
function tables(): WireRegistry {
  return registry ??= new WireRegistry(SHIM_WIRE_TABLES);
}

/**
 * The codec of one of the server's messages.
 *
 * @param typeName the message's full type name
 * @returns its codec, typed as protobuf-es's message type
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimCodec } from "@skiff/shim/proto";
 * const exit = shimCodec("containerd.events.TaskExit");
 * strictEqual(exit.decode(exit.encode({ containerId: "c1", exitStatus: 7 })).exitStatus, 7);
 * ```
 */
export function shimCodec<K extends keyof ShimWireTypes>(
  typeName: K,
): WireCodec<ShimWireTypes[K]> {
  return tables().codec<ShimWireTypes[K]>(typeName);
}

/**
 * One of the server's messages with every field at its default, then `init`'s (protobuf-es's
 * `create`, shallow).
 *
 * @param typeName the message's full type name
 * @param init fields to set
 * @returns the message
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createShimMessage } from "./shim_wire.ts";
 * strictEqual(createShimMessage("io.containerd.cgroups.v2.PidsStat", { current: 3n }).limit, 0n);
 * ```
 */
export function createShimMessage<K extends keyof ShimWireTypes>(
  typeName: K,
  init: Partial<ShimWireTypes[K]> = {},
): ShimWireTypes[K] {
  return tables().create<ShimWireTypes[K]>(typeName, init);
}

/**
 * The fields of one of the server's messages, with their `.proto` and local names.
 *
 * @param typeName the message's full type name
 * @returns each field's two names
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimFieldNames } from "./shim_wire.ts";
 * const f = shimFieldNames("io.containerd.cgroups.v1.MemoryStat").find((f) => f.name === "total_rss");
 * strictEqual(f?.localName, "totalRss");
 * ```
 */
export function shimFieldNames(
  typeName: keyof ShimWireTypes,
): { name: string; localName: string }[] {
  return tables().fieldNames(typeName);
}

/**
 * A `google.protobuf.Timestamp` of a date, as protobuf-es's `timestampFromDate` makes it.
 *
 * @param date the instant
 * @returns seconds and nanoseconds since the epoch
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { timestampOf } from "@skiff/shim/proto";
 * strictEqual(timestampOf(new Date(1500)).nanos, 500_000_000);
 * ```
 */
export function timestampOf(date: Date): ShimWireTypes["google.protobuf.Timestamp"] {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: BigInt(seconds),
    nanos: (ms - seconds * 1000) * 1_000_000,
  };
}

/**
 * Packs one of the server's messages into an `Any` with the bare type name containerd expects
 * (containerd 1.6 matches the exact string; no `type.googleapis.com/` prefix).
 *
 * @param typeName the message's full type name
 * @param message its fields
 * @returns the `Any`
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { packShimAny } from "@skiff/shim/proto";
 * strictEqual(packShimAny("containerd.events.TaskOOM", { containerId: "c1" }).typeUrl, "containerd.events.TaskOOM");
 * ```
 */
export function packShimAny<K extends keyof ShimWireTypes>(
  typeName: K,
  message: WireInit<ShimWireTypes[K]>,
): ShimWireTypes["google.protobuf.Any"] {
  return {
    $typeName: "google.protobuf.Any",
    typeUrl: typeName,
    value: shimCodec(typeName).encode(message),
  };
}
