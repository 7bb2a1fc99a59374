/**
 * A {@link MessageCodec} from a generated protobuf-es schema, for a runtime's own options type.
 * It loads protobuf-es's reflection, so it lives outside the light `@skiff/shim` entry: import
 * it from `@skiff/shim/proto`, where the generated schemas are.
 *
 * @module
 */

import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";
import type { MessageCodec } from "./options.ts";

/**
 * Wraps a generated schema as the codec `optionsMessage` takes.
 *
 * @example Usage
 * ```ts
 * import { schemaCodec } from "./schema_codec.ts";
 * import { OptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
 * const codec = schemaCodec(OptionsSchema);
 * console.assert(codec.decode(new Uint8Array([0x32, 1, 0x78])).binaryName === "x");
 * ```
 */
export function schemaCodec<Desc extends DescMessage>(
  schema: Desc,
): MessageCodec<MessageShape<Desc>> {
  return { typeName: schema.typeName, decode: (bytes) => fromBinary(schema, bytes) };
}
