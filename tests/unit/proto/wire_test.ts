// proto/wire.ts, the start-up path's hand-written codec, against protobuf-es for every message it
// encodes or decodes: random values in every field the .proto declares (read from the schema, so
// a field added to a .proto and missed here fails), bytes one way, decoded the other, equal; and
// malformed input refused naming the message and the field.
import assert from "node:assert/strict";
import { create, type DescField, type DescMessage, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { AnySchema, timestampDate, TimestampSchema } from "@bufbuild/protobuf/wkt";
import {
  decodeAny,
  decodeBootstrapParams,
  decodeCriRuntimeOptions,
  decodeRuncOptions,
  encodeAny,
  encodeBootstrapResult,
  encodeDeleteResponse,
  encodeRuntimeInfo,
} from "../../../proto/wire.ts";
import {
  BootstrapParamsSchema,
  BootstrapResultSchema,
  CriRuntimeOptionsSchema,
  DeleteResponseSchema,
  RuncOptionsSchema,
  RuntimeInfoSchema,
} from "../../../proto/mod.ts";

const RUNS = 200;
/** A small seeded generator, so a failure names a case that can be run again. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

function randomString(r: () => number): string {
  const pool = ["", "a", "runc", "/run/containerd/s/1", "ü", "日本", "😀", " ", "x".repeat(300)];
  return Array.from({ length: Math.floor(r() * 4) }, () => pool[Math.floor(r() * pool.length)])
    .join("");
}

function randomScalar(kind: ScalarType, r: () => number): unknown {
  switch (kind) {
    case ScalarType.STRING:
      return randomString(r);
    case ScalarType.BOOL:
      return r() < 0.5;
    case ScalarType.BYTES:
      return Uint8Array.from({ length: Math.floor(r() * 20) }, () => Math.floor(r() * 256));
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return Math.floor(r() * 2 ** 32) - 2 ** 31;
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return r() < 0.3 ? 0 : Math.floor(r() * 2 ** 32);
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return BigInt(Math.floor(r() * 2 ** 40) - 2 ** 39);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return BigInt(Math.floor(r() * 2 ** 40));
    default:
      throw new Error(`no generator for scalar ${kind}`);
  }
}

/** A message of `schema` with random values in every field (nested messages to depth 2). */
function randomMessage(schema: DescMessage, r: () => number, depth = 0): Record<string, unknown> {
  if (schema.typeName === "google.protobuf.Timestamp") {
    return {
      seconds: BigInt(Math.floor(r() * 2 ** 33)),
      nanos: Math.floor(r() * 1000) * 1_000_000,
    };
  }
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) {
    if (r() < 0.2) continue; // and some left at their defaults
    const v = randomField(f, r, depth);
    if (v !== undefined) init[f.localName] = v;
  }
  return init;
}

function randomField(f: DescField, r: () => number, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return randomScalar(f.scalar, r);
    case "enum":
      return f.enum.values[Math.floor(r() * f.enum.values.length)]!.number;
    case "message":
      return depth < 2 ? create(f.message, randomMessage(f.message, r, depth + 1)) : undefined;
    case "list":
      return Array.from(
        { length: Math.floor(r() * 3) },
        () =>
          f.listKind === "message"
            ? create(f.message, randomMessage(f.message, r, depth + 1))
            : f.listKind === "enum"
            ? f.enum.values[0]!.number
            : randomScalar(f.scalar, r),
      );
    default:
      throw new Error(`no generator for ${f.fieldKind} field ${f.name}`);
  }
}

/** `m` without protobuf-es's bookkeeping, for comparing with a plain decoded object. */
function plain(m: unknown): unknown {
  if (m instanceof Uint8Array || typeof m !== "object" || m === null) return m;
  if (Array.isArray(m)) return m.map(plain);
  return Object.fromEntries(
    Object.entries(m).filter(([k]) => k !== "$typeName" && k !== "$unknown").map((
      [k, v],
    ) => [k, plain(v)]),
  );
}

Deno.test("wire.ts decoders read what protobuf-es writes, every field of every message", () => {
  const r = rng(35);
  for (let i = 0; i < RUNS; i++) {
    const any = create(AnySchema, randomMessage(AnySchema, r));
    assert.deepEqual(plain(decodeAny(toBinary(AnySchema, any))), plain(any), `Any #${i}`);

    const params = create(BootstrapParamsSchema, randomMessage(BootstrapParamsSchema, r));
    const bytes = toBinary(BootstrapParamsSchema, params);
    assert.deepEqual(
      plain(decodeBootstrapParams(bytes)),
      plain(fromBinary(BootstrapParamsSchema, bytes)),
      `BootstrapParams #${i}`,
    );

    const runc = create(RuncOptionsSchema, randomMessage(RuncOptionsSchema, r));
    const runcBytes = toBinary(RuncOptionsSchema, runc);
    assert.deepEqual(plain(decodeRuncOptions(runcBytes)), plain(runc), `runc Options #${i}`);

    const cri = create(CriRuntimeOptionsSchema, randomMessage(CriRuntimeOptionsSchema, r));
    // wire.ts names field 1 (type_url) `typeName`, as skiff's options code reads it.
    assert.deepEqual(
      decodeCriRuntimeOptions(toBinary(CriRuntimeOptionsSchema, cri)),
      { typeName: cri.typeUrl, configPath: cri.configPath, configBody: cri.configBody },
      `runtimeoptions Options #${i}`,
    );
  }
});

