import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { StatusSchema } from "../../../proto/gen/google/rpc/status_pb.ts";
import { KeyValueSchema } from "../../../proto/gen/ttrpc/request_pb.ts";
import { errorFromStatus, statusFromError } from "../../../sdk/ttrpc/status_connect.ts";

Deno.test("statusFromError() keeps a ConnectError's code and raw message", () => {
  const s = statusFromError(new ConnectError("container c1 not found", Code.NotFound));
  assert.equal(s.code, 5);
  assert.equal(s.message, "container c1 not found");
});

Deno.test("statusFromError() maps plain errors and other thrown values to Unknown with their message", () => {
  assert.deepEqual(
    [
      statusFromError(new TypeError("bad thing")).code,
      statusFromError(new TypeError("bad thing")).message,
    ],
    [Code.Unknown, "bad thing"],
  );
  const s = statusFromError("just a string");
  assert.equal(s.code, Code.Unknown);
  assert.equal(s.message, "just a string");
  assert.equal(statusFromError(42).message, "42");
});

Deno.test("statusFromError() packs details with bare type names", () => {
  const err = new ConnectError("bad", Code.InvalidArgument, undefined, [
    { desc: KeyValueSchema, value: { key: "k", value: "v" } },
  ]);
  const s = statusFromError(err);
  assert.equal(s.details.length, 1);
  assert.equal(s.details[0].typeUrl, "ttrpc.KeyValue");
});

Deno.test("errorFromStatus() maps every gRPC code 1..16 to the same Connect code", () => {
  for (let code = 1; code <= 16; code++) {
    const err = errorFromStatus(create(StatusSchema, { code, message: `m${code}` }));
    assert.equal(err.code, code);
    assert.equal(err.rawMessage, `m${code}`);
  }
});

Deno.test("errorFromStatus() maps codes outside 1..16 to Unknown", () => {
  assert.equal(
    errorFromStatus(create(StatusSchema, { code: 99, message: "x" })).code,
    Code.Unknown,
  );
  assert.equal(
    errorFromStatus(create(StatusSchema, { code: -1, message: "x" })).code,
    Code.Unknown,
  );
});

Deno.test("errorFromStatus() keeps details so findDetails() decodes them", () => {
  const original = new ConnectError("bad", Code.InvalidArgument, undefined, [
    { desc: KeyValueSchema, value: { key: "k", value: "v" } },
  ]);
  const back = errorFromStatus(statusFromError(original));
  const [kv] = back.findDetails(KeyValueSchema);
  assert.equal(kv.key, "k");
  assert.equal(kv.value, "v");
});
