/**
 * The reliability soak (bench/soak.ts), scaled down, against skiff's runc shim under the newest
 * containerd 2.x here: 300 execs across pid wraps, 20 containers in a row, and containerd
 * restarted and killed in the middle of a burst of 10 creates and 200 execs. Every figure that
 * counts a failure must be zero. The full soak and its figures: docs/reliability.md.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { runSoak, soakErrors, soakTable } from "../../bench/soak/run.ts";

const v2 = containerdVersions().filter((v) => v.version.startsWith("2.")).at(-1);

integrationTest(
  `soak, scaled down, skiff runc shim under containerd ${v2?.version ?? "2.x"}: zero errors`,
  {
    root: true,
    binaries: ["runc", "busybox", "sh", "mount", "umount"],
    check: () => v2 ? undefined : "containerd 2.x (run tests/setup/prepare.sh as root)",
  },
  async () => {
    const rows = await runSoak({
      versions: [v2!.version.split(".").slice(0, 2).join(".")],
      execs: 300,
      containers: 20,
      burstContainers: 10,
      burstExecs: 200,
      upgradeExecs: 300,
      upgradeEveryMs: 300,
      only: "skiff",
      log: (line) => console.log(line),
    });
    console.log(soakTable(rows));
    assert.equal(rows.length, 1);
    const [row] = rows;
    assert.equal(row!.execs.execs, 300);
    assert.equal(row!.containers.containers, 20);
    assert.equal(row!.upgrade.execs, 300);
    assert.ok(row!.upgrade.upgrades > 0, "live upgrades ran while the execs did");
    assert.equal(soakErrors(row!), 0, soakTable(rows));
  },
);
