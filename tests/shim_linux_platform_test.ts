// Unit tests of the Linux platform's defaults that need no root.
import assert from "node:assert/strict";
import { linuxPlatform } from "../sdk/shim/server/linux_platform.ts";
import { Code, isStatusError } from "../sdk/ttrpc/status_error.ts";
import type { Reaper } from "../sdk/linux/reaper.ts";

Deno.test("linuxPlatform refuses stats and OOM watches of a process in the shim's own cgroup (Unimplemented, not the shim's figures)", async () => {
  const platform = linuxPlatform({} as Reaper);
  // What a runtime without cgroups reports: a plain child, in our cgroup.
  const child = new Deno.Command("sleep", { args: ["30"] }).spawn();
  try {
    for (
      const call of [() => platform.stats(child.pid), () => platform.watchOom(child.pid, () => {})]
    ) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(isStatusError(e), String(e));
        assert.equal((e as { code: number }).code, Code.Unimplemented);
        assert.match(
          (e as Error).message,
          new RegExp(`pid ${child.pid}: it runs in the shim's own cgroup`),
        );
        return true;
      });
    }
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
});
