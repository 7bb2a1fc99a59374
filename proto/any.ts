/**
 * `Any` packing with the bare type names containerd expects.
 *
 * @module
 */

import { create, type DescMessage, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";

/**
 * Packs a message into an `Any` with the bare type name containerd expects.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { packAny } from "@skiff/shim/proto";
 * import { TaskOOMSchema } from "@skiff/shim/proto";
 * const any = packAny(TaskOOMSchema, { containerId: "c1" });
 * strictEqual(any.typeUrl, "containerd.events.TaskOOM");
 * ```
 */
export function packAny<Desc extends DescMessage>(
  schema: Desc,
  message: MessageInitShape<Desc>,
): Any {
  return create(AnySchema, {
    typeUrl: schema.typeName,
    value: toBinary(schema, create(schema, message)),
  });
}
