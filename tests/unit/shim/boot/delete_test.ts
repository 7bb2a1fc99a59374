// The `delete` action with a recording runtime (unit test: no containerd, no runc). It must run
// the runtime's forced delete when a server may have died, and skip it when the server left the
// marker saying it already deleted the container.
import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { DeleteResponseSchema } from "../../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { runDelete } from "../../../../sdk/shim/boot/delete.ts";
import { RUNTIME_DELETED_FILE } from "../../../../sdk/shim/contract/bundle_files.ts";
import { parseShimFlags } from "../../../../sdk/shim/contract/flags.ts";
import type { Shim } from "../../../../sdk/shim/shim.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";

function recordingShim(calls: string[]): Shim<{ root: string }> {
  return {
    options: { defaults: () => ({ root: "/r" }) },
    runtime: () => ({
      delete: (id: string, o?: { force?: boolean }) => {
        calls.push(`delete ${id} force=${o?.force === true}`);
        return Promise.resolve();
      },
    }),
  } as unknown as Shim<{ root: string }>;
}

async function deleteIn(bundle: string, calls: string[]) {
  const flags = parseShimFlags(["-namespace", "ns", "-id", "c1", "-bundle", bundle, "delete"]);
  const bytes = await runDelete(recordingShim(calls), flags, new Logger({ sink: () => {} }));
  return fromBinary(DeleteResponseSchema, bytes);
}

Deno.test("delete runs the runtime's forced delete unless the server already deleted", async () => {
  const bundle = await Deno.makeTempDir({ prefix: "skiff-delete-action-" });
  try {
    await Deno.writeTextFile(`${bundle}/init.pid`, "4242\n");
    const calls: string[] = [];
    const dead = await deleteIn(bundle, calls);
    assert.deepEqual(calls, ["delete c1 force=true"]);
    assert.equal(dead.pid, 4242);
    assert.equal(dead.exitStatus, 137);

    await Deno.writeTextFile(`${bundle}/${RUNTIME_DELETED_FILE}`, "");
    const clean = await deleteIn(bundle, calls);
    assert.deepEqual(calls, ["delete c1 force=true"], "no second runtime delete");
    assert.equal(clean.pid, 4242);
    assert.equal(clean.exitStatus, 137);
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
});
