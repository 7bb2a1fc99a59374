/**
 * containerd's own integration suite (integration/client, its runtime tests; see
 * tests/external/containerd-suite/suite.ts) against skiff's runc example and, for the
 * comparison, containerd's Go runc shim, on the newest Go-module containerd build. Fails when
 * skiff fails any test or passes fewer than the Go shim. Every step is bounded: the suite build
 * (20 min, cached), each run (15 min; Go's own -test.timeout panics 30 s before, with stacks).
 * `deno task containerd-suite` runs the same on every version (docs/conformance.md).
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { registryBinary } from "../../sdk/testing/registry.ts";
import {
  countRun,
  matrix,
  parseGoTest,
  regressions,
  runMatrix,
  type SuiteRun,
} from "./containerd-suite/suite.ts";

/** The version CI runs (the newest; `deno task containerd-suite` runs all three). */
const CI_VERSION = "2.4.2";

Deno.test("parseGoTest() reads top-level outcomes and each failure's messages", () => {
  const out = [
    "=== RUN   TestA",
    "=== PAUSE TestA",
    "=== RUN   TestB",
    "    client_test.go:10: not this one",
    "--- SKIP: TestB (0.00s)",
    "=== CONT  TestA",
    "    log_hook.go:47: daemon noise",
    "    container_test.go:42: boom",
    "=== RUN   TestA/sub",
    "    --- FAIL: TestA/sub (0.01s)",
    "--- FAIL: TestA (0.02s)",
    "=== RUN   TestC",
    "--- PASS: TestC (1.00s)",
    "=== RUN   TestD",
    "panic: test timed out after 5m0s",
  ].join("\n");
  const { results, failures } = parseGoTest(out);
  assert.deepEqual(Object.fromEntries(results), { TestB: "skip", TestA: "fail", TestC: "pass" });
  assert.equal(failures.get("TestA"), "    container_test.go:42: boom");
  const run: SuiteRun = {
    version: "x",
    shim: "skiff",
    results,
    selected: ["TestA", "TestB", "TestC", "TestD"],
    code: 1,
    timedOut: false,
    ms: 0,
    logPath: "",
    failures,
  };
  // TestD never reported (the binary died): it counts as failed.
  assert.deepEqual(countRun(run), { passed: 1, failed: 2, skipped: 1 });
  assert.match(regressions([run]).join("\n"), /skiff failed 2: TestA, TestD/);
});

integrationTest(
  `containerd ${CI_VERSION}'s integration/client suite: skiff fails none and passes as many as the Go shim`,
  {
    root: true,
    binaries: ["runc", "busybox", "unshare", "openssl", registryBinary()],
    check: () =>
      containerdVersions().some((v) => v.version === CI_VERSION)
        ? undefined
        : `containerd ${CI_VERSION} (tests/setup/prepare.sh builds it)`,
  },
  async () => {
    const logs = await Deno.makeTempDir({ prefix: "skiff-containerd-suite-logs-" });
    const runs = await runMatrix({
      versions: [CI_VERSION],
      shims: ["go", "skiff"],
      logs,
      timeoutMs: 15 * 60_000,
      onRun(r) {
        const c = countRun(r);
        console.log(
          `containerd ${r.version} ${r.shim}: ${c.passed} passed, ${c.failed} failed, ` +
            `${c.skipped} skipped (${Math.round(r.ms / 1000)} s)`,
        );
      },
    });
    console.log(matrix(runs));
    const go = runs.find((r) => r.shim === "go")!;
    // The comparison means something only if the Go shim ran the suite for real.
    assert.ok(countRun(go).passed >= 50, `the Go shim passed only ${countRun(go).passed}`);
    const bad = regressions(runs);
    const details = runs.filter((r) => r.shim === "skiff").flatMap((r) =>
      [...r.failures].map(([n, t]) => `${n}:\n${t}`)
    );
    assert.deepEqual(bad, [], `${bad.join("\n")}\n${details.join("\n")}\nlogs: ${logs}`);
    await Deno.remove(logs, { recursive: true });
  },
);
