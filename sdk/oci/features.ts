/**
 * The OCI runtime `features` document (runtime-spec `features.md`, what `runc features` prints)
 * and how it travels in a shim's `RuntimeInfo.features`: containerd's clients (CRI, the task
 * manager's idmap check) unpack that `Any` into runtime-spec's Go `features.Features` type, which
 * containerd registers under {@link OCI_FEATURES_TYPE_URL} and encodes as JSON (it is not a
 * protobuf message).
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";

/**
 * The type URL containerd registers for runtime-spec's `features.Features` (prefix
 * `types.containerd.io`, spec major version 1); the value is the document's JSON.
 */
export const OCI_FEATURES_TYPE_URL: string =
  "types.containerd.io/opencontainers/runtime-spec/1/features/Features";

/**
 * An OCI runtime's features document. Only the fields containerd reads are typed; the rest is
 * kept as the runtime printed it.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OciFeatures } from "@skiff/shim/oci";
 * const f: OciFeatures = { ociVersionMin: "1.0.0", mountOptions: ["ro", "rro"] };
 * strictEqual(f.mountOptions?.includes("rro"), true);
 * ```
 */
export interface OciFeatures {
  /** Oldest spec version the runtime implements. */
  ociVersionMin?: string;
  /** Newest spec version the runtime implements. */
  ociVersionMax?: string;
  /** Known hook names. */
  hooks?: string[];
  /** Known mount options; `rro` means recursive read-only mounts (CRI reports them). */
  mountOptions?: string[];
  /** Linux specifics: namespaces, capabilities, cgroup, seccomp, mountExtensions (idmap)... */
  linux?: Record<string, unknown>;
  /** The runtime's own annotations (its version, commit...). */
  annotations?: Record<string, string>;
  /** Any other field of the document. */
  [field: string]: unknown;
}

/**
 * Packs a features document the way containerd's Go shim does, for `RuntimeInfo.features`.
 *
 * @param features the document, e.g. from {@link OciRuntimeCli.features}
 * @returns an `Any` with {@link OCI_FEATURES_TYPE_URL} and the JSON bytes
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { OCI_FEATURES_TYPE_URL, ociFeaturesAny } from "@skiff/shim/oci";
 * const any = ociFeaturesAny({ mountOptions: ["rro"] });
 * strictEqual(any.typeUrl, OCI_FEATURES_TYPE_URL);
 * ```
 */
export function ociFeaturesAny(features: OciFeatures): Any {
  // A plain object of the generated shape: `-info` must not load protobuf-es's reflection.
  return {
    $typeName: "google.protobuf.Any",
    typeUrl: OCI_FEATURES_TYPE_URL,
    value: new TextEncoder().encode(JSON.stringify(features)),
  };
}

/**
 * Unpacks `RuntimeInfo.features` when it is an OCI features document.
 *
 * @param any the `Any` a shim returned
 * @returns the document; throws when the type URL is another one or the JSON is not an object
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeOciFeatures, ociFeaturesAny } from "@skiff/shim/oci";
 * const back = decodeOciFeatures(ociFeaturesAny({ hooks: ["prestart"] }));
 * strictEqual(back.hooks?.[0], "prestart");
 * ```
 */
export function decodeOciFeatures(any: Any): OciFeatures {
  if (any.typeUrl !== OCI_FEATURES_TYPE_URL) {
    throw new Error(
      `features type URL is "${any.typeUrl}", expected "${OCI_FEATURES_TYPE_URL}"`,
    );
  }
  return parseOciFeatures(new TextDecoder().decode(any.value));
}

/**
 * Parses a runtime's `features` output.
 *
 * @param text the JSON the runtime printed
 * @returns the document; throws naming the text when it is not a JSON object
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseOciFeatures } from "@skiff/shim/oci";
 * strictEqual(parseOciFeatures('{"mountOptions":["rro"]}').mountOptions?.[0], "rro");
 * ```
 */
export function parseOciFeatures(text: string): OciFeatures {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(
      `features document is not JSON (${(e as Error).message}): ${
        JSON.stringify(text.slice(0, 200))
      }`,
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(
      `features document is not a JSON object: ${JSON.stringify(text.slice(0, 200))}`,
    );
  }
  return value as OciFeatures;
}
