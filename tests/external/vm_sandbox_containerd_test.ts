/**
 * The VM example (`io.containerd.skiff-vm.v2`) on containerd's `shim` sandboxer, where the pod's
 * sandbox is the VM itself (the Sandbox API: CreateSandbox/StartSandbox boot it, StopSandbox
 * ends it, Wait/Status report it; no pause container), and the pod's containers reach the
 * sandbox's shim at its task-API endpoint and run in its VM.
 *
 * - CRI on containerd 2.3 and 2.4 with `sandboxer = "shim"`: a pod (one VM), two containers and
 *   more in it, ExecSync's exit code, CRI's container logs, exit code 7, StopContainer's SIGTERM,
 *   stop and remove the pod, nothing left (2.1.9's CRI panics on that configuration for every
 *   runtime: docs/containerd-config.md).
 * - CRI on 2.4 again, where the pod's VM dies (QEMU SIGKILLed): the pod is not ready, its
 *   container has exited (255), nothing of the VM is left, and removing the pod ends the shim.
 * - containerd 2.1.9 through its gRPC sandbox store and controller as CRI drives them, with the
 *   endpoint in the legacy runc-options carrier for one container and in CreateTaskRequest's
 *   fields for the other (which 2.1.9 drops, finding the shim by the sandbox id); then the VM
 *   dies: Wait returns 137, Status says not ready, the container still running ends (255), and
 *   nothing of the VM is left.
 *
 * The podsandbox path (CRI's pause container boots the VM): tests/external/vm_shim_containerd_test.ts.
 */
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { parse as parseToml } from "smol-toml";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { containerdClient } from "../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../../sdk/testing/bundle.ts";
import { vmUnavailable } from "../../examples/vm/image.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import {
  installVmShim,
  killVmsAfter,
  until,
  VM_CALL_MS,
  VM_RUNTIME,
  vmEnv,
  vmFinish,
  vmLeftovers,
  vmQemus,
} from "../_vm.ts";
import { criVmDies, criVmPod, criVmUpgrade } from "../_vm_cri.ts";

const NEEDS = { root: true, binaries: ["qemu-system-x86_64", "runc", "mount"] };

/** The VM runtime's CRI handler as docs/containerd-config.md shows it, which the CRI test runs. */
async function documentedHandler(): Promise<Record<string, unknown>> {
  const doc = await Deno.readTextFile(new URL("../../docs/containerd-config.md", import.meta.url));
  const first = "# containerd 2.3+, the VM runtime on the shim sandboxer\n";
  const block = [...doc.matchAll(/```toml\n([\s\S]*?)```/g)].find((m) => m[1]!.startsWith(first));
  assert.ok(block, `docs/containerd-config.md has a toml block starting with ${first}`);
  const cfg = JSON.parse(JSON.stringify(parseToml(block[1]!)));
  return cfg.plugins["io.containerd.cri.v1.runtime"].containerd.runtimes["skiff-vm"];
}

Deno.test("docs/containerd-config.md: the VM runtime's shim sandboxer handler", async () => {
  assert.deepEqual(await documentedHandler(), {
    runtime_type: VM_RUNTIME,
    sandboxer: "shim",
    options: { MemoryMiB: 768, Cpus: 1 },
  });
});

// CRI with `sandboxer = "shim"`: 2.3 and 2.4 (2.1.9's CRI panics on it), the documented handler.
const criVersions = containerdVersions().filter((x) => /^2\.(3|4)\./.test(x.version));
for (const cv of criVersions.length > 0 ? criVersions : [undefined]) {
  integrationTest(
    `CRI on containerd ${cv?.version ?? "2.3, 2.4"}: a pod is one VM on the shim sandboxer`,
    {
      ...NEEDS,
      check: () =>
        cv ? vmUnavailable() : "containerd 2.3/2.4 in the skiff cache (tests/setup/prepare.sh)",
    },
    async () => {
      const handler = await documentedHandler();
      assert.equal(handler.sandboxer, "shim");
      await criVmPod(cv!, "shim", handler.options as { MemoryMiB: number; Cpus: number });
    },
  );
}

// A VM that dies under CRI on the shim sandboxer (2.4): CRI learns it from WaitSandbox.
const cv24 = criVersions.find((x) => x.version.startsWith("2.4."));
integrationTest(
  `CRI on containerd ${cv24?.version ?? "2.4"}, shim sandboxer: a pod whose VM dies is not ready`,
  {
    ...NEEDS,
    check: () => cv24 ? vmUnavailable() : "containerd 2.4 in the skiff cache (prepare.sh)",
  },
  () => criVmDies(cv24!),
);

// Live upgrade under CRI on the shim sandboxer (2.4): the sandbox's end is the new code's to see.
integrationTest(
  `CRI on containerd ${cv24?.version ?? "2.4"}, shim sandboxer: a pod upgraded live twice`,
  {
    ...NEEDS,
    check: () => cv24 ? vmUnavailable() : "containerd 2.4 in the skiff cache (prepare.sh)",
  },
  () => criVmUpgrade(cv24!, "shim"),
);

const NS = "skiff-vm-sbx";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const enc = new TextEncoder();
const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));
const bounded = { timeoutMs: VM_CALL_MS };

