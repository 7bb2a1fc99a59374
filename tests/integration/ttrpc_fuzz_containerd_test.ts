/**
 * The seeded hostile-peer fuzz (bench/fuzz/ttrpc_fuzz.ts), CI-sized, against skiff's runc shim
 * serving a real container under the newest containerd 2.x here: connections one after another
 * with bursts of garbage, random headers, huge claimed lengths and unknown or read-only
 * requests, closed abruptly; and a few left open, unfinished (silent, a partial frame, a frame
 * claiming 4 MiB, answers never read), which the shim must drop by itself. Afterwards the shim
 * holds its baseline descriptors, its RSS is within 32 MiB of where it started, its CPU is idle,
 * and containerd still execs in, kills and deletes the container. The long run and the Go
 * shim's figures: docs/reliability.md (`deno task fuzz-ttrpc --frames 100000`).
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { fuzzShims, fuzzTable } from "../../bench/fuzz/shim_fuzz.ts";

const v2 = containerdVersions().filter((v) => v.version.startsWith("2.")).at(-1);
/** Fixed, so that a failure reproduces: `deno task fuzz-ttrpc --seed 20261202 --frames 6000 --hold 40`. */
const SEED = 20261202;
/** RSS growth allowed over the fuzz (the bound for 100,000 frames). */
const RSS_BOUND_KIB = 32 * 1024;
/** CPU use afterwards, percent of one core, over 2 s: idle, generously. */
const CPU_IDLE_PERCENT = 20;

integrationTest(
  `hostile ttrpc peers leave skiff's runc shim under containerd ${
    v2?.version ?? "2.x"
  } at its baseline and serving`,
  {
    root: true,
    binaries: ["runc", "busybox", "sh", "mount", "umount"],
    check: () => v2 ? undefined : "containerd 2.x (run tests/setup/prepare.sh as root)",
  },
  async () => {
    const [row] = await fuzzShims({
      binDir: v2!.binDir,
      frames: 6000,
      seed: SEED,
      shims: ["skiff"],
      adopted: true,
      hold: { chance: 0.02, max: 40 },
      settleMs: 90_000,
      log: (line) => console.log(line),
    });
    console.log(fuzzTable([row!]));
    const r = row!;
    assert.ok(r.alive, "the shim died");
    assert.ok(r.stats.held > 0, "the fuzz left no connection open: it tests less than it says");
    assert.ok(
      r.after!.fds <= r.before.fds,
      `shim holds ${r.after!.fds} descriptors (${r.after!.sockets} sockets) after the fuzz, ` +
        `${r.before.fds} (${r.before.sockets}) before`,
    );
    assert.ok(
      r.after!.rssKiB - r.before.rssKiB <= RSS_BOUND_KIB,
      `RSS grew by ${((r.after!.rssKiB - r.before.rssKiB) / 1024).toFixed(1)} MiB`,
    );
    assert.ok(r.cpuAfter! < CPU_IDLE_PERCENT, `shim still uses ${r.cpuAfter!.toFixed(0)}% CPU`);
    assert.equal(r.taskStatus, "RUNNING", r.problems.join("; "));
    assert.equal(r.execCode, 0, r.problems.join("; "));
    assert.ok(r.killDeleteOk, r.problems.join("; "));
  },
);

// The same for the shim's two text sockets. The operations endpoint (HTTP, on with SKIFF_OPS=1):
// garbage, lying and half requests, some connections left open; afterwards the shim is back to
// its baseline and serving. The warm spare's handoff socket (JSON lines): garbage never adopts
// the spare nor makes it leave, and the next container is adopted by that very spare.
for (const target of ["ops", "spare"] as const) {
  integrationTest(
    `hostile peers on the ${target === "ops" ? "operations endpoint" : "warm spare's socket"} ` +
      `under containerd ${v2?.version ?? "2.x"}: baseline kept, still serving`,
    {
      root: true,
      binaries: ["runc", "busybox", "sh", "mount", "umount"],
      check: () => v2 ? undefined : "containerd 2.x (run tests/setup/prepare.sh as root)",
    },
    async () => {
      const [row] = await fuzzShims({
        binDir: v2!.binDir,
        frames: 1500,
        seed: SEED,
        shims: ["skiff"],
        target,
        ...(target === "ops" ? { shimEnv: { SKIFF_OPS: "1" } } : {}),
        hold: { chance: 0.05, max: 10 },
        settleMs: 90_000,
        log: (line) => console.log(line),
      });
      console.log(fuzzTable([row!]));
      const r = row!;
      assert.ok(r.alive, `the ${target === "ops" ? "shim" : "spare"} is gone after the fuzz`);
      assert.ok(r.stats.held > 0, "the fuzz left no connection open: it tests less than it says");
      assert.ok(
        r.after!.fds <= r.before.fds,
        `${r.after!.fds} descriptors (${r.after!.sockets} sockets) after the fuzz, ` +
          `${r.before.fds} (${r.before.sockets}) before`,
      );
      assert.ok(
        r.after!.rssKiB - r.before.rssKiB <= RSS_BOUND_KIB,
        `RSS grew by ${((r.after!.rssKiB - r.before.rssKiB) / 1024).toFixed(1)} MiB`,
      );
      assert.ok(r.cpuAfter! < CPU_IDLE_PERCENT, `still uses ${r.cpuAfter!.toFixed(0)}% CPU`);
      assert.deepEqual(r.problems, []);
      assert.equal(r.execCode, 0);
      assert.ok(r.killDeleteOk);
    },
  );
}
