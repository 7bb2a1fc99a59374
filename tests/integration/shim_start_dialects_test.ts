// The real runc example's `start`, in each containerd dialect: what it prints and where it
// listens. The 2.3+ dialect (BootstrapParams on stdin, a protobuf BootstrapResult back) is
// played by the harness byte for byte (socket_dir and extension options included);
// start_stdin_containerd_test.ts records what real containerd 2.3.7 and 2.4.2 send.
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { integrationTest } from "../_integration.ts";
import { ShimHarness } from "../../sdk/testing/harness.ts";
import { createBusyboxBundle } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { BootstrapParamsSchema } from "../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";

integrationTest(
  "skiff runc shim start answers containerd 1.6, 2.x and 2.3+ each in its own dialect",
  { root: true, binaries: ["runc", "busybox"] },
  async (t) => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-dialects-" });
    const [shim] = await installExampleShims({ prefix });
    const binOf = (v: string) => containerdVersions().find((x) => x.version.startsWith(v))?.binDir;
    const run = async (
      id: string,
      opts: { publishBinary?: string; stdin?: Uint8Array },
      check: (h: ShimHarness, bundle: string) => Promise<void>,
    ) => {
      const { bundle, cleanup } = await createBusyboxBundle({ args: ["sh", "-c", "exit 2"] });
      const h = await ShimHarness.start({ shim, bundle, id, ...opts });
      try {
        await check(h, bundle);
      } finally {
        await h.close();
        await cleanup();
      }
    };

    await t.step(
      "containerd 1.6: the plain address (1.6 reads all output as the address)",
      async () => {
        const bin = binOf("1.6");
        assert.ok(bin, "containerd 1.6");
        await run("d16", { publishBinary: `${bin}/containerd` }, (h) => {
          assert.equal(h.version, 2);
          assert.match(h.address, /^unix:\/\/\/run\/containerd\/s\/[0-9a-f]{64}$/);
          return Promise.resolve();
        });
      },
    );

    await t.step("containerd 2.1: JSON with task API version 3", async () => {
      const bin = binOf("2.1");
      assert.ok(bin, "containerd 2.1");
      await run("d21", { publishBinary: `${bin}/containerd` }, (h) => {
        assert.equal(h.version, 3);
        return Promise.resolve();
      });
    });

    await t.step(
      "containerd 2.3+: BootstrapParams in, BootstrapResult out, socket_dir and extension options honoured",
      async () => {
        // A socket path must fit in 106 bytes: <dir>/<64 hex digits>.
        const socketDir = `${await Deno.makeTempDir({ prefix: "sk" })}/s`;
        const runcRoot = `${prefix}/runc-root`;
        const id = "d23";
        const stdin = toBinary(
          BootstrapParamsSchema,
          create(BootstrapParamsSchema, {
            instanceId: id,
            namespace: "skiff-test",
            containerdVersion: "2.3.1",
            socketDir,
            extensions: [{
              value: create(AnySchema, {
                typeUrl: "containerd.runc.v1.Options",
                value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { root: runcRoot })),
              }),
            }],
          }),
        );
        await run(id, { stdin }, async (h, bundle) => {
          assert.equal(h.version, 3);
          assert.ok(h.address.startsWith(`unix://${socketDir}/`), h.address);
          assert.equal((await Deno.stat(socketDir)).mode! & 0o777, 0o700);
          assert.equal((await Deno.stat(h.address.slice(7))).mode! & 0o777, 0o600);
          assert.equal(await Deno.readTextFile(`${bundle}/address`), h.address);
          // Options from the bootstrap extension are the shim's options: runc state lands there.
          await h.task.create({ id, bundle });
          assert.ok((await Deno.stat(`${runcRoot}/skiff-test/${id}`)).isDirectory);
          await h.task.start({ id });
          assert.equal((await h.task.wait({ id })).exitStatus, 2);
          await h.task.delete({ id });
          // A server killed outright: `delete` finds its socket in socket_dir and removes it.
          const { shimPid } = await h.task.connect({ id });
          Deno.kill(shimPid, "SIGKILL");
          for (let i = 0; i < 50; i++) {
            try {
              Deno.kill(shimPid, "SIGCONT");
              await new Promise((r) => setTimeout(r, 20));
            } catch {
              break;
            }
          }
          const del = await h.runDelete();
          assert.equal(del.exitStatus, 137);
          await assert.rejects(Deno.stat(h.address.slice(7)), Deno.errors.NotFound);
        });
        await Deno.remove(socketDir.slice(0, -2), { recursive: true });
      },
    );
    await Deno.remove(prefix, { recursive: true });
  },
);
