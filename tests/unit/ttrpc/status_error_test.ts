// The light errors the short-lived actions share with the server are Connect's to Connect.
import assert from "node:assert/strict";
import { Code as ConnectCode, ConnectError } from "@connectrpc/connect";
import { Code, statusError } from "../../../sdk/ttrpc/status_error.ts";
import { statusOf as statusFromError } from "../../../sdk/ttrpc/status.ts";

Deno.test("statusError() is a ConnectError to Connect: instanceof, from(), code and message", () => {
  const cause = new Error("runc said no");
  const e = statusError('container "c1" not found', Code.NotFound, cause);
  assert.ok(e instanceof ConnectError, "instanceof ConnectError");
  const c = ConnectError.from(e);
  assert.equal(c.code, ConnectCode.NotFound);
  assert.equal(c.rawMessage, 'container "c1" not found');
  assert.equal(c.message, '[not_found] container "c1" not found');
  assert.equal(e.cause, cause);
  // What the ttrpc server answers containerd with.
  const status = statusFromError(e);
  assert.equal(status.code, ConnectCode.NotFound);
  assert.equal(status.message, 'container "c1" not found');
  for (const [name, value] of Object.entries(Code)) {
    assert.equal(value, ConnectCode[name as keyof typeof ConnectCode], name);
  }
});
