// containerd 2.1.9's and 2.2.9's `shim` sandboxer with both example shims, driven through
// containerd's gRPC sandbox store and controller as CRI does, and the #9736/#12986 bug scenario
// itself: a container created in a skiff sandbox whose task options are runc options carrying
// only task_api_address/task_api_version, exactly what containerd's own client of those
// releases sends (2.3.7/2.4.2, which carry the fix, through their own Go client:
// sandbox_go_client_containerd_test.ts).
import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { exists, integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { containerdClient } from "../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec, mountsUnder } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { OptionsSchema as CriOptionsSchema } from "../../proto/gen/runtimeoptions/v1/api_pb.ts";
import { MetricsSchema as CgroupsV1MetricsSchema } from "../../proto/gen/io/containerd/cgroups/v1/metrics_pb.ts";
import { shimSocketAddress, socketPath } from "../../sdk/shim/contract/socket_address.ts";
import { createTtrpcTransport } from "../../sdk/ttrpc/transport.ts";
import { createClient } from "@connectrpc/connect";
import { Sandbox } from "../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import { upgradeShim } from "../../sdk/shim/boot/upgrade.ts";

const NS = "skiff-test";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const enc = new TextEncoder();

function anyOf(typeUrl: string, value: Uint8Array): Any {
  return create(AnySchema, { typeUrl, value });
}

/** Shim server processes (not `start`) whose command line names `id`. */
async function shimServers(id: string): Promise<number[]> {
  const pids: number[] = [];
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = (await Deno.readTextFile(`/proc/${e.name}/cmdline`)).split("\0");
      const i = argv.indexOf("-id");
      // A skiff shim: run from the checkout (source launchers) or from its installed bundle.
      const skiff = argv.some((a) =>
        a.includes("examples/run") || a.includes("/lib/skiff/containerd-shim-skiff-")
      );
      if (skiff && i >= 0 && argv[i + 1] === id) {
        pids.push(Number(e.name));
      }
    } catch { /* gone */ }
  }
  return pids;
}

interface Case {
  runtime: string;
  /** The sandbox's runtime options, pointing the runtime at `root`. */
  options: (root: string) => Any;
  /** What proves the container really ran in this runtime. */
  check: (output: string) => void;
}

const cases: Case[] = [
  {
    runtime: "io.containerd.skiff-runsc.v2",
    options: (root) =>
      anyOf(
        "runtimeoptions.v1.Options",
        toBinary(
          CriOptionsSchema,
          create(CriOptionsSchema, {
            configBody: enc.encode(
              `root = "${root}"\n[runsc_config]\nnetwork = "none"\nplatform = "ptrace"\n`,
            ),
          }),
        ),
      ),
    // gVisor's kernel reports itself as 4.4.0.
    check: (out) => assert.match(out, /Linux version 4\.4\.0/),
  },
  {
    runtime: "io.containerd.skiff-runc.v2",
    options: (root) =>
      anyOf(
        "containerd.runc.v1.Options",
        toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { root })),
      ),
    check: (out) => assert.doesNotMatch(out, /Linux version 4\.4\.0 #1 SMP Sun Jan 10/),
  },
];

