// cgroup v2 for real: this machine (and CI's) is cgroup v1 hybrid, so the v2 paths run in the
// QEMU test guest (sdk/testing/guest.ts), which boots a pure cgroup2 hierarchy over the host's
// own root. One boot runs tests/guest/cgroup2_checks.ts there (conformance on v2 for the Go runc
// shim and skiff's runc, runsc and crun examples, checkpoint/restore of a counter for the Go shim
// and skiff side by side), the CRI checkpoint checks, the warm spare's cgroup checks
// (tests/guest/spare_cgroup_checks.ts) and the existing v2-sensitive integration tests, and
// reports a JUnit file back over the guest's writable share. A second boot, with the host's systemd as the
// guest's PID 1, runs tests/guest/systemd_checks.ts (runc's systemd cgroup driver). Skipped only
// where QEMU cannot run (and under SKIFF_REQUIRE_INTEGRATION=1 that fails instead).
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { guestUnavailable, runInGuest } from "../../sdk/testing/guest.ts";
import { containerdVersions, skiffCacheDir } from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";

/** Files run in the guest: its own checks and host tests whose v2 branches only a v2 host runs. */
const IN_GUEST = [
  "tests/guest/cgroup2_checks.ts",
  "tests/guest/cri_checkpoint_checks.ts",
  "tests/guest/spare_cgroup_checks.ts",
  "tests/integration/linux/cgroup_join_test.ts",
  "tests/integration/linux/cgroups_test.ts",
];
// Not tests/integration/linux/oom_test.ts: its runc container test is cgroup v1 only (its requirement fails
// under SKIFF_REQUIRE_INTEGRATION in the guest); on v2, OOM through memory.events is the
// conformance `oom` scenario above, for every shim.

/** A hang fails; a slow machine does not (the guest runs ~10x slower than the host). */
const BOUND_MS = 45 * 60_000;

const REQ = {
  root: true,
  check: () =>
    guestUnavailable() ??
      (containerdVersions().some((v) => v.version.startsWith("2.1."))
        ? undefined
        : "containerd 2.1 (run tests/setup/prepare.sh)"),
};

/**
 * Boots the guest once, runs `files` there with deno test, and asserts from the JUnit report
 * that every test ran, none failed and none skipped, and that `expected` are among them.
 */
async function testInGuest(
  files: string[],
  expected: string[],
  init: "shell" | "systemd",
): Promise<void> {
  const repo = new URL("../..", import.meta.url).pathname;
  // Bundled here, run there (the guest sees the host's files, though not its /tmp): saves
  // minutes of emulation.
  const prefix = await Deno.makeTempDir({ prefix: "shims-", dir: `${skiffCacheDir()}/guest` });
  let r;
  try {
    await installExampleShims({ prefix });
    r = await runInGuest({
      cwd: repo,
      init,
      timeoutMs: BOUND_MS,
      command: [
        "deno",
        "test",
        "-A",
        // The host's run type-checks these; under emulation a check takes minutes.
        "--no-check",
        "--junit-path=/skiff-guest/out/junit.xml",
        ...files,
      ],
      env: { SKIFF_REQUIRE_INTEGRATION: "1", NO_COLOR: "1", SKIFF_GUEST_SHIMS: `${prefix}/bin` },
      onOutput: (text) => Deno.stderr.writeSync(new TextEncoder().encode(text)),
    });
  } finally {
    await Deno.remove(prefix, { recursive: true });
  }
  console.log(`cgroup v2 guest (${init}): exit ${r.code} after ${r.seconds.toFixed(0)} s`);
  assert.equal(r.wedged, undefined, `the guest's kernel wedged:\n${r.console.slice(-4000)}`);
  assert.ok(
    !r.timedOut,
    `the guest hung past ${BOUND_MS / 60_000} min:\n${r.console.slice(-4000)}`,
  );
  const junit = r.files["junit.xml"];
  assert.ok(junit, `the guest wrote no JUnit report (exit ${r.code}):\n${r.console.slice(-4000)}`);
  const cases = [...junit.matchAll(/<testcase name="([^"]*)"[^>]*?(\/>|>([\s\S]*?)<\/testcase>)/g)]
    .map((m) => ({ name: unescapeXml(m[1]!), body: m[3] ?? "" }));
  const failed = cases.filter((c) => /<failure|<error/.test(c.body)).map((c) => c.name);
  const skipped = cases.filter((c) => /<skipped/.test(c.body)).map((c) => c.name);
  assert.deepEqual(failed, [], `failed in the guest:\n${r.output.slice(-8000)}`);
  assert.deepEqual(skipped, [], "nothing may be skipped in the guest");
  for (const name of expected) {
    assert.ok(cases.some((c) => c.name === name), `ran in the guest: ${name}`);
  }
  assert.equal(r.code, 0, r.output.slice(-8000));
}

integrationTest(
  "cgroup v2 guest: conformance, OOM, metrics, shim_cgroup and checkpoint/restore on cgroup2",
  REQ,
  () =>
    testInGuest(IN_GUEST, [
      "guest: the hierarchy is pure cgroup2, every controller delegated",
      "guest: conformance on cgroup v2, containerd's Go runc shim",
      "guest: conformance on cgroup v2, skiff's runc example",
      "guest: conformance on cgroup v2, skiff's runsc example",
      "guest: conformance on cgroup v2, skiff's crun example (trixie's crun)",
      "guest: checkpoint and restore a counter, containerd's Go runc shim",
      "guest: checkpoint and restore a counter, skiff's runc example",
      "guest: CRI CheckpointContainer and restore, containerd's Go runc shim",
      "guest: CRI CheckpointContainer and restore, skiff's runc example",
      "guest: warm spare on cgroup v2: an adopted spare is indistinguishable from a cold server",
      "guest: warm spare on cgroup v2: runc options' shim_cgroup is honoured by an adopted spare",
    ], "shell"),
);

integrationTest(
  "cgroup v2 guest with systemd as PID 1: runc's systemd cgroup driver (slice:prefix:name)",
  REQ,
  () =>
    testInGuest(["tests/guest/systemd_checks.ts"], [
      "guest (systemd): systemd cgroupsPath, containerd's Go runc shim",
      "guest (systemd): systemd cgroupsPath, skiff's runc example",
    ], "systemd"),
);

integrationTest(
  "test guest: a soft lockup of 300 s or more on the console ends the run at once (a wedge)",
  { root: true, check: () => guestUnavailable() },
  async () => {
    // The guest's own console line, as its kernel prints it; the command would sleep past
    // the bound, so only the wedge check can end the run before it.
    const line = "[ 640.5] watchdog: BUG: soft lockup - CPU#0 stuck for 301s! [runc:246]";
    const r = await runInGuest({
      command: ["sh", "-c", `echo '${line}'; sleep 900; echo not-killed`],
      timeoutMs: 10 * 60_000,
    });
    assert.equal(r.wedged, line, r.console.slice(-2000));
    assert.ok(!r.timedOut, "ended by the wedge check, not the bound");
    assert.doesNotMatch(r.output, /not-killed/);
  },
);

/** The five predefined XML entities, as deno's JUnit reporter writes names. */
function unescapeXml(s: string): string {
  return s.replaceAll("&apos;", "'").replaceAll("&quot;", '"').replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">").replaceAll("&amp;", "&");
}