Deno.test("wire.ts encoders write what protobuf-es reads, every field they take", () => {
  const r = rng(36);
  for (let i = 0; i < RUNS; i++) {
    const any = {
      typeUrl: randomString(r),
      value: randomScalar(ScalarType.BYTES, r) as Uint8Array,
    };
    assert.deepEqual(plain(fromBinary(AnySchema, encodeAny(any))), any, `Any #${i}`);

    const result = {
      version: r() < 0.3 ? 0 : 2 + Math.floor(r() * 2),
      address: randomString(r),
      protocol: r() < 0.5 ? "ttrpc" : randomString(r),
    };
    // The fields skiff answers with (capabilities and metadata stay empty).
    const back = fromBinary(BootstrapResultSchema, encodeBootstrapResult(result));
    assert.deepEqual(
      { version: back.version, address: back.address, protocol: back.protocol },
      result,
      `BootstrapResult #${i}`,
    );
    assert.deepEqual([back.capabilities, back.metadata], [[], {}]);

    const del = {
      pid: r() < 0.3 ? 0 : Math.floor(r() * 4_000_000),
      exitStatus: r() < 0.3 ? 0 : Math.floor(r() * 256),
      exitedAt: new Date(Math.floor(r() * 2 ** 41)),
    };
    const got = fromBinary(DeleteResponseSchema, encodeDeleteResponse(del));
    assert.deepEqual(
      { pid: got.pid, exitStatus: got.exitStatus, exitedAt: timestampDate(got.exitedAt!) },
      del,
      `DeleteResponse #${i}`,
    );

    const info = {
      name: randomString(r),
      version: randomString(r),
      revision: r() < 0.5 ? randomString(r) : "",
      ...(r() < 0.5
        ? { options: { typeUrl: randomString(r), value: new Uint8Array([1, 2]) } }
        : {}),
      ...(r() < 0.5 ? { features: { typeUrl: "f", value: new Uint8Array([3]) } } : {}),
    };
    const decoded = fromBinary(RuntimeInfoSchema, encodeRuntimeInfo(info));
    assert.deepEqual(
      {
        name: decoded.name,
        version: decoded.version?.version ?? "",
        revision: decoded.version?.revision ?? "",
        ...(decoded.options ? { options: plain(decoded.options) } : {}),
        ...(decoded.features ? { features: plain(decoded.features) } : {}),
      },
      info,
      `RuntimeInfo #${i}`,
    );
  }
  // The timestamp of a DeleteResponse is always there, even at the epoch (containerd reads it).
  const epoch = fromBinary(
    DeleteResponseSchema,
    encodeDeleteResponse({ pid: 0, exitStatus: 0, exitedAt: new Date(0) }),
  );
  assert.ok(epoch.exitedAt, "exitedAt present");
  assert.equal(toBinary(TimestampSchema, epoch.exitedAt!).length, 0);
});

Deno.test("wire.ts decoders refuse malformed input, naming the message and the field", () => {
  // Field 1 of BootstrapParams (a string) sent as a varint.
  const wrongType = new BinaryWriter().tag(1, WireType.Varint).int32(7).finish();
  assert.throws(
    () => decodeBootstrapParams(wrongType),
    /containerd\.runtime\.bootstrap\.v1\.BootstrapParams: field 1 has wire type 0, expected 2/,
  );
  assert.throws(
    () => decodeRuncOptions(new BinaryWriter().tag(6, WireType.Varint).int32(1).finish()),
    /containerd\.runc\.v1\.Options: field 6 has wire type 0, expected 2/,
  );
  // A length that runs past the end.
  const truncated = new Uint8Array([0x0a, 0x10, 0x61]);
  assert.throws(() => decodeAny(truncated));
  assert.throws(() => decodeCriRuntimeOptions(truncated));
});

Deno.test("the generated TASK_STATUS table is containerd.v1.types.Status, value for value", async () => {
  const { TASK_STATUS } = await import("../../../proto/shim_wire.ts");
  const { Status } = await import("../../../proto/gen/containerd/types/task/task_pb.ts");
  for (const [name, n] of Object.entries(TASK_STATUS)) {
    assert.equal(Status[name as keyof typeof Status], n, name);
  }
  assert.equal(Object.keys(TASK_STATUS).length, Object.keys(Status).length / 2);
});
