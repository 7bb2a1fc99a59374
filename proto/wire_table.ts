/**
 * Table-driven protobuf codecs: a message described by a plain table of its fields (number,
 * name, kind) is decoded into, and encoded from, objects of the shape protobuf-es gives it, using
 * `@bufbuild/protobuf/wire` alone. The tables for everything the shim server sends and receives
 * are generated from the same descriptors as protobuf-es's schemas (`proto/gen_wire.ts`, into
 * `proto/gen/wire/`), so the server never loads protobuf-es's reflection or a generated
 * descriptor: evaluating those costs a cold server ~25 ms and ~1.5 MiB (docs/performance.md).
 *
 * Covered: proto3 implicit-presence scalars and enums, message fields, repeated fields (packed
 * and unpacked on decode; packed as the table says on encode), and maps. Oneofs and proto2
 * presence are not (the generator refuses a message that has them). Unknown fields are skipped.
 *
 * @module
 */

import { BinaryReader, BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/** Protobuf scalar types, numbered as in `descriptor.proto` (and protobuf-es's `ScalarType`). */
export const Scalar = {
  DOUBLE: 1,
  FLOAT: 2,
  INT64: 3,
  UINT64: 4,
  INT32: 5,
  FIXED64: 6,
  FIXED32: 7,
  BOOL: 8,
  STRING: 9,
  BYTES: 12,
  UINT32: 13,
  SFIXED32: 15,
  SFIXED64: 16,
  SINT32: 17,
  SINT64: 18,
} as const;

/** One field of a {@linkcode WireMessageSpec}. Enums are `Scalar.INT32` on the wire. */
export type WireFieldSpec =
  /** A scalar or enum with implicit presence: `[number, localName, "s", scalar]`. */
  | readonly [no: number, name: string, kind: "s", scalar: number]
  /** A message field: `[number, localName, "m", typeName]`. */
  | readonly [no: number, name: string, kind: "m", typeName: string]
  /** A repeated scalar or enum: `[number, localName, "ls", scalar, packed]`. */
  | readonly [no: number, name: string, kind: "ls", scalar: number, packed: boolean]
  /** A repeated message: `[number, localName, "lm", typeName]`. */
  | readonly [no: number, name: string, kind: "lm", typeName: string]
  /** A map with a scalar value: `[number, localName, "ms", keyScalar, valueScalar]`. */
  | readonly [no: number, name: string, kind: "ms", key: number, value: number]
  /** A map with a message value: `[number, localName, "mm", keyScalar, valueTypeName]`. */
  | readonly [no: number, name: string, kind: "mm", key: number, typeName: string];

/** A message: its full type name and its fields in field-number order. */
export interface WireMessageSpec {
  /** Full protobuf type name, e.g. `containerd.task.v2.CreateTaskRequest`. */
  readonly typeName: string;
  /** Fields, sorted by number (the order Go and protobuf-es write them in). */
  readonly fields: readonly WireFieldSpec[];
}

/**
 * Decodes and encodes one message type. `decode` returns an object shaped like protobuf-es's
 * message (`$typeName`, every scalar and list at its default, message fields absent when
 * unset); `encode` takes the same shape, partial like protobuf-es's init shape.
 */
export interface WireCodec<T> {
  /** The message's full type name. */
  readonly typeName: string;
  /** Decodes the message; throws an `Error` naming the type and byte when it is malformed. */
  decode(bytes: Uint8Array): T;
  /** Encodes a message (missing fields are their defaults). */
  encode(message: WireInit<T>): Uint8Array;
}

/** What {@linkcode WireCodec.encode} takes: the message's fields, any of them left out. */
export type WireInit<T> = T extends Uint8Array ? T
  : T extends bigint ? bigint | number | string
  : T extends readonly (infer E)[] ? readonly WireInit<E>[]
  : T extends object ? { [K in keyof T as K extends "$typeName" ? never : K]?: WireInit<T[K]> }
  : T;

type Obj = Record<string, unknown>;

const LONG = new Set<number>([
  Scalar.INT64,
  Scalar.UINT64,
  Scalar.FIXED64,
  Scalar.SFIXED64,
  Scalar.SINT64,
]);

function zero(scalar: number): unknown {
  if (scalar === Scalar.STRING) return "";
  if (scalar === Scalar.BOOL) return false;
  if (scalar === Scalar.BYTES) return new Uint8Array(0);
  return LONG.has(scalar) ? 0n : 0;
}

function wireTypeOf(scalar: number): WireType {
  switch (scalar) {
    case Scalar.STRING:
    case Scalar.BYTES:
      return WireType.LengthDelimited;
    case Scalar.DOUBLE:
    case Scalar.FIXED64:
    case Scalar.SFIXED64:
      return WireType.Bit64;
    case Scalar.FLOAT:
    case Scalar.FIXED32:
    case Scalar.SFIXED32:
      return WireType.Bit32;
    default:
      return WireType.Varint;
  }
}

function readScalar(r: BinaryReader, scalar: number): unknown {
  switch (scalar) {
    case Scalar.DOUBLE:
      return r.double();
    case Scalar.FLOAT:
      return r.float();
    case Scalar.INT64:
      return BigInt(r.int64());
    case Scalar.UINT64:
      return BigInt(r.uint64());
    case Scalar.INT32:
      return r.int32();
    case Scalar.FIXED64:
      return BigInt(r.fixed64());
    case Scalar.FIXED32:
      return r.fixed32();
    case Scalar.BOOL:
      return r.bool();
    case Scalar.STRING:
      return r.string();
    case Scalar.BYTES:
      // A copy: the bytes read may be a view of a buffer the caller reuses.
      return r.bytes().slice();
    case Scalar.UINT32:
      return r.uint32();
    case Scalar.SFIXED32:
      return r.sfixed32();
    case Scalar.SFIXED64:
      return BigInt(r.sfixed64());
    case Scalar.SINT32:
      return r.sint32();
    case Scalar.SINT64:
      return BigInt(r.sint64());
  }
  throw new Error(`unknown scalar type ${scalar}`);
}

function writeScalar(w: BinaryWriter, scalar: number, v: unknown): void {
  switch (scalar) {
    case Scalar.DOUBLE:
      w.double(v as number);
      return;
    case Scalar.FLOAT:
      w.float(v as number);
      return;
    case Scalar.INT64:
      w.int64(v as bigint);
      return;
    case Scalar.UINT64:
      w.uint64(v as bigint);
      return;
    case Scalar.INT32:
      w.int32(v as number);
      return;
    case Scalar.FIXED64:
      w.fixed64(v as bigint);
      return;
    case Scalar.FIXED32:
      w.fixed32(v as number);
      return;
    case Scalar.BOOL:
      w.bool(v as boolean);
      return;
    case Scalar.STRING:
      w.string(v as string);
      return;
    case Scalar.BYTES:
      w.bytes(v as Uint8Array);
      return;
    case Scalar.UINT32:
      w.uint32(v as number);
      return;
    case Scalar.SFIXED32:
      w.sfixed32(v as number);
      return;
    case Scalar.SFIXED64:
      w.sfixed64(v as bigint);
      return;
    case Scalar.SINT32:
      w.sint32(v as number);
      return;
    case Scalar.SINT64:
      w.sint64(v as bigint);
      return;
  }
  throw new Error(`unknown scalar type ${scalar}`);
}

function isZero(scalar: number, v: unknown): boolean {
  if (v === undefined || v === null) return true;
  if (scalar === Scalar.BYTES) return (v as Uint8Array).length === 0;
  if (LONG.has(scalar)) return BigInt(v as bigint) === 0n;
  // -0 is written (Go does): only +0 is the default of a double or float.
  if (scalar === Scalar.DOUBLE || scalar === Scalar.FLOAT) {
    return v === 0 && !Object.is(v, -0);
  }
  return v === zero(scalar);
}

function parseMapKey(scalar: number, key: string): unknown {
  if (scalar === Scalar.STRING) return key;
  if (scalar === Scalar.BOOL) return key === "true";
  return LONG.has(scalar) ? BigInt(key) : Number(key);
}

/**
 * Codecs for a set of message tables that refer to each other by type name.
 *
 * @example Decode and encode one message
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { Scalar, WireRegistry } from "@skiff/shim/proto";
 *
 * const registry = new WireRegistry([
 *   { typeName: "x.Pair", fields: [[1, "key", "s", Scalar.STRING], [2, "n", "s", Scalar.INT64]] },
 * ]);
 * const pair = registry.codec<{ $typeName: "x.Pair"; key: string; n: bigint }>("x.Pair");
 * deepStrictEqual(pair.decode(pair.encode({ key: "a", n: 7 })), {
 *   $typeName: "x.Pair",
 *   key: "a",
 *   n: 7n,
 * });
 * ```
 */
export class WireRegistry {
  #specs = new Map<string, WireMessageSpec>();
  #byNumber = new Map<WireMessageSpec, Map<number, WireFieldSpec>>();
  #codecs = new Map<string, WireCodec<unknown>>();

  /**
   * Creates a registry of the given tables.
   *
   * @param specs the message tables; a message field's type must be among them
   */
  constructor(specs: Iterable<WireMessageSpec>) {
    for (const s of specs) this.#specs.set(s.typeName, s);
  }

  /**
   * The codec of one message type.
   *
   * @param typeName the message's full type name
   * @returns its codec
   * @throws {Error} when the registry has no table for the type
   */
  codec<T>(typeName: string): WireCodec<T> {
    let c = this.#codecs.get(typeName);
    if (c === undefined) {
      const spec = this.#spec(typeName);
      c = {
        typeName,
        decode: (bytes) => {
          const out = this.#empty(spec);
          try {
            this.#decodeInto(spec, out, bytes);
          } catch (e) {
            throw new Error(`${typeName}: ${e instanceof Error ? e.message : String(e)}`);
          }
          return out;
        },
        encode: (message) => {
          const w = new BinaryWriter();
          this.#encode(spec, message as Obj, w);
          return w.finish();
        },
      };
      this.#codecs.set(typeName, c);
    }
    return c as WireCodec<T>;
  }

  /**
   * A message with every field at its default, then `init`'s fields (as protobuf-es's `create`,
   * but shallow: nested messages in `init` are taken as they are).
   *
   * @param typeName the message's full type name
   * @param init fields to set
   * @returns the message
   */
  create<T>(typeName: string, init: Partial<T> = {}): T {
    return { ...this.#empty(this.#spec(typeName)), ...init } as T;
  }

  /**
   * The fields' names: `localName` as in the message objects, `name` as in the `.proto` file
   * (snake_case; the generator checks that it is the local name's).
   *
   * @param typeName the message's full type name
   * @returns each field's two names, in field-number order
   */
  fieldNames(typeName: string): { name: string; localName: string }[] {
    return this.#spec(typeName).fields.map((f) => ({
      name: f[1].replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`),
      localName: f[1],
    }));
  }

  #spec(typeName: string): WireMessageSpec {
    const spec = this.#specs.get(typeName);
    if (spec === undefined) throw new Error(`no wire table for message ${typeName}`);
    return spec;
  }

  #empty(spec: WireMessageSpec): Obj {
    const o: Obj = { $typeName: spec.typeName };
    for (const f of spec.fields) {
      switch (f[2]) {
        case "s":
          o[f[1]] = zero(f[3]);
          break;
        case "ls":
        case "lm":
          o[f[1]] = [];
          break;
        case "ms":
        case "mm":
          o[f[1]] = {};
          break;
      }
    }
    return o;
  }

  #decodeInto(spec: WireMessageSpec, out: Obj, bytes: Uint8Array, depth = 0): void {
    if (depth > 100) throw new Error("message nesting exceeds 100 levels");
    let byNumber = this.#byNumber.get(spec);
    if (byNumber === undefined) {
      byNumber = new Map(spec.fields.map((f) => [f[0], f]));
      this.#byNumber.set(spec, byNumber);
    }
    const r = new BinaryReader(bytes);
    while (r.pos < r.len) {
      const at = r.pos;
      const [no, wt] = r.tag();
      const f = byNumber.get(no);
      if (f === undefined) {
        r.skip(wt, no);
        continue;
      }
      const bad = (want: WireType) =>
        new Error(`field ${no} (${f[1]}) has wire type ${wt}, expected ${want}, at byte ${at}`);
      switch (f[2]) {
        case "s": {
          if (wt !== wireTypeOf(f[3])) throw bad(wireTypeOf(f[3]));
          out[f[1]] = readScalar(r, f[3]);
          break;
        }
        case "m": {
          if (wt !== WireType.LengthDelimited) throw bad(WireType.LengthDelimited);
          const sub = this.#spec(f[3]);
          const target = (out[f[1]] as Obj | undefined) ?? this.#empty(sub);
          this.#decodeInto(sub, target, r.bytes(), depth + 1);
          out[f[1]] = target;
          break;
        }
        case "ls": {
          const list = out[f[1]] as unknown[];
          const one = wireTypeOf(f[3]);
          if (wt === WireType.LengthDelimited && one !== WireType.LengthDelimited) {
            const end = r.uint32() + r.pos;
            if (end > r.len) throw new Error(`packed field ${no} (${f[1]}) runs past the end`);
            while (r.pos < end) list.push(readScalar(r, f[3]));
            if (r.pos !== end) throw new Error(`packed field ${no} (${f[1]}) is malformed`);
          } else {
            if (wt !== one) throw bad(one);
            list.push(readScalar(r, f[3]));
          }
          break;
        }
        case "lm": {
          if (wt !== WireType.LengthDelimited) throw bad(WireType.LengthDelimited);
          const sub = this.#spec(f[3]);
          const item = this.#empty(sub);
          this.#decodeInto(sub, item, r.bytes(), depth + 1);
          (out[f[1]] as unknown[]).push(item);
          break;
        }
        case "ms":
        case "mm": {
          if (wt !== WireType.LengthDelimited) throw bad(WireType.LengthDelimited);
          const entry = new BinaryReader(r.bytes());
          let key = zero(f[3]);
          let value: unknown = f[2] === "ms" ? zero(f[4] as number) : undefined;
          while (entry.pos < entry.len) {
            const [eno, ewt] = entry.tag();
            if (eno === 1 && ewt === wireTypeOf(f[3])) key = readScalar(entry, f[3]);
            else if (eno === 2 && f[2] === "ms" && ewt === wireTypeOf(f[4] as number)) {
              value = readScalar(entry, f[4] as number);
            } else if (eno === 2 && f[2] === "mm" && ewt === WireType.LengthDelimited) {
              const sub = this.#spec(f[4] as string);
              value = this.#empty(sub);
              this.#decodeInto(sub, value as Obj, entry.bytes(), depth + 1);
            } else entry.skip(ewt, eno);
          }
          if (value === undefined) value = this.#empty(this.#spec(f[4] as string));
          (out[f[1]] as Obj)[String(key)] = value;
          break;
        }
      }
    }
  }

  #encode(spec: WireMessageSpec, m: Obj, w: BinaryWriter): void {
    for (const f of spec.fields) {
      const v = m[f[1]];
      if (v === undefined || v === null) continue;
      switch (f[2]) {
        case "s":
          if (isZero(f[3], v)) break;
          w.tag(f[0], wireTypeOf(f[3]));
          writeScalar(w, f[3], v);
          break;
        case "m":
          w.tag(f[0], WireType.LengthDelimited).fork();
          this.#encode(this.#spec(f[3]), v as Obj, w);
          w.join();
          break;
        case "ls": {
          const list = v as unknown[];
          if (list.length === 0) break;
          if (f[4]) {
            w.tag(f[0], WireType.LengthDelimited).fork();
            for (const x of list) writeScalar(w, f[3], x);
            w.join();
          } else {
            for (const x of list) {
              w.tag(f[0], wireTypeOf(f[3]));
              writeScalar(w, f[3], x);
            }
          }
          break;
        }
        case "lm":
          for (const x of v as Obj[]) {
            w.tag(f[0], WireType.LengthDelimited).fork();
            this.#encode(this.#spec(f[3]), x, w);
            w.join();
          }
          break;
        case "ms":
        case "mm":
          for (const [k, x] of Object.entries(v as Obj)) {
            w.tag(f[0], WireType.LengthDelimited).fork();
            w.tag(1, wireTypeOf(f[3]));
            writeScalar(w, f[3], parseMapKey(f[3], k));
            if (f[2] === "ms") {
              w.tag(2, wireTypeOf(f[4] as number));
              writeScalar(w, f[4] as number, x);
            } else {
              w.tag(2, WireType.LengthDelimited).fork();
              this.#encode(this.#spec(f[4] as string), x as Obj, w);
              w.join();
            }
            w.join();
          }
          break;
      }
    }
  }
}
