/**
 * Shared servers and the Sandbox API (`sandboxer = "shim"`), driven through containerd's gRPC
 * sandbox store and controller as CRI does, on containerd 2.2 and the newest 2.x here: the runc
 * example installed with `sharedPods: 3`. Two sandboxes are served by one process, each with its
 * own socket and its own container (routed by task API endpoint, no `start` of their own);
 * stopping and shutting down one sandbox kills its container only and leaves the other sandbox
 * ready and its container running in the same process; the last sandbox's shutdown ends the
 * process, and nothing is left (sockets, mounts). Polls with generous bounds, no durations.
 */
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { exists, integrationTest } from "../../../_integration.ts";
import { containerdVersions, startContainerd } from "../../../../sdk/testing/containerd.ts";
import { containerdClient } from "../../../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec, mountsUnder } from "../../../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../../../sdk/install/examples.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { alive, eventually, LAUNCHER } from "../../../_spare.ts";

const NS = "skiff-shared-sbx";
const RUNTIME = "io.containerd.skiff-runc.v2";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const enc = new TextEncoder();

function runcOptions(init: Parameters<typeof create<typeof RuncOptionsSchema>>[1]): Any {
  return create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, init)),
  });
}

const twos = containerdVersions().filter((v) => /^2\.(2|[3-9])\./.test(v.version));
const chosen = [twos.find((v) => v.version.startsWith("2.2.")), twos.at(-1)]
  .filter((v, i, all) => v !== undefined && all.indexOf(v) === i);

integrationTest("shared servers' Sandbox API test has containerd 2.2+", {
  root: true,
  check: () => chosen.length > 0 ? undefined : "containerd 2.2+ (run tests/setup/prepare.sh)",
}, () => Promise.resolve());

for (const v of chosen) {
  integrationTest(
    `shared servers under containerd ${
      v!.version
    }, shim sandboxer: two sandboxes in one process, one stopped, then the other`,
    { root: true, binaries: ["runc", "busybox"] },
    async () => {
      const tmp = await Deno.makeTempDir({ prefix: "skiff-shared-sbx-" });
      const [launcher] = await installExampleShims({
        prefix: tmp,
        shims: { [LAUNCHER]: "examples/runc/main.ts" },
        sharedPods: 3,
      });
      const c = await startContainerd({
        binDir: v!.binDir,
        extraPath: [launcher.slice(0, launcher.lastIndexOf("/"))],
      });
      const cl = containerdClient(c.address, NS);
      const rootfs = await createBusyboxBundle({ args: ["true"] });
      const root = `${tmp}/runc-root`;
      try {
        const sandboxes = ["sbx-a", "sbx-b"];
        const pids: number[] = [];
        const endpoints: string[] = [];
        for (const sandboxId of sandboxes) {
          const sandbox = {
            sandboxId,
            runtime: { name: RUNTIME, options: runcOptions({ root }) },
            sandboxer: "shim",
            labels: {},
            extensions: {},
          };
          await cl.sandboxStore.create({ sandbox });
          await cl.sandboxController.create({ sandboxId, sandboxer: "shim", sandbox });
          const started = await cl.sandboxController.start({ sandboxId, sandboxer: "shim" });
          pids.push(started.pid);
          const bootstrap = JSON.parse(
            await Deno.readTextFile(
              `${c.state}/io.containerd.sandbox.controller.v1.shim/${NS}/${sandboxId}/bootstrap.json`,
            ),
          );
          endpoints.push(`${bootstrap.protocol}+${bootstrap.address}`);
        }
        assert.equal(pids[0], pids[1], `one process serves both sandboxes: ${pids}`);
        assert.notEqual(endpoints[0], endpoints[1], "each sandbox has its own socket");

        // One container per sandbox, routed by its sandbox's endpoint (no `start` of its own).
        const run = async (sandboxId: string, endpoint: string, id: string) => {
          const spec = createOciSpec({ args: ["sh", "-c", "echo up; exec sleep 600"] });
          (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: false };
          await cl.containers.create({
            container: {
              id,
              runtime: { name: RUNTIME },
              spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
              sandbox: sandboxId,
              labels: {},
              extensions: {},
            },
          });
          await cl.tasks.create({
            containerId: id,
            stdout: `file://${tmp}/${id}.out`,
            stderr: `file://${tmp}/${id}.out`,
            options: runcOptions({ taskApiAddress: endpoint, taskApiVersion: 3 }),
          });
          await cl.tasks.start({ containerId: id });
        };
        await run("sbx-a", endpoints[0]!, "ctr-a");
        await run("sbx-b", endpoints[1]!, "ctr-b");

        // The first sandbox stopped and shut down: its container only.
        await cl.sandboxController.stop({ sandboxId: "sbx-a", sandboxer: "shim", timeoutSecs: 5 });
        assert.equal((await cl.tasks.wait({ containerId: "ctr-a" })).exitStatus, 137);
        await cl.tasks.delete({ containerId: "ctr-a" });
        await cl.containers.delete({ id: "ctr-a" });
        await cl.sandboxController.shutdown({ sandboxId: "sbx-a", sandboxer: "shim" });
        await cl.sandboxStore.delete({ sandboxId: "sbx-a" });
        await eventually(
          "the first sandbox's socket gone",
          async () => await exists(endpoints[0]!.replace("ttrpc+unix://", "")) ? undefined : true,
        );
        assert.ok(alive(pids[0]!), "the process serves the other sandbox on");
        const b = await cl.sandboxController.status({ sandboxId: "sbx-b", sandboxer: "shim" });
        assert.equal(b.state, "SANDBOX_READY", "the other sandbox");
        const task = await cl.tasks.get({ containerId: "ctr-b" });
        assert.equal(task.process?.status, 2, /* RUNNING */ "the other sandbox's container");

        // The last one: the process ends, nothing is left.
        await cl.sandboxController.stop({ sandboxId: "sbx-b", sandboxer: "shim", timeoutSecs: 5 });
        assert.equal((await cl.tasks.wait({ containerId: "ctr-b" })).exitStatus, 137);
        await cl.tasks.delete({ containerId: "ctr-b" });
        await cl.containers.delete({ id: "ctr-b" });
        await cl.sandboxController.shutdown({ sandboxId: "sbx-b", sandboxer: "shim" });
        await cl.sandboxStore.delete({ sandboxId: "sbx-b" });
        await eventually("the shared process exits", () => alive(pids[0]!) ? undefined : true);
        for (const e of endpoints) {
          assert.equal(await exists(e.replace("ttrpc+unix://", "")), false, `${e} removed`);
        }
        assert.deepEqual(await mountsUnder(c.state), []);
      } finally {
        await c.stop();
        await rootfs.cleanup();
        await Deno.remove(tmp, { recursive: true }).catch(() => {});
      }
    },
  );
}
