/**
 * The `RuntimeOptions` hook, and the one place where option carriers are told apart.
 *
 * This file is the seam between what is generic and what is runtime-specific. containerd
 * once put the task-API endpoint (address, version) into runc's own options
 * (`containerd.runc.v1.Options` fields 12/13, containerd PR #9736); for years it then sent
 * runc options that carried *only* those two fields to every runtime, and non-runc shims lost
 * their options or failed to start (PR #12986, fixed by PR #13360 which moved the fields to
 * `CreateTaskRequest`). skiff decides here, generically:
 *
 * - runc options whose only set fields are 12/13 are an **endpoint carrier**, never options:
 *   the endpoint is taken, and the runtime keeps the options it already had;
 * - endpoint fields are removed before any runtime hook sees a runc options message, and a
 *   `RuntimeOptions` type cannot declare them (see {@link EndpointFree});
 * - runc options with real runc fields reach a runtime that accepts them; a runtime that does
 *   not accept them keeps its options and a warning is logged, instead of failing the container;
 * - `runtimeoptions.v1.Options` (CRI's generic carrier) is decoded from TOML (`config_body`,
 *   else the file at `config_path`) and handed to the hook's `fromToml`;
 * - the runtime's own message types are decoded with its schema;
 * - anything else is InvalidArgument, naming the accepted types.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import { parse as parseToml } from "smol-toml";
import type { Options as RuncOptions } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { decodeCriRuntimeOptions, decodeRuncOptions } from "../../proto/wire.ts";
import type { MessageCodec } from "../../proto/schema_codec.ts";
import { parseTaskApiEndpoint, type TaskApiEndpoint } from "./endpoint.ts";
// Light errors and wire-level decoders: `-info` resolves options without Connect or
// protobuf-es's reflection (docs/architecture.md, "What each process loads").
import { Code, statusError } from "../ttrpc/status_error.ts";

/** The bare type name of containerd's runc options. */
export const RUNC_OPTIONS_TYPE = "containerd.runc.v1.Options";
/** The bare type name of CRI's generic runtime options. */
export const CRI_RUNTIME_OPTIONS_TYPE = "runtimeoptions.v1.Options";

/** Keys that name the task-API endpoint. */
export type EndpointKey =
  | "taskApiAddress"
  | "taskApiVersion"
  | "task_api_address"
  | "task_api_version";

/**
 * `T` when it has no endpoint field; otherwise a type that names the offending fields, so an
 * options type that declares the endpoint does not compile. The endpoint is generic and
 * belongs to the base class.
 */
export type EndpointFree<T> = [Extract<keyof T, EndpointKey>] extends [never] ? T
  : { "RuntimeOptions cannot declare task-API endpoint fields": Extract<keyof T, EndpointKey> };

export type { MessageCodec };

/**
 * containerd's runc options (`containerd.runc.v1.Options`), decoded at the wire level.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { RUNC_OPTIONS_CODEC } from "@skiff/shim";
 * strictEqual(RUNC_OPTIONS_CODEC.decode(new Uint8Array()).binaryName, "");
 * ```
 */
export const RUNC_OPTIONS_CODEC: MessageCodec<RuncOptions> = {
  typeName: "containerd.runc.v1.Options",
  decode: decodeRuncOptions,
};

/** A protobuf message type a runtime accepts in its options, with its decoder. */
export interface OptionsMessage<T> {
  /** The message's codec (its `typeName` is matched against the `Any`'s bare type URL). */
  readonly codec: MessageCodec<unknown>;
  /** Turns a decoded message into the runtime's options, starting from `base`. */
  decode(message: unknown, base: T): T;
}

/**
 * Declares a protobuf message type the runtime accepts, keeping the decoder typed.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { optionsMessage, RUNC_OPTIONS_CODEC } from "@skiff/shim";
 * const runc = optionsMessage(
 *   RUNC_OPTIONS_CODEC,
 *   (m, base: { binary: string }) => ({ binary: m.binaryName || base.binary }),
 * );
 * strictEqual(runc.codec.typeName, "containerd.runc.v1.Options");
 * ```
 */
export function optionsMessage<M, T>(
  codec: MessageCodec<M>,
  decode: (message: M, base: T) => T,
): OptionsMessage<T> {
  return { codec, decode: (m, base) => decode(m as M, base) };
}