for (const want of ["2.1", "2.2"]) {
  const v21 = containerdVersions().find((v) => v.version.startsWith(`${want}.`));
  for (const tc of cases) {
    integrationTest(
      `containerd ${
        v21?.version ?? want
      } shim sandboxer: ${tc.runtime} sandbox keeps its options when tasks carry only the endpoint`,
      {
        root: true,
        binaries: ["runc", "runsc"],
        check: () => v21 ? undefined : `containerd ${want} (run tests/setup/prepare.sh)`,
      },
      async () => {
        const tmp = await Deno.makeTempDir({ prefix: "skiff-sbx-" });
        const [runcShim] = await installExampleShims({ prefix: tmp });
        const binDir = runcShim.slice(0, runcShim.lastIndexOf("/"));
        const c = await startContainerd({ binDir: v21!.binDir, extraPath: [binDir] });
        const cl = containerdClient(c.address, NS);
        const rootfs = await createBusyboxBundle({ args: ["true"] });
        const runtimeRoot = `${tmp}/runtime-root`;
        const sandboxId = "sbx1";
        try {
          // 1. The sandbox record, then the controller's Create and Start, as CRI does.
          const sandbox = {
            sandboxId,
            runtime: { name: tc.runtime, options: tc.options(runtimeRoot) },
            sandboxer: "shim",
            labels: {},
            extensions: {},
          };
          await cl.sandboxStore.create({ sandbox });
          await cl.sandboxController.create({ sandboxId, sandboxer: "shim", sandbox });
          const started = await cl.sandboxController.start({ sandboxId, sandboxer: "shim" });
          const [shimPid] = await shimServers(sandboxId);
          assert.ok(shimPid, "a shim server runs for the sandbox");
          assert.equal(started.pid, shimPid, "the sandbox pid is the shim's");
          const status = await cl.sandboxController.status({ sandboxId, sandboxer: "shim" });
          assert.equal(status.state, "SANDBOX_READY");

          // containerd 2.1's controller API leaves address/version empty; CRI gets them
          // in-process. Read the endpoint where containerd keeps it.
          const bootstrap = JSON.parse(
            await Deno.readTextFile(
              `${c.state}/io.containerd.sandbox.controller.v1.shim/${NS}/${sandboxId}/bootstrap.json`,
            ),
          );
          assert.equal(bootstrap.version, 3, "the skiff shim advertises task API v3");
          const endpoint = `${bootstrap.protocol}+${bootstrap.address}`;
          // containerd 2.1's gRPC controller does not implement Platform: ask the shim itself.
          const direct = createTtrpcTransport({ path: socketPath(bootstrap.address) });
          try {
            const platform = await createClient(Sandbox, direct).platform({ sandboxId });
            assert.equal(platform.platform?.os, "linux");
            assert.equal(platform.platform?.architecture, "amd64");
          } finally {
            await direct.close();
          }

          const metrics = await cl.sandboxController.metrics({ sandboxId, sandboxer: "shim" });
          assert.equal(metrics.metrics?.data?.typeUrl, "io.containerd.cgroups.v1.Metrics");
          const m = fromBinary(CgroupsV1MetricsSchema, metrics.metrics!.data!.value);
          assert.ok((m.memory?.usage?.usage ?? 0n) > 0n, "sandbox memory usage is reported");

          // 2. Two containers in the sandbox. Task options = runc options with only the
          //    endpoint fields: what containerd's client (WithTaskAPIEndpoint) sends.
          const carrier = anyOf(
            "containerd.runc.v1.Options",
            toBinary(
              RuncOptionsSchema,
              create(RuncOptionsSchema, { taskApiAddress: endpoint, taskApiVersion: 3 }),
            ),
          );
          const run = async (id: string, script: string) => {
            const spec = createOciSpec({ args: ["sh", "-c", script] });
            (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: false };
            await cl.containers.create({
              container: {
                id,
                runtime: { name: tc.runtime },
                spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
                sandbox: sandboxId,
                labels: {},
                extensions: {},
              },
            });
            const out = `${tmp}/${id}.out`;
            const task = await cl.tasks.create({
              containerId: id,
              stdout: `file://${out}`,
              stderr: `file://${out}`,
              options: carrier,
            });
            assert.ok(task.pid > 0);
            return out;
          };
          const out1 = await run("job", "echo in-sandbox; cat /proc/version; exit 4");
          const out2 = await run("daemon", "echo daemon-up; exec sleep 600");

          // Routed to the sandbox shim: no per-container `start`, socket or server.
          for (const id of ["job", "daemon"]) {
            assert.deepEqual(await shimServers(id), [], `no shim server of its own for ${id}`);
            const own = socketPath(shimSocketAddress(c.address, NS, id));
            assert.equal(await exists(own), false, `no socket of its own for ${id}`);
          }
          // The options configured for the sandbox are the ones in effect (not lost).
          const state = [...Deno.readDirSync(`${runtimeRoot}/${NS}`)].map((e) => e.name).sort();
          // runc keeps `<root>/<ns>/<id>/`, runsc `<root>/<ns>/<id>_sandbox:<id>.state`.
          for (const id of ["job", "daemon"]) {
            assert.ok(
              state.some((n) => n === id || n.startsWith(`${id}_`)),
              `runtime root: ${state}`,
            );
          }

          await cl.tasks.start({ containerId: "job" });
          await cl.tasks.start({ containerId: "daemon" });
          // The sandbox's shim re-executed in place twice (live upgrade): the sandbox, its two
          // tasks and the rest of their life (Wait, Stop, Shutdown) carry on in the new code.
          for (let i = 0; i < 2; i++) {
            const r = await upgradeShim(socketPath(bootstrap.address), {
              token: crypto.randomUUID(),
              force: true,
            });
            assert.equal(r.upgraded, true, JSON.stringify(r));
            assert.equal(r.pid, shimPid, "the sandbox's shim process is the same");
          }
          assert.equal(
            (await cl.sandboxController.status({ sandboxId, sandboxer: "shim" })).state,
            "SANDBOX_READY",
            "the sandbox after the upgrades",
          );
          const waited = await cl.tasks.wait({ containerId: "job" });
          assert.equal(waited.exitStatus, 4);
          const output = await Deno.readTextFile(out1);
          assert.match(output, /in-sandbox/);
          tc.check(output);
          await cl.tasks.delete({ containerId: "job" });
          await cl.containers.delete({ id: "job" });

          // 3. Stop the sandbox: its remaining container is killed.
          await cl.sandboxController.stop({ sandboxId, sandboxer: "shim", timeoutSecs: 5 });
          const killed = await cl.tasks.wait({ containerId: "daemon" });
          assert.equal(killed.exitStatus, 137);
          assert.match(await Deno.readTextFile(out2), /daemon-up/);
          await cl.tasks.delete({ containerId: "daemon" });
          await cl.containers.delete({ id: "daemon" });
          const stopped = await cl.sandboxController.status({ sandboxId, sandboxer: "shim" });
          assert.equal(stopped.state, "SANDBOX_NOTREADY");
          await cl.sandboxController.shutdown({ sandboxId, sandboxer: "shim" });
          await cl.sandboxStore.delete({ sandboxId });

          // 4. Nothing left behind: no shim, no socket, no mounts.
          for (let i = 0; i < 50 && (await shimServers(sandboxId)).length > 0; i++) {
            await new Promise((r) => setTimeout(r, 100));
          }
          assert.deepEqual(await shimServers(sandboxId), [], "the sandbox shim exited");
          const sock = bootstrap.address.replace("unix://", "");
          assert.equal(await exists(sock), false, "the sandbox socket is gone");
          assert.deepEqual(await mountsUnder(c.state), []);
        } finally {
          await c.stop();
          await rootfs.cleanup();
          await Deno.remove(tmp, { recursive: true }).catch(() => {});
        }
      },
    );
  }
}
