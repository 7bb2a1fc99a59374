/**
 * Wire-level protobuf codecs for the few messages the short-lived actions (`start`, `delete`,
 * `-info`) touch: `google.protobuf.Any`, `BootstrapParams`/`BootstrapResult`,
 * `DeleteResponse`, `RuntimeInfo` and runc's `Options`. They use `@bufbuild/protobuf/wire`
 * alone, so an action never loads protobuf-es's reflection or a generated descriptor (see
 * docs/architecture.md, "What each process loads"). The objects they return have the shape of
 * the generated message types, so the server and tests can use either. They sit in proto/, the
 * bottom layer, because the options hook (`sdk/shim/options.ts`), the actions and the server all
 * decode with them.
 *
 * @module
 */

import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import type { Any } from "@bufbuild/protobuf/wkt";
import type { BootstrapParams } from "./gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import type { Options as RuncOptionsMessage } from "./gen/containerd/runc/v1/oci_pb.ts";

function fields(
  bytes: Uint8Array,
  what: string,
  each: (r: BinaryReader, field: number, wire: WireType) => boolean,
): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 0) throw new Error(`${what}: invalid field number 0 at byte ${r.pos}`);
    if (!each(r, field, wire)) r.skip(wire, field);
  }
  if (r.pos !== r.len) throw new Error(`${what}: truncated at byte ${r.pos} of ${r.len}`);
}

function expect(wire: WireType, want: WireType, what: string, field: number): void {
  if (wire !== want) {
    throw new Error(`${what}: field ${field} has wire type ${wire}, expected ${want}`);
  }
}

/**
 * Decodes a `google.protobuf.Any`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeAny, encodeAny } from "./wire.ts";
 * const any = decodeAny(encodeAny({ typeUrl: "x.Y", value: new Uint8Array([1]) }));
 * strictEqual(any.typeUrl, "x.Y");
 * ```
 */
export function decodeAny(bytes: Uint8Array): Any {
  const any: Any = { $typeName: "google.protobuf.Any", typeUrl: "", value: new Uint8Array() };
  fields(bytes, "google.protobuf.Any", (r, f, w) => {
    if (f === 1) {
      expect(w, WireType.LengthDelimited, "google.protobuf.Any", f);
      any.typeUrl = r.string();
    } else if (f === 2) {
      expect(w, WireType.LengthDelimited, "google.protobuf.Any", f);
      any.value = r.bytes();
    } else return false;
    return true;
  });
  return any;
}

function writeAny(w: BinaryWriter, any: Pick<Any, "typeUrl" | "value">): BinaryWriter {
  if (any.typeUrl !== "") w.tag(1, WireType.LengthDelimited).string(any.typeUrl);
  if (any.value.length > 0) w.tag(2, WireType.LengthDelimited).bytes(any.value);
  return w;
}

/**
 * Encodes a `google.protobuf.Any`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeAny } from "./wire.ts";
 * strictEqual(encodeAny({ typeUrl: "", value: new Uint8Array() }).length, 0);
 * ```
 */
export function encodeAny(any: Pick<Any, "typeUrl" | "value">): Uint8Array {
  return writeAny(new BinaryWriter(), any).finish();
}

/**
 * Decodes containerd 2.3+'s `containerd.runtime.bootstrap.v1.BootstrapParams`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeBootstrapParams } from "./wire.ts";
 * strictEqual(decodeBootstrapParams(new Uint8Array()).instanceId, "");
 * ```
 */
export function decodeBootstrapParams(bytes: Uint8Array): BootstrapParams {
  const what = "containerd.runtime.bootstrap.v1.BootstrapParams";
  const p: BootstrapParams = {
    $typeName: what,
    instanceId: "",
    namespace: "",
    logLevel: 0,
    containerdVersion: "",
    containerdTtrpcAddress: "",
    containerdGrpcAddress: "",
    containerdBinary: "",
    extensions: [],
  };
  const strings = {
    1: "instanceId",
    2: "namespace",
    4: "containerdVersion",
    5: "containerdTtrpcAddress",
    6: "containerdGrpcAddress",
    7: "containerdBinary",
    9: "socketDir",
  } as const;
  fields(bytes, what, (r, f, w) => {
    if (f in strings) {
      expect(w, WireType.LengthDelimited, what, f);
      p[strings[f as keyof typeof strings]] = r.string();
    } else if (f === 3) {
      expect(w, WireType.Varint, what, f);
      p.logLevel = r.int32();
    } else if (f === 8) {
      expect(w, WireType.LengthDelimited, what, f);
      const ext: BootstrapParams["extensions"][number] = {
        $typeName: "containerd.runtime.bootstrap.v1.Extension",
      };
      fields(r.bytes(), "containerd.runtime.bootstrap.v1.Extension", (er, ef, ew) => {
        if (ef !== 1) return false;
        expect(ew, WireType.LengthDelimited, "containerd.runtime.bootstrap.v1.Extension", ef);
        ext.value = decodeAny(er.bytes());
        return true;
      });
      p.extensions.push(ext);
    } else return false;
    return true;
  });
  return p;
}

/**
 * Encodes a `containerd.runtime.bootstrap.v1.BootstrapResult` (version, address, protocol).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeBootstrapResult } from "./wire.ts";
 * const bytes = encodeBootstrapResult({ version: 3, address: "unix:///s", protocol: "ttrpc" });
 * strictEqual(bytes[0], 0x08);
 * strictEqual(bytes[1], 3);
 * ```
 */
