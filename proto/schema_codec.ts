/**
 * A {@link MessageCodec} from a generated protobuf-es schema, for a runtime's own options type.
 * It loads protobuf-es's reflection, so it lives outside the light `@skiff/shim` entry: import
 * it from `@skiff/shim/proto`, where the generated schemas are. `MessageCodec` is declared here,
 * in the bottom layer, and re-exported by `sdk/shim/options.ts`.
 *
 * @module
 */

import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";

/**
 * How to decode one protobuf message type from its bytes. `RUNC_OPTIONS_CODEC` (`@skiff/shim`)
 * is a wire-level one; {@link schemaCodec} makes one from a generated schema (it loads
 * protobuf-es's reflection, so the short-lived actions then load it too).
 */
export interface MessageCodec<M> {
  /** The message's full type name, matched against the `Any`'s bare type URL. */
  readonly typeName: string;
  /** Decodes the message; throws when the bytes are not one. */
  decode(bytes: Uint8Array): M;
}

/**
 * Wraps a generated schema as the codec `optionsMessage` takes.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { schemaCodec } from "@skiff/shim/proto";
 * import { OptionsSchema } from "./gen/containerd/runc/v1/oci_pb.ts";
 * const codec = schemaCodec(OptionsSchema);
 * strictEqual(codec.decode(new Uint8Array([0x32, 1, 0x78])).binaryName, "x");
 * ```
 */
export function schemaCodec<Desc extends DescMessage>(
  schema: Desc,
): MessageCodec<MessageShape<Desc>> {
  return { typeName: schema.typeName, decode: (bytes) => fromBinary(schema, bytes) };
}
