// Bad input to a real skiff runc shim (run by the harness as containerd would): clear errors with
// containerd's codes, and nothing lost — the shim keeps serving afterwards.
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { integrationTest } from "../_integration.ts";
import { ShimHarness } from "../../sdk/testing/harness.ts";
import { createBusyboxBundle } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { TaskOOMSchema } from "../../proto/gen/containerd/events/task_pb.ts";

function code(c: Code) {
  return (e: unknown) => ConnectError.from(e).code === c;
}

integrationTest(
  "skiff runc shim answers bad ids, foreign options and a missing runtime binary, then keeps serving",
  { root: true, binaries: ["runc", "busybox"] },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-bad-" });
    const [shim] = await installExampleShims({ prefix });
    const { bundle, cleanup } = await createBusyboxBundle({ args: ["sh", "-c", "exit 4"] });
    const h = await ShimHarness.start({ shim, bundle, id: "bad-input" });
    try {
      await assert.rejects(
        h.task.create({ id: "no/slashes", bundle }),
        (e: unknown) =>
          code(Code.InvalidArgument)(e) && /invalid container id "no\/slashes"/.test(String(e)),
      );
      await assert.rejects(
        h.task.create({
          id: h.id,
          bundle,
          options: create(AnySchema, {
            typeUrl: "containerd.events.TaskOOM",
            value: toBinary(TaskOOMSchema, create(TaskOOMSchema, { containerId: "x" })),
          }),
        }),
        (e: unknown) =>
          code(Code.InvalidArgument)(e) &&
          /"containerd\.events\.TaskOOM" is not accepted by io\.containerd\.skiff-runc\.v2; accepted: containerd\.runc\.v1\.Options, runtimeoptions\.v1\.Options/
            .test(String(e)),
      );
      await assert.rejects(
        h.task.create({
          id: h.id,
          bundle,
          options: create(AnySchema, {
            typeUrl: "containerd.runc.v1.Options",
            value: toBinary(
              RuncOptionsSchema,
              create(RuncOptionsSchema, { binaryName: "/nonexistent/runc" }),
            ),
          }),
        }),
        (e: unknown) => /\/nonexistent\/runc/.test(String(e)),
      );
      await assert.rejects(h.task.state({ id: "ghost" }), code(Code.NotFound));
      // Nothing was lost: the same id now works with good options.
      await h.task.create({ id: h.id, bundle });
      await h.task.start({ id: h.id });
      assert.equal((await h.task.wait({ id: h.id })).exitStatus, 4);
      await h.task.delete({ id: h.id });
    } finally {
      await h.close();
      await cleanup();
      await Deno.remove(prefix, { recursive: true });
    }
  },
);

integrationTest(
  "skiff runc shim runs containers while containerd's event socket is dead",
  { root: true, binaries: ["runc", "busybox"] },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-dead-" });
    const [shim] = await installExampleShims({ prefix });
    const { bundle, cleanup } = await createBusyboxBundle({ args: ["sh", "-c", "exit 6"] });
    const h = await ShimHarness.start({
      shim,
      bundle,
      id: "dead-ctrd",
      env: { TTRPC_ADDRESS: `${prefix}/no-containerd.sock` },
    });
    try {
      await h.task.create({ id: h.id, bundle });
      await h.task.start({ id: h.id });
      assert.equal((await h.task.wait({ id: h.id })).exitStatus, 6);
      await h.task.delete({ id: h.id });
      assert.equal(h.events.length, 0, "no events reach a dead containerd");
      // Still alive and answering.
      const c = await h.task.connect({ id: h.id });
      assert.ok(c.shimPid > 0);
    } finally {
      await h.close();
      await cleanup();
      await Deno.remove(prefix, { recursive: true });
    }
  },
);