/**
 * The runtime-specific options hook: the only place runtime configuration enters a shim.
 * `T` must be JSON-serialisable (it is persisted in the bundle so `delete` can rebuild the
 * runtime command) and cannot have endpoint fields.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeOptions } from "@skiff/shim";
 * interface MyOptions { debug: boolean }
 * const hook: RuntimeOptions<MyOptions> = {
 *   defaults: () => ({ debug: false }),
 *   fromToml: (t, base) => ({ ...base, debug: t.debug === true }),
 * };
 * strictEqual(hook.defaults().debug, false);
 * ```
 */
export interface RuntimeOptions<T extends object> {
  /** The options used when nothing else is given. */
  defaults(): EndpointFree<T>;
  /** Protobuf message types accepted in options (e.g. `containerd.runc.v1.Options`). */
  readonly messages?: readonly OptionsMessage<T>[];
  /** Decodes CRI's `runtimeoptions.v1.Options` TOML; omit it to refuse that carrier. */
  fromToml?(table: Record<string, unknown>, base: T): T;
}

/** What the base class learned from one options `Any`. */
export interface ResolvedOptions<T> {
  /** The runtime options in effect. */
  options: T;
  /** Whether `options` came from this carrier (false: kept what the runtime already had). */
  fromCarrier: boolean;
  /** An endpoint found in a legacy carrier (runc options fields 12/13). */
  endpoint?: TaskApiEndpoint;
  /** Things worth a warning in the log (deprecated carriers, ignored options). */
  warnings: string[];
}

/** The bare type name of an `Any` (`type.googleapis.com/x.Y` → `x.Y`). */
export function bareTypeName(typeUrl: string): string {
  const slash = typeUrl.lastIndexOf("/");
  return slash >= 0 ? typeUrl.slice(slash + 1) : typeUrl;
}

/**
 * Resolves an options `Any` into the runtime's options and, separately, a legacy endpoint.
 *
 * @param hook the runtime's options hook
 * @param carrier the `Any` from `CreateTaskRequest.options`, `start`'s stdin, a bootstrap
 *   extension, or `CreateSandboxRequest.options`
 * @param current the options the runtime already has (from `start`, the sandbox, or defaults)
 * @param runtimeName used in messages
 * @returns the options in effect; throws `ConnectError` InvalidArgument for unusable input
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { resolveOptions } from "@skiff/shim/seam";
 * const r = resolveOptions({ defaults: () => ({}) }, undefined, undefined, "io.containerd.x.v1");
 * strictEqual(r.fromCarrier, false);
 * ```
 */
export function resolveOptions<T extends object>(
  hook: RuntimeOptions<T>,
  carrier: Any | undefined,
  current: T | undefined,
  runtimeName: string,
): ResolvedOptions<T> {
  const base = current ?? (hook.defaults() as T);
  const keep = (warnings: string[] = [], endpoint?: TaskApiEndpoint): ResolvedOptions<T> => ({
    options: base,
    fromCarrier: false,
    warnings,
    ...(endpoint ? { endpoint } : {}),
  });
  if (!carrier || carrier.typeUrl === "") return keep();
  const type = bareTypeName(carrier.typeUrl);
  const own = hook.messages?.find((m) => m.codec.typeName === type);

  if (type === RUNC_OPTIONS_TYPE) {
    const runc = decodeOrReject(RUNC_OPTIONS_CODEC, carrier, runtimeName);
    const endpoint = takeEndpoint(runc, runtimeName);
    if (isEndpointOnly(runc)) {
      if (!endpoint) return keep();
      return keep([
        `runc options carrying only task_api_address/task_api_version are deprecated ` +
        `(containerd 2.0-2.3); took them as the task API endpoint and kept ${runtimeName}'s options`,
      ], endpoint);
    }
    if (!own) {
      return keep([
        `ignored containerd.runc.v1.Options: ${runtimeName} does not accept runc options; ` +
        `accepted: ${acceptedTypes(hook).join(", ") || "none"}`,
      ], endpoint);
    }
    return {
      options: own.decode(runc, base),
      fromCarrier: true,
      warnings: [],
      ...(endpoint ? { endpoint } : {}),
    };
  }

  if (own) {
    const msg = decodeOrReject(own.codec, carrier, runtimeName);
    return { options: own.decode(msg, base), fromCarrier: true, warnings: [] };
  }

  if (type === CRI_RUNTIME_OPTIONS_TYPE && hook.fromToml) {
    return fromCriToml(hook.fromToml, carrier, base, runtimeName) ?? keep();
  }

  throw statusError(
    `options type "${type}" is not accepted by ${runtimeName}; accepted: ${
      acceptedTypes(hook).join(", ") || "none"
    }`,
    Code.InvalidArgument,
  );
}

