// The lean descriptors the ttrpc server hands to handler contexts and interceptors for services
// served from wire codecs agree, field by field, with protobuf-es's real descriptors of every
// such service (the Task API and containerd's events service), as the generated wire tables
// name them.
import assert from "node:assert/strict";
import type { DescService } from "@bufbuild/protobuf";
import { leanService } from "../../../sdk/ttrpc/lean_descriptor.ts";
import { EVENTS_SERVICE, TASK_SERVICE } from "../../../proto/shim_wire.ts";
import { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Events } from "../../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";

type Table = {
  typeName: string;
  methods: Record<string, { name: string; input: string; output: string }>;
};

function compare(table: Table, real: DescService) {
  const { service, methods } = leanService(table.typeName, Object.values(table.methods));
  assert.equal(service.kind, real.kind);
  assert.equal(service.typeName, real.typeName);
  assert.equal(service.name, real.name);
  assert.equal(String(service), String(real));
  assert.deepEqual(service.methods.map((m) => m.name), real.methods.map((m) => m.name));
  for (const r of real.methods) {
    const m = methods.get(r.name);
    assert.ok(m, `${real.typeName}/${r.name} missing from the lean descriptor`);
    assert.equal(m.kind, r.kind);
    assert.equal(m.localName, r.localName, `${r.name}: localName`);
    assert.equal(m.methodKind, r.methodKind, `${r.name}: methodKind`);
    assert.equal(m.input.typeName, r.input.typeName, `${r.name}: input`);
    assert.equal(m.output.typeName, r.output.typeName, `${r.name}: output`);
    assert.equal(m.parent, service);
    assert.equal(String(m), String(r));
    assert.equal(service.method[m.localName], m);
  }
}

Deno.test("the Task API's lean descriptors match protobuf-es's", () => compare(TASK_SERVICE, Task));

Deno.test("the events service's lean descriptors match protobuf-es's", () =>
  compare(EVENTS_SERVICE, Events));

Deno.test("a lean descriptor's local name lower-cases the first letter only", () => {
  const { methods } = leanService("a.b.Svc", [{
    name: "ResizePty",
    input: "a.In",
    output: "a.Out",
  }]);
  assert.equal(methods.get("ResizePty")?.localName, "resizePty");
});
