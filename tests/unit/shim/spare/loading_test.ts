/**
 * The loading marker (`sdk/shim/spare/loading.ts`): a server spawns the next spare only when none
 * holds the lock *and* none spawned earlier is still booting, so that a burst of servers spawns
 * one spare, not one each. Real processes (`sleep`) play the booting spares.
 */
import { strictEqual } from "node:assert/strict";
import { spawnSpare } from "../../../../sdk/shim/spare/spawn.ts";
import { loadingMarker, releaseLoading } from "../../../../sdk/shim/spare/loading.ts";
import type { SpareConfig } from "../../../../sdk/shim/spare/config.ts";
import { containerdProcess } from "../../../../sdk/shim/spare/handoff.ts";

function place(): { cfg: SpareConfig; address: string; dir: string } {
  const dir = Deno.makeTempDirSync({ prefix: "skiff-loading-" });
  const address = `${dir}/containerd.sock`;
  Deno.writeTextFileSync(address, ""); // a spare is spawned only while containerd's socket exists
  const code = "a".repeat(16);
  return {
    dir,
    address,
    cfg: {
      dir: `${dir}/spares`,
      socket: `${dir}/spares/spare-${code}.sock`,
      lock: `${dir}/spares/spare-${code}.lock`,
      stats: `${dir}/spares/stats.json`,
      codeId: "a".repeat(64),
      launcher: "/bin/true",
      idleSeconds: 600,
    },
  };
}

/** `sleep`s that play spawned spares, and their end (spawnSpare unrefs each child). */
function sleepingSpares() {
  const spawned: Deno.ChildProcess[] = [];
  return {
    spawned,
    spawn: () => {
      const child = new Deno.Command("sleep", { args: ["30"] }).spawn();
      spawned.push(child);
      return child;
    },
    async end() {
      for (const child of spawned) {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
        child.ref();
        await child.status;
      }
    },
  };
}

Deno.test("spare loading: a spare on its way keeps other servers from spawning one", async () => {
  const { cfg, address, dir } = place();
  // Each "spare" is a sleep that never takes the lock: booting, as at nice 19 in a burst.
  const sleepers = sleepingSpares();
  const { spawned, spawn } = sleepers;
  try {
    for (let i = 0; i < 5; i++) spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawned.length, 1, "five servers in a burst spawn one spare");
    const marker = loadingMarker(cfg.lock);
    strictEqual(Deno.readTextFileSync(marker).split(" ")[0], String(spawned[0].pid));

    // The booting spare dies before it takes the lock: the marker is stale, the next spawns.
    spawned[0].kill("SIGKILL");
    spawned[0].ref(); // spawnSpare unrefs its child
    await spawned[0].status;
    spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawned.length, 2, "a dead spare's marker does not block the next");

    // The spare took the lock and was adopted (it releases the marker): the next may load.
    releaseLoading(marker, spawned[1].pid);
    spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawned.length, 3, "a released marker does not block the next");

    // A marker naming another process is not released by this one.
    releaseLoading(marker, spawned[1].pid);
    spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawned.length, 3, "a marker is released by the spare it names only");
  } finally {
    await sleepers.end();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("spare loading: an unnamed marker is its spawner's for a while, then stale", () => {
  const { cfg, address, dir } = place();
  let spawns = 0;
  const spawn = () => {
    spawns++;
    return new Deno.Command("true").spawn();
  };
  try {
    Deno.mkdirSync(cfg.dir, { recursive: true });
    const marker = loadingMarker(cfg.lock);
    Deno.writeTextFileSync(marker, ""); // a spawner between claiming and naming its spare
    spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawns, 0, "a fresh unnamed marker is respected");
    const old = new Date(Date.now() - 60_000);
    Deno.utimeSync(marker, old, old); // its spawner died a minute ago
    spawnSpare(cfg, address, "/usr/bin/containerd", "", spawn);
    strictEqual(spawns, 1, "an old unnamed marker is stale");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("spare spawning: none for a containerd process that is gone, one for a live one", async () => {
  const { cfg, address, dir } = place();
  const sleepers = sleepingSpares();
  const { spawned, spawn } = sleepers;
  try {
    // This process's pid with another start time: a containerd restarted since the server began.
    spawnSpare(cfg, address, "/usr/bin/containerd", `${Deno.pid}:1`, spawn);
    strictEqual(spawned.length, 0, "a spare of a gone containerd would leave within a second");
    spawnSpare(cfg, address, "/usr/bin/containerd", containerdProcess(Deno.pid), spawn);
    strictEqual(spawned.length, 1, "a live containerd's spare is spawned");
  } finally {
    await sleepers.end();
    Deno.removeSync(dir, { recursive: true });
  }
});
