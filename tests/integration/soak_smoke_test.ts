/**
 * The reliability soak (bench/soak.ts), scaled down, against skiff's runc shim under the newest
 * containerd 2.x here: 300 execs across pid wraps, 20 containers in a row, and containerd
 * restarted and killed in the middle of a burst of 10 creates and 200 execs. Every figure that
 * counts a failure must be zero. The full soak and its figures: docs/reliability.md.
 *
 * The same once more in shared mode (`SKIFF_SHARED_PODS=4`, bench/soak/shared_pods.ts): two
 * neighbour pods hold a shared server through the phases, the phases' pods join it, and the
 * neighbours must run on and leave nothing once removed; no live-upgrade phase there.
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

integrationTest(
  `soak, scaled down, skiff runc shim in shared servers (SKIFF_SHARED_PODS=4) under containerd ${
    v2?.version ?? "2.x"
  }: zero errors, the phases' pods joined a shared server`,
  {
    root: true,
    binaries: ["runc", "busybox", "sh", "mount", "umount"],
    check: () => v2 ? undefined : "containerd 2.x (run tests/setup/prepare.sh as root)",
  },
  async () => {
    // Two neighbour pods share one server through the phases and leave room for two more, so
    // the phases' pods join it (and, in the burst, fill further shared servers). No live
    // upgrade phase: a shared server refuses live upgrade by design (bench/soak/run.ts).
    const rows = await runSoak({
      versions: [v2!.version.split(".").slice(0, 2).join(".")],
      execs: 300,
      containers: 20,
      burstContainers: 10,
      burstExecs: 200,
      only: "skiff",
      sharedPods: 4,
      neighbours: 2,
      log: (line) => console.log(line),
    });
    console.log(soakTable(rows));
    assert.equal(rows.length, 1);
    const [row] = rows;
    assert.equal(row!.execs.execs, 300);
    assert.equal(row!.containers.containers, 20);
    assert.equal(row!.upgrade.applicable, false, "no live upgrade of a shared server");
    const shared = row!.shared;
    assert.ok(shared, "shared figures");
    assert.equal(shared.neighbours, 2);
    assert.equal(shared.neighbourServers, 1, "the neighbours share one server");
    assert.equal(shared.neighboursLost, 0, shared.samples.join("\n"));
    assert.equal(shared.leaks, 0, shared.samples.join("\n"));
    // The second neighbour, and most of phase (a)'s, (b)'s and (c)'s pods.
    assert.ok(shared.joined >= 1 + row!.containers.containers / 2, `joined: ${shared.joined}`);
    assert.equal(soakErrors(row!), 0, soakTable(rows));
  },
);
