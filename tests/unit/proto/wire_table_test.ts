// The server's wire tables (proto/gen/wire, proto/wire_table.ts) against protobuf-es on the same
// descriptors: for every message, random values in every field encode to the bytes protobuf-es
// writes, and protobuf-es's bytes decode to what protobuf-es decodes. Malformed input is refused
// with the type named.
import assert from "node:assert/strict";
import {
  create,
  type DescField,
  type DescMessage,
  fromBinary,
  ScalarType,
  toBinary,
} from "@bufbuild/protobuf";
import { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Events } from "../../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import * as events from "../../../proto/gen/containerd/events/task_pb.ts";
import { RequestSchema, ResponseSchema } from "../../../proto/gen/ttrpc/request_pb.ts";
import { StatusSchema } from "../../../proto/gen/google/rpc/status_pb.ts";
import { MetricsSchema as V1 } from "../../../proto/gen/io/containerd/cgroups/v1/metrics_pb.ts";
import { MetricsSchema as V2 } from "../../../proto/gen/io/containerd/cgroups/v2/metrics_pb.ts";
import {
  CheckpointOptionsSchema,
  ProcessDetailsSchema,
} from "../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { SHIM_WIRE_TABLES, type ShimWireTypes } from "../../../proto/gen/wire/shim_wire.ts";
import { shimCodec } from "../../../proto/shim_wire.ts";

const schemas = new Map<string, DescMessage>();
function walk(m: DescMessage): void {
  if (schemas.has(m.typeName)) return;
  schemas.set(m.typeName, m);
  for (const f of m.fields) if ("message" in f && f.message) walk(f.message);
}
for (const s of [Task, Events]) for (const m of s.methods) walk(m.input), walk(m.output);
for (const x of Object.values(events)) {
  if ((x as DescMessage).kind === "message") walk(x as DescMessage);
}
for (const m of [RequestSchema, ResponseSchema, StatusSchema, V1, V2]) walk(m);
walk(ProcessDetailsSchema), walk(CheckpointOptionsSchema);

// A small deterministic generator: the same values on every run, every field set in some.
let seed = 0x2545f491;
function rand(n: number): number {
  seed ^= seed << 13, seed ^= seed >>> 17, seed ^= seed << 5;
  return (seed >>> 0) % n;
}
function scalar(t: ScalarType): unknown {
  switch (t) {
    case ScalarType.STRING:
      return ["", "a", "ü✓", "x".repeat(rand(300))][rand(4)];
    case ScalarType.BYTES:
      return new Uint8Array(rand(5)).map(() => rand(256));
    case ScalarType.BOOL:
      return rand(2) === 1;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return [0, 1.5, -2, 1e10][rand(4)];
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return [0n, 1n, -1n, 1n << 62n, -(1n << 63n)][rand(5)];
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return [0n, 1n, (1n << 64n) - 1n][rand(3)];
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return [0, 1, 4294967295][rand(3)];
    default:
      return [0, 1, -1, 2147483647, -2147483648][rand(5)];
  }
}
function value(f: DescField, depth: number): unknown {
  switch (f.fieldKind) {
    case "scalar":
      return scalar(f.scalar);
    case "enum":
      return f.enum.values[rand(f.enum.values.length)].number;
    case "message":
      return depth > 3 || rand(3) === 0 ? undefined : init(f.message, depth + 1);
    case "list":
      return Array.from(
        { length: rand(4) },
        () =>
          f.listKind === "scalar"
            ? scalar(f.scalar)
            : f.listKind === "enum"
            ? f.enum.values[rand(f.enum.values.length)].number
            : init(f.message, depth + 1),
      );
    case "map":
      return Object.fromEntries(
        Array.from({ length: rand(3) }, (_, i) => [`k${i}${rand(9)}`, scalar(ScalarType.STRING)]),
      );
  }
}
function init(m: DescMessage, depth = 0): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const f of m.fields) if (rand(4) !== 0) o[f.localName] = value(f, depth);
  return o;
}

Deno.test("every server message has a table, and only those", () => {
  assert.deepEqual(SHIM_WIRE_TABLES.map((t) => t.typeName), [...schemas.keys()].sort());
});

for (const [typeName, schema] of schemas) {
  Deno.test(`${typeName}: encodes and decodes as protobuf-es does`, () => {
    const codec = shimCodec(typeName as keyof ShimWireTypes);
    for (let i = 0; i < 40; i++) {
      const message = create(schema, init(schema));
      const bytes = toBinary(schema, message);
      // deno-lint-ignore no-explicit-any
      assert.deepEqual(codec.encode(message as any), bytes, `encode, round ${i}`);
      const decoded = codec.decode(bytes);
      assert.deepEqual(
        // deno-lint-ignore no-explicit-any
        toBinary(schema, create(schema, decoded as any)),
        bytes,
        `decode, round ${i}`,
      );
      assert.deepEqual(decoded, { ...fromBinary(schema, bytes) }, `decoded shape, round ${i}`);
    }
    // The zero message is zero bytes both ways.
    assert.equal(codec.encode({}).length, 0);
    assert.deepEqual(codec.decode(new Uint8Array()), { ...create(schema) });
  });
}

Deno.test("malformed input is refused with the message type and byte named", () => {
  const codec = shimCodec("containerd.task.v2.CreateTaskRequest");
  // Field 1 (id) as a varint instead of a string.
  assert.throws(
    () => codec.decode(new Uint8Array([0x08, 1])),
    /CreateTaskRequest: field 1 \(id\) has wire type 0, expected 2, at byte 0/,
  );
  // A string that runs past the end.
  assert.throws(() => codec.decode(new Uint8Array([0x0a, 9, 0x61])), /CreateTaskRequest: /);
  // Field number 0.
  assert.throws(
    () => codec.decode(new Uint8Array([0x00])),
    /CreateTaskRequest: illegal tag: field no 0/,
  );
  // Unknown fields are skipped, as protobuf-es and Go do.
  assert.equal(codec.decode(new Uint8Array([0xf8, 0x06, 1, 0x0a, 1, 0x61])).id, "a");
});

Deno.test("a repeated message field merges twice-sent singular messages, as protobuf does", () => {
  const codec = shimCodec("containerd.task.v2.StateResponse");
  const a = codec.encode({ exitedAt: { seconds: 5n } });
  const b = codec.encode({ exitedAt: { nanos: 7 } });
  const both = new Uint8Array([...a, ...b]);
  assert.deepEqual(
    codec.decode(both).exitedAt,
    fromBinary(Task.method.state.output, both).exitedAt,
  );
});