integrationTest(
  `containerd ${v21?.version ?? "2.1"} shim sandboxer (gRPC): the sandbox is the VM; ` +
    "both carriers of the endpoint; a VM that dies is an exited sandbox",
  {
    ...NEEDS,
    check: () => v21 ? vmUnavailable() : "containerd 2.1 in the skiff cache (prepare.sh)",
  },
  async () => {
    const tmp = await Deno.makeTempDir({ prefix: "skiff-vm-sbx-" });
    const launcherDir = await installVmShim(tmp);
    const rootfs = await createBusyboxBundle({ args: ["true"] });
    let c: PrivateContainerd | undefined;
    using _bound = killVmsAfter("vm sandbox test");
    try {
      c = await startContainerd({
        binDir: v21!.binDir,
        extraPath: [launcherDir],
        env: vmEnv(),
      });
      const cl = containerdClient(c.address, NS);
      const sandboxId = "vm-pod";
      const shim = { sandboxId, sandboxer: "shim" };

      // The sandbox: the store's record, then the controller's Create and Start, as CRI does.
      const sandbox = {
        sandboxId,
        runtime: { name: VM_RUNTIME },
        sandboxer: "shim",
        labels: {},
        extensions: {},
      };
      await cl.sandboxStore.create({ sandbox });
      const t0 = performance.now();
      await cl.sandboxController.create({ ...shim, sandbox }, bounded);
      const started = await cl.sandboxController.start(shim, bounded);
      console.log(
        `Sandbox API create+start (VM boot): ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
      const [qemu] = vmQemus();
      assert.ok(qemu, "StartSandbox booted the VM");
      assert.equal(started.pid, qemu, "the sandbox's pid is its VM's");
      assert.equal((await cl.sandboxController.status(shim)).state, "SANDBOX_READY");

      // Two containers, the sandbox's endpoint carried both ways: in runc options (the legacy
      // carrier of containerd 2.0-2.3's client) and in CreateTaskRequest's task_api_address and
      // task_api_version (2.3.1+'s fields 11/12), which 2.1.9's daemon does not know: it finds
      // the sandbox's shim by the container's sandbox id instead.
      const bootstrap = JSON.parse(
        await Deno.readTextFile(
          `${c.state}/io.containerd.sandbox.controller.v1.shim/${NS}/${sandboxId}/bootstrap.json`,
        ),
      );
      const endpoint = {
        taskApiAddress: `${bootstrap.protocol}+${bootstrap.address}`,
        taskApiVersion: bootstrap.version,
      };
      const carrier = create(AnySchema, {
        typeUrl: "containerd.runc.v1.Options",
        value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, endpoint)),
      });
      const run = async (id: string, script: string, legacy: boolean) => {
        const spec = createOciSpec({ args: ["sh", "-c", script] });
        (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: false };
        await cl.containers.create({
          container: {
            id,
            runtime: { name: VM_RUNTIME },
            spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
            sandbox: sandboxId,
            labels: {},
            extensions: {},
          },
        });
        const out = `${tmp}/${id}.out`;
        await cl.tasks.create({
          containerId: id,
          stdout: `file://${out}`,
          stderr: `file://${out}`,
          ...(legacy ? { options: carrier } : endpoint),
        }, bounded);
        await cl.tasks.start({ containerId: id }, bounded);
        return out;
      };
      // The guest's kernel command line names its agent: the process ran in the VM.
      const where = "$(grep -o skiff.agent /proc/cmdline)";
      const jobOut = await run("job", `echo job-in-${where}; exit 4`, true);
      const daemonOut = await run("daemon", `echo daemon-in-${where}; exec sleep 600`, false);
      assert.equal(vmQemus().length, 1, "both containers run in the sandbox's VM");
      assert.equal(c.shims().length, 1, "one shim: the sandbox's");
      assert.equal((await cl.tasks.wait({ containerId: "job" }, bounded)).exitStatus, 4);
      assert.equal(await Deno.readTextFile(jobOut), "job-in-skiff.agent\n");
      await until(
        "the daemon's output",
        async () =>
          (await Deno.readTextFile(daemonOut).catch(() => "")) === "daemon-in-skiff.agent\n",
      );
      await cl.tasks.delete({ containerId: "job" }, bounded);
      await cl.containers.delete({ id: "job" });

      // The VM dies: the sandbox has exited (QEMU's 137), its container ended with it.
      const waited = cl.sandboxController.wait(shim, bounded);
      Deno.kill(qemu, "SIGKILL");
      const exit = await waited;
      assert.equal(exit.exitStatus, 137, "WaitSandbox: QEMU's exit (SIGKILL)");
      const status = await cl.sandboxController.status(shim);
      assert.equal(status.state, "SANDBOX_NOTREADY");
      assert.ok(status.exitedAt, "Status: the exit time");
      assert.equal((await cl.tasks.wait({ containerId: "daemon" }, bounded)).exitStatus, 255);
      await until("the dead VM's state to be gone", async () => (await vmLeftovers()).length === 0);

      // Stop, delete, shut down: the shim exits, nothing is left.
      await cl.tasks.delete({ containerId: "daemon" }, bounded);
      await cl.containers.delete({ id: "daemon" });
      await cl.sandboxController.stop({ ...shim, timeoutSecs: 5 }, bounded);
      await cl.sandboxController.shutdown(shim, bounded);
      await cl.sandboxStore.delete({ sandboxId });
      await until("the sandbox's shim to exit", () => Promise.resolve(c!.shims().length === 0));
    } catch (e) {
      if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-8000)}`);
      throw e;
    } finally {
      await c?.stop();
      await rootfs.cleanup();
      await Deno.remove(tmp, { recursive: true }).catch(() => {});
    }
    assert.deepEqual(await vmFinish(), [], "nothing of the VM is left");
  },
);
