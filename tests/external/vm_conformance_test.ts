/**
 * The conformance catalogue against skiff's VM example (a QEMU microVM per pod) on
 * containerd 2.4: every scenario passes, the terminal exec (exec-tty) included, and nothing of
 * its VMs (QEMU, state dir, mount) is left.
 * Skips where containerd 2.4, qemu or the VM image is missing (fails under
 * SKIFF_REQUIRE_INTEGRATION=1); the whole run takes ~3-4 min on a 2-core machine under TCG.
 */

import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { buildVmImage, vmUnavailable } from "../../examples/vm/image.ts";
import { runConformance } from "../../sdk/testing/conformance/runner.ts";
import { markdownReport } from "../../sdk/testing/conformance/report.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { vmEnv, vmFinish } from "../_vm.ts";

const v24 = containerdVersions().find((v) => v.version.startsWith("2.4."));

integrationTest(
  `conformance: the VM example passes the catalogue on containerd ${v24?.version ?? "2.4"}`,
  {
    root: true,
    check: () =>
      v24 ? vmUnavailable() : "containerd 2.4 in the skiff cache (tests/setup/prepare.sh)",
  },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-conformance-" });
    try {
      await buildVmImage();
      await installExampleShims({ prefix });
      const report = await runConformance({
        runtime: "io.containerd.skiff-vm.v2",
        shimDir: `${prefix}/bin`,
        containerd: [v24!.version],
        runcOptions: false,
        // This test's own VM state dir: the VMs of tests beside it are neither seen nor killed.
        env: vmEnv(),
      });
      const md = markdownReport(report);
      assert.deepEqual(report.results.filter((r) => r.status === "fail"), [], md);
      // Every scenario applies to the VM and passes, terminals (exec-tty) and the live upgrade
      // (QEMU and the agent carried) included.
      const skipped = report.results.filter((r) => r.status === "skip");
      assert.deepEqual(skipped.map((r) => [r.scenario, r.reason]), [], md);
      for (const id of ["exec-tty", "live-upgrade"]) {
        assert.equal(report.results.find((r) => r.scenario === id)?.status, "pass", md);
      }
      console.log(md);
    } finally {
      await Deno.remove(prefix, { recursive: true });
    }
    assert.deepEqual(await vmFinish(), [], "nothing of the catalogue's VMs is left");
  },
);