/**
 * CRI's generic `runtimeoptions.v1.Options`: its TOML (`config_body`, else the file at
 * `config_path`) through the hook's `fromToml`; undefined when the TOML is empty.
 */
function fromCriToml<T extends object>(
  fromToml: NonNullable<RuntimeOptions<T>["fromToml"]>,
  carrier: Any,
  base: T,
  runtimeName: string,
): ResolvedOptions<T> | undefined {
  const cri = decodeOrReject(CRI_RUNTIME_OPTIONS_CODEC, carrier, runtimeName);
  let text = new TextDecoder().decode(cri.configBody);
  let where = "config_body";
  if (text.trim() === "" && cri.configPath !== "") {
    where = `config_path "${cri.configPath}"`;
    try {
      text = Deno.readTextFileSync(cri.configPath);
    } catch (e) {
      throw statusError(
        `runtime options ${where} for ${runtimeName}: ${(e as Error).message}`,
        Code.InvalidArgument,
      );
    }
  }
  if (text.trim() === "") return undefined;
  let table: Record<string, unknown>;
  try {
    table = parseToml(text) as Record<string, unknown>;
  } catch (e) {
    throw statusError(
      `runtime options ${where} for ${runtimeName} is not valid TOML: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
  try {
    return { options: fromToml(table, base), fromCarrier: true, warnings: [] };
  } catch (e) {
    // A hook that refuses a value (a wrong type, out of range) says which; the client gets it.
    throw statusError(
      `runtime options ${where} for ${runtimeName}: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

/** The bare type names a hook accepts. */
export function acceptedTypes<T extends object>(hook: RuntimeOptions<T>): string[] {
  const names = (hook.messages ?? []).map((m) => m.codec.typeName);
  if (hook.fromToml) names.push(CRI_RUNTIME_OPTIONS_TYPE);
  return names;
}

const CRI_RUNTIME_OPTIONS_CODEC = {
  typeName: CRI_RUNTIME_OPTIONS_TYPE,
  decode: decodeCriRuntimeOptions,
};

function decodeOrReject<M>(codec: MessageCodec<M>, carrier: Any, runtimeName: string): M {
  try {
    return codec.decode(carrier.value);
  } catch (e) {
    throw statusError(
      `options of type "${codec.typeName}" for ${runtimeName} do not decode: ${
        (e as Error).message
      }`,
      Code.InvalidArgument,
    );
  }
}

/**
 * Takes the endpoint out of runc options and deletes the fields, so no runtime hook can
 * read them (the seam's regression tests check exactly this).
 */
function takeEndpoint(runc: RuncOptions, runtimeName: string): TaskApiEndpoint | undefined {
  const address = runc.taskApiAddress;
  const version = runc.taskApiVersion;
  delete (runc as Partial<RuncOptions>).taskApiAddress;
  delete (runc as Partial<RuncOptions>).taskApiVersion;
  if (!address) return undefined;
  try {
    return parseTaskApiEndpoint(address, version);
  } catch (e) {
    throw statusError(
      `task API endpoint in runc options for ${runtimeName}: ${(e as Error).message}`,
      Code.InvalidArgument,
    );
  }
}

function isEndpointOnly(runc: RuncOptions): boolean {
  return !runc.noPivotRoot && !runc.noNewKeyring && runc.shimCgroup === "" && runc.ioUid === 0 &&
    runc.ioGid === 0 && runc.binaryName === "" && runc.root === "" && runc.criuPath === "" &&
    !runc.systemdCgroup && runc.criuImagePath === "" && runc.criuWorkPath === "";
}
