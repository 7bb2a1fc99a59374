// The warm spare's cgroup handling on cgroup v2, run INSIDE the cgroup v2 test guest by
// tests/external/cgroup2_guest_test.ts (not named *_test.ts, so the host's `deno test tests/` skips it;
// outside the guest it fails at once). The same checks as tests/integration/spare_containerd_test.ts runs
// on the cgroup v1 hybrid host, here on containerd 2.1 with the host's installed runc example:
// an adopted spare lands in containerd's cgroup of the time of `start` (also after containerd
// moved), and runc options' `shim_cgroup` moves it into that cgroup.
import assert from "node:assert/strict";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { cgroupVersion } from "../../sdk/linux/cgroup_paths.ts";
import { kit } from "../_spare.ts";
import { spareSameAsCold, spareShimCgroup } from "../_spare_cgroups.ts";

const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));

/** The host-installed launchers' prefix (SKIFF_GUEST_SHIMS is its bin dir). */
function installed(): string {
  assert.equal(Deno.env.get("SKIFF_GUEST"), "1", "runs inside the test guest only");
  assert.equal(cgroupVersion(), 2, "a pure cgroup v2 host");
  assert.ok(v21, "containerd 2.1 (tests/setup/prepare.sh)");
  const bin = Deno.env.get("SKIFF_GUEST_SHIMS");
  assert.ok(bin !== undefined && bin.endsWith("/bin"), `SKIFF_GUEST_SHIMS is a bin dir: ${bin}`);
  return bin.slice(0, -"/bin".length);
}

for (
  const [name, check] of [
    ["an adopted spare is indistinguishable from a cold server", spareSameAsCold],
    ["runc options' shim_cgroup is honoured by an adopted spare", spareShimCgroup],
  ] as const
) {
  Deno.test(`guest: warm spare on cgroup v2: ${name}`, async () => {
    const k = await kit(v21?.binDir ?? "", installed());
    try {
      await check(k);
    } finally {
      await k.close();
    }
  });
}
