// Unit tests of the Linux platform's defaults that need no root.
import assert from "node:assert/strict";
import { linuxPlatform } from "../../../../sdk/shim/server/linux_platform.ts";
import type { Reaper } from "../../../../sdk/linux/reaper.ts";

Deno.test("linuxPlatform.inShimCgroup says when a process (or its kept cgroups) is in the shim's own cgroup", async () => {
  const platform = linuxPlatform({} as Reaper);
  // What a runtime without cgroups reports: a plain child, in our cgroup.
  const child = new Deno.Command("sleep", { args: ["30"] }).spawn();
  try {
    const ours = Deno.readTextFileSync("/proc/self/cgroup").trim().split("\n").at(-1)!;
    assert.equal(platform.inShimCgroup!(child.pid), ours.slice(ours.indexOf(":", 2) + 1));
    const kept = platform.cgroupOf!(child.pid)!;
    assert.equal(platform.inShimCgroup!(0, kept), platform.inShimCgroup!(child.pid));
    const elsewhere = kept.map((c) => ({ ...c, path: `${c.path}/elsewhere` }));
    assert.equal(platform.inShimCgroup!(0, elsewhere), undefined);
    assert.equal(platform.inShimCgroup!(2 ** 22 + 1), undefined, "a pid that is gone");
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
});

Deno.test("linuxPlatform.unseenExit names a pid the reaper would never see exit: another's child, or Deno's own outside ctx.spawn", async () => {
  const platform = linuxPlatform({} as Reaper);
  // Deno's own child, spawned outside ctx.spawn: Deno reaps it through its pidfd.
  const own = new Deno.Command("sleep", { args: ["30"] }).spawn();
  // A grandchild: the child of a shell that stays.
  const shell = new Deno.Command("sh", {
    args: ["-c", "sleep 30 & echo $!; wait"],
    stdout: "piped",
  }).spawn();
  const reader = shell.stdout.getReader();
  const { value } = await reader.read();
  const grandchild = Number(new TextDecoder().decode(value).trim());
  try {
    assert.equal(
      platform.unseenExit!(own.pid),
      "it was spawned with Deno.Command outside ctx.spawn",
    );
    assert.equal(
      platform.unseenExit!(grandchild),
      `its parent is pid ${shell.pid}, not this shim (pid ${Deno.pid})`,
    );
    assert.equal(
      platform.unseenExit!(2 ** 22 + 1),
      undefined,
      "a pid that is gone: nothing to say",
    );
  } finally {
    own.kill("SIGKILL");
    Deno.kill(grandchild, "SIGKILL");
    await own.status;
    await shell.status;
    reader.releaseLock();
    await shell.stdout.cancel();
  }
});