export function encodeBootstrapResult(
  r: { version: number; address: string; protocol: string },
): Uint8Array {
  const w = new BinaryWriter();
  if (r.version !== 0) w.tag(1, WireType.Varint).int32(r.version);
  if (r.address !== "") w.tag(2, WireType.LengthDelimited).string(r.address);
  if (r.protocol !== "") w.tag(3, WireType.LengthDelimited).string(r.protocol);
  return w.finish();
}

/**
 * Encodes a `containerd.task.v2.DeleteResponse`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeDeleteResponse } from "./wire.ts";
 * const bytes = encodeDeleteResponse({ pid: 0, exitStatus: 137, exitedAt: new Date(0) });
 * strictEqual(bytes[0], 0x10);
 * ```
 */
export function encodeDeleteResponse(
  r: { pid: number; exitStatus: number; exitedAt: Date },
): Uint8Array {
  const w = new BinaryWriter();
  if (r.pid !== 0) w.tag(1, WireType.Varint).uint32(r.pid);
  if (r.exitStatus !== 0) w.tag(2, WireType.Varint).uint32(r.exitStatus);
  const ms = r.exitedAt.getTime();
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  w.tag(3, WireType.LengthDelimited).fork();
  if (seconds !== 0) w.tag(1, WireType.Varint).int64(seconds);
  if (nanos !== 0) w.tag(2, WireType.Varint).int32(nanos);
  w.join();
  return w.finish();
}

/**
 * Encodes a `containerd.types.RuntimeInfo` (`-info`'s answer).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeRuntimeInfo } from "./wire.ts";
 * const bytes = encodeRuntimeInfo({ name: "io.containerd.x.v1", version: "1.0" });
 * strictEqual(bytes.length > 0, true);
 * ```
 */
export function encodeRuntimeInfo(info: {
  name: string;
  version: string;
  revision?: string;
  options?: Pick<Any, "typeUrl" | "value">;
  features?: Pick<Any, "typeUrl" | "value">;
}): Uint8Array {
  const w = new BinaryWriter();
  if (info.name !== "") w.tag(1, WireType.LengthDelimited).string(info.name);
  w.tag(2, WireType.LengthDelimited).fork();
  if (info.version !== "") w.tag(1, WireType.LengthDelimited).string(info.version);
  if (info.revision) w.tag(2, WireType.LengthDelimited).string(info.revision);
  w.join();
  for (const [field, any] of [[3, info.options], [4, info.features]] as const) {
    if (!any) continue;
    w.tag(field, WireType.LengthDelimited).fork();
    writeAny(w, any);
    w.join();
  }
  return w.finish();
}

/** containerd's `containerd.runc.v1.Options`, as a plain object (the generated type's shape). */
export type RuncOptionsFields = Omit<RuncOptionsMessage, "$typeName" | "$unknown">;

/**
 * Decodes `containerd.runc.v1.Options`: every field, including the deprecated task-API endpoint
 * (12, 13) that containerd 2.0–2.3 send.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeRuncOptions } from "./wire.ts";
 * strictEqual(decodeRuncOptions(new Uint8Array([0x1a, 1, 0x78])).shimCgroup, "x");
 * ```
 */
export function decodeRuncOptions(bytes: Uint8Array): RuncOptionsMessage {
  const what = "containerd.runc.v1.Options";
  const o: RuncOptionsMessage = {
    $typeName: what,
    noPivotRoot: false,
    noNewKeyring: false,
    shimCgroup: "",
    ioUid: 0,
    ioGid: 0,
    binaryName: "",
    root: "",
    criuPath: "",
    systemdCgroup: false,
    criuImagePath: "",
    criuWorkPath: "",
    taskApiAddress: "",
    taskApiVersion: 0,
  };
  const bools = { 1: "noPivotRoot", 2: "noNewKeyring", 9: "systemdCgroup" } as const;
  const uints = { 4: "ioUid", 5: "ioGid", 13: "taskApiVersion" } as const;
  const strings = {
    3: "shimCgroup",
    6: "binaryName",
    7: "root",
    8: "criuPath",
    10: "criuImagePath",
    11: "criuWorkPath",
    12: "taskApiAddress",
  } as const;
  fields(bytes, what, (r, f, w) => {
    if (f in bools) {
      expect(w, WireType.Varint, what, f);
      o[bools[f as keyof typeof bools]] = r.bool();
    } else if (f in uints) {
      expect(w, WireType.Varint, what, f);
      o[uints[f as keyof typeof uints]] = r.uint32();
    } else if (f in strings) {
      expect(w, WireType.LengthDelimited, what, f);
      o[strings[f as keyof typeof strings]] = r.string();
    } else return false;
    return true;
  });
  return o;
}

/** CRI's `runtimeoptions.v1.Options`, as a plain object. */
export interface CriRuntimeOptionsFields {
  /** The runtime's options type name (informational). */
  typeName: string;
  /** A TOML file to read when `configBody` is empty. */
  configPath: string;
  /** The TOML text. */
  configBody: Uint8Array;
}

/**
 * Decodes CRI's `runtimeoptions.v1.Options`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { decodeCriRuntimeOptions } from "./wire.ts";
 * strictEqual(decodeCriRuntimeOptions(new Uint8Array()).configPath, "");
 * ```
 */
export function decodeCriRuntimeOptions(bytes: Uint8Array): CriRuntimeOptionsFields {
  const what = "runtimeoptions.v1.Options";
  const o: CriRuntimeOptionsFields = { typeName: "", configPath: "", configBody: new Uint8Array() };
  fields(bytes, what, (r, f, w) => {
    if (f < 1 || f > 3) return false;
    expect(w, WireType.LengthDelimited, what, f);
    if (f === 1) o.typeName = r.string();
    else if (f === 2) o.configPath = r.string();
    else o.configBody = r.bytes();
    return true;
  });
  return o;
}
