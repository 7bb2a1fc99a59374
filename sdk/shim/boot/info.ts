/**
 * The `-info` action: containerd 2.x runs `<shim> -info` with the runtime options (an `Any`,
 * or nothing) on stdin and reads one protobuf `containerd.types.RuntimeInfo` from stdout, e.g.
 * for its introspection service's `PluginInfo` and so for CRI's runtime handler features. Like
 * `start`, a short-lived action: it loads no server, no Linux mechanics.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { decodeAny, encodeRuntimeInfo } from "../../../proto/wire.ts";
import { resolveOptions } from "../options.ts";
import type { Shim } from "../shim.ts";

/**
 * Builds `-info`'s answer: the shim's name and version, the options it was given (echoed, as
 * containerd's runc shim does) and the runtime's features from {@link Shim.features}.
 *
 * @param shim the runtime definition
 * @param stdin what containerd wrote: a marshalled options `Any`, or nothing
 * @param warn where a features failure is reported (containerd shows stderr only on failure)
 * @returns the marshalled `RuntimeInfo`; throws when the options do not decode or are of a type
 *   the shim does not accept
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { fromBinary } from "@bufbuild/protobuf";
 * import { RuntimeInfoSchema } from "@skiff/shim/proto";
 * import type { ContainerRuntime } from "@skiff/shim";
 * import { Shim } from "@skiff/shim";
 * import { runInfo } from "./info.ts";
 *
 * class MyShim extends Shim<{ binary: string }> {
 *   readonly runtimeName = "io.containerd.my.v1";
 *   readonly options = { defaults: () => ({ binary: "my-runtime" }) };
 *   runtime(): ContainerRuntime {
 *     throw new Error("-info runs no container");
 *   }
 * }
 * // containerd wrote no options on stdin; the shim prints these bytes on stdout.
 * const info = fromBinary(RuntimeInfoSchema, await runInfo(new MyShim(), new Uint8Array()));
 * strictEqual(info.name, "io.containerd.my.v1");
 * strictEqual(info.features, undefined); // the base Shim reports no features
 * ```
 */
export async function runInfo<T extends object>(
  shim: Shim<T>,
  stdin: Uint8Array,
  warn: (message: string) => void = (m) => console.error(m),
): Promise<Uint8Array> {
  let given: Any | undefined;
  if (stdin.length > 0) {
    try {
      given = decodeAny(stdin);
    } catch (e) {
      throw new Error(`runtime options on stdin are not a protobuf Any: ${(e as Error).message}`);
    }
  }
  const { options } = resolveOptions(shim.options, given, undefined, shim.runtimeName);
  let features: Any | undefined;
  try {
    features = await shim.features?.(options);
  } catch (e) {
    // One line: a runtime without `features` may print its whole usage text.
    warn(`${shim.runtimeName} -info: no features: ${(e as Error).message.split("\n")[0]}`);
  }
  return encodeRuntimeInfo({
    name: shim.runtimeName,
    version: shim.version,
    ...(given && given.typeUrl !== "" ? { options: given } : {}),
    ...(features ? { features } : {}),
  });
}
