/**
 * Kubernetes' CRI validation suite (critest, cri-tools 1.37.0) on private containerd 2.1.9 and
 * 2.4.2, once per handler: containerd's Go runc shim (`runc`, the reference), `skiff-runc`, and
 * on 2.1 also `skiff-runc-compat` (skiff registered as `io.containerd.runc.v2` with
 * `runtime_path`), all on one containerd per version (sdk/testing/critest.ts; `skiff-runsc` runs
 * on demand, see docs/conformance.md). Fails when a skiff handler does not pass a spec the Go
 * shim passed in the same run, or when the Go shim passed so few specs that the comparison would
 * mean nothing. Each handler's run has a deadline, so a
 * hang fails the test instead of wedging CI. `deno task critest` prints the same matrix
 * (docs/conformance.md), and runs the other containerd versions on demand.
 */
import assert from "node:assert/strict";
import { dirname } from "node:path";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import {
  CNI_BIN_DIR,
  CRITEST_SKIPS,
  critestBinary,
  critestRegressions,
  type CritestRun,
  runCritestMatrix,
} from "../../sdk/testing/critest.ts";
import { CI_CRITEST_VERSIONS } from "../../sdk/testing/critest_cli.ts";
import { registryBinary } from "../../sdk/testing/registry.ts";

/** Deadline of one handler's critest run (2 minutes on an idle machine, 6 under a load of 25). */
const RUN_MS = 20 * 60_000;
/** The Go shim passes ~70 of the specs that run here; far fewer means a broken set-up. */
const MIN_REFERENCE_PASSES = 50;

function summary(r: CritestRun): string {
  const by = (st: string) => r.specs.filter((s) => s.state === st).length;
  return `${r.handler}: ${by("passed")} passed, ${by("failed")} failed, ${by("skipped")} skipped` +
    ` in ${r.seconds} s${r.timedOut ? " (timed out)" : ""}`;
}

for (const minor of CI_CRITEST_VERSIONS) {
  const build = containerdVersions().find((v) => v.version.startsWith(`${minor}.`));
  const name = `critest on containerd ${build?.version ?? minor}: skiff's runc shim passes ` +
    "every spec the Go runc shim passes";
  integrationTest(
    name,
    {
      root: true,
      binaries: [
        "runc",
        "busybox",
        "ip",
        critestBinary(),
        registryBinary(),
        `${CNI_BIN_DIR}/bridge`,
      ],
      check: () => build ? undefined : `a containerd ${minor} build (tests/setup/prepare.sh)`,
    },
    async () => {
      const runs = await runCritestMatrix({
        binDir: build!.binDir,
        timeoutMs: RUN_MS,
        keep: true, // the logs stay when the test fails; removed below when it passes
        onRun: (r) => console.log(`critest ${r.version} ${summary(r)}`),
      });
      const ref = runs.find((r) => r.handler === "runc")!;
      const passed = ref.specs.filter((s) => s.state === "passed").length;
      assert.ok(
        passed >= MIN_REFERENCE_PASSES && !ref.timedOut,
        `the Go shim passed only ${passed} specs (${summary(ref)}; log ${ref.logPath})`,
      );
      const regressions = critestRegressions(runs);
      assert.deepEqual(
        regressions,
        [],
        `skiff failed specs the Go shim passed:\n  ${regressions.join("\n  ")}\n${
          runs.map(summary).join("\n")
        }`,
      );
      await Deno.remove(dirname(ref.logPath), { recursive: true });
    },
  );
}

Deno.test("docs/conformance.md lists every spec critest skips here, with its reason", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/conformance.md", import.meta.url));
  const section = doc.slice(doc.indexOf("## CRI validation (critest)"));
  assert.ok(section.length < doc.length, "docs/conformance.md has a critest section");
  for (const s of CRITEST_SKIPS) {
    assert.ok(section.includes(`\`${s.pattern}\``), `the doc names skip pattern ${s.pattern}`);
  }
});
