/**
 * Live upgrade of the VM shim (examples/vm) under real containerd 1.6, 2.1 and 2.4: a container in a
 * QEMU guest prints a counter through the agent into containerd's FIFOs (`ctr run`, attached:
 * its `Wait` is pending across every upgrade) while the installed launcher's `upgrade` replaces
 * the shim's code 20 times; after each an exec runs in the guest. The shim's pid and QEMU's
 * pid never change, the counter has no gap and no repeat, the container's exit status comes
 * back, containerd never logs the shim gone, and nothing of the VM is left after the delete.
 * Then the same through CRI (1.6, 2.4) on the podsandbox sandboxer (a pod's pause container and its
 * containers in one shim and one VM); the shim sandboxer's: vm_sandbox_containerd_test.ts.
 *
 * TCG is slow: waits are bounded generously, nothing is timed.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { ctrRunArgs } from "../../sdk/testing/ctr.ts";
import { vmUnavailable } from "../../examples/vm/image.ts";
import {
  installVmShim,
  killVmsAfter,
  until,
  VM_CALL_MS as CALL_MS,
  VM_LAUNCHER,
  VM_RUNTIME as RUNTIME,
  vmEnv,
  vmFinish,
  vmLeftovers,
  vmQemus,
} from "../_vm.ts";
import { criVmUpgrade } from "../_vm_cri.ts";
import { shimLossLines } from "../_spare.ts";

const NS = "skiff-vm-upgrade";
const UPGRADES = 20;
const dec = new TextDecoder();

function describe(r: Pick<CtrResult, "code" | "stdout" | "stderr">): string {
  return `code ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

/** `ctr run` attached, in the background: its exit code and output. */
function runAttached(c: PrivateContainerd, image: string, id: string, script: string) {
  const args = ctrRunArgs(c, {
    id,
    namespace: NS,
    image,
    runtime: RUNTIME,
    cgroup: "",
    args: ["sh", "-c", script],
  });
  const child = new Deno.Command(`${c.binDir}/ctr`, {
    args: ["-a", c.address, "-n", NS, ...args],
    env: c.ctrEnv,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 3 * CALL_MS);
  return child.output().then((o) => ({
    code: o.code,
    stdout: dec.decode(o.stdout),
    stderr: dec.decode(o.stderr),
  })).finally(() => clearTimeout(timer));
}

const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));
for (const v of versions.length > 0 ? versions : [undefined]) {
  integrationTest(
    `containerd ${
      v?.version ?? "1.6, 2.1, 2.4"
    }: the VM shim upgrades live ${UPGRADES} times under a counter; QEMU and the agent carry on`,
    {
      root: true,
      binaries: ["qemu-system-x86_64", "runc", "mount"],
      check: () =>
        v
          ? vmUnavailable()
          : "containerd 1.6, 2.1, 2.4 in the skiff cache (tests/setup/prepare.sh)",
    },
    async () => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-upgrade-" });
      const launcherDir = await installVmShim(prefix);
      const launcher = `${launcherDir}/${VM_LAUNCHER}`;
      let c: PrivateContainerd | undefined;
      using _bound = killVmsAfter("vm upgrade test", 12 * 60_000);
      try {
        c = await startContainerd({ binDir: v!.binDir, extraPath: [launcherDir], env: vmEnv() });
        const image = await c.importBusyboxImage(NS);
        const ctr = (args: string[]) => c!.ctr(args, { namespace: NS, timeoutMs: CALL_MS });
        const id = "counter";
        // Counts until the test creates /tmp/stop (no timing in the test), then exits 3. It
        // exits only once the exec that created the file is gone: the init's exit ends its pid
        // namespace, whose kernel SIGKILLs a process still in it (the exec would report 137).
        const done = runAttached(
          c,
          image,
          id,
          "i=0; while [ ! -e /tmp/stop ]; do echo $i; i=$((i+1)); usleep 20000; done; " +
            "p=$(cat /tmp/stop); while kill -0 $p 2>/dev/null; do usleep 1000; done; echo end; exit 3",
        );
        await until("the counter to run", async () => {
          const ls = await ctr(["task", "ls"]);
          return new RegExp(`${id}\\s+\\d+\\s+RUNNING`).test(ls.stdout);
        }, CALL_MS);
        const qemus = vmQemus();
        assert.equal(qemus.length, 1, "one VM");
        let shimPid: string | undefined;
        for (let i = 1; i <= UPGRADES; i++) {
          const r = await new Deno.Command(launcher, {
            args: [
              "upgrade",
              "--id",
              id,
              "--namespace",
              NS,
              "--force",
              "--state-dir",
              `${c.state}/io.containerd.runtime.v2.task`,
            ],
            stdin: "null",
          }).output();
          const out = dec.decode(r.stdout) + dec.decode(r.stderr);
          assert.equal(r.code, 0, `upgrade ${i}: ${out}`);
          const m = /pid (\d+) \S+: upgraded/.exec(out);
          assert.ok(m, `upgrade ${i} reports the shim upgraded: ${out}`);
          shimPid ??= m[1];
          assert.equal(m[1], shimPid, "the same shim process");
          assert.deepEqual(vmQemus(), qemus, "the same QEMU");
          const exec = await ctr([
            "task",
            "exec",
            "--exec-id",
            `e${i}`,
            id,
            "sh",
            "-c",
            `echo e${i}; exit ${i}`,
          ]);
          assert.equal(exec.code, i, describe(exec));
          assert.equal(exec.stdout, `e${i}\n`, describe(exec));
        }
        // Asked while the task runs: containerd logs these lines too when a shim exits after its
        // last task.
        assert.deepEqual(await shimLossLines(c, id), [], "containerd never lost the shim");
        const stop = await ctr([
          "task",
          "exec",
          "--exec-id",
          "stop",
          id,
          "sh",
          "-c",
          "echo $$ > /tmp/stop.next && mv /tmp/stop.next /tmp/stop",
        ]);
        assert.equal(stop.code, 0, describe(stop));
        const counted = await done;
        assert.equal(counted.code, 3, describe(counted));
        const lines = counted.stdout.trimEnd().split("\n");
        assert.equal(lines.pop(), "end", describe(counted));
        assert.ok(lines.length > 0, "the counter printed");
        lines.forEach((l, n) => assert.equal(l, String(n), `line ${n} of the counter`));
        await until("the VM to be gone", async () => (await vmLeftovers()).length === 0);
        await until("the shim to exit", () => Promise.resolve(c!.shims().length === 0));
      } catch (e) {
        if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-6000)}`);
        throw e;
      } finally {
        await c?.stop();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
      assert.deepEqual(await vmFinish(), [], "nothing of the VM is left");
    },
  );
}

// Kubernetes' path on the podsandbox sandboxer: CRI's pause container and the pod's containers
// share one shim and one VM, upgraded together.
const criVersions = versions.filter((v) => !v.version.startsWith("2.1."));
for (const v of criVersions.length > 0 ? criVersions : [undefined]) {
  integrationTest(
    `CRI on containerd ${v?.version ?? "1.6, 2.4"}, podsandbox: a pod upgraded live twice`,
    {
      root: true,
      binaries: ["qemu-system-x86_64", "runc", "mount"],
      check: () =>
        v ? vmUnavailable() : "containerd 1.6 and 2.4 in the skiff cache (tests/setup/prepare.sh)",
    },
    () => criVmUpgrade(v!, "podsandbox"),
  );
}
