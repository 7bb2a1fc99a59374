import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { preloadLibc } from "../../../sdk/linux/libc.ts";
import { watchOom, watchOomV2At } from "../../../sdk/linux/oom.ts";
import { cgroupVersion } from "../../../sdk/linux/cgroups.ts";
import { busyboxBundle, deadline, run } from "../../_linux_support.ts";

preloadLibc(); // bound once per file, so resource sanitizers see no new library

Deno.test("watchOomV2At() reports each oom_kill increase and stops when the cgroup goes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-oom-test-" });
  const events = `${dir}/memory.events`;
  try {
    await Deno.writeTextFile(events, "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
    let calls = 0;
    let notify: () => void = () => {};
    const watch = watchOomV2At(dir, () => {
      calls++;
      notify();
    });
    const first = new Promise<void>((resolve) => notify = resolve);
    await Deno.writeTextFile(events, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
    await deadline(first, 20_000, "the first oom notification");
    assert.equal(calls, 1);
    const second = new Promise<void>((resolve) => notify = resolve);
    await Deno.writeTextFile(events, "low 0\nhigh 0\nmax 4\noom 2\noom_kill 3\n");
    await deadline(second, 20_000, "the second oom notification");
    assert.equal(calls, 2);
    await Deno.remove(events); // as when the cgroup is removed
    await deadline(watch.done, 20_000, "the watch to stop after removal");
    watch.close(); // harmless after the end
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

integrationTest(
  "watchOom() reports a runc container exceeding its memory limit",
  {
    root: true,
    binaries: ["runc", "/bin/busybox"],
    check: () => cgroupVersion() === 1 ? undefined : "a cgroup v1 host for this test",
  },
  async () => {
    const bundle = await busyboxBundle({
      args: ["sh", "-c", "x=a; while true; do x=$x$x; done"],
      memoryLimit: 8 * 1024 * 1024,
    });
    try {
      const pidFile = `${bundle.dir}/init.pid`;
      await run(
        bundle.runc(["create", "--bundle", bundle.dir, "--pid-file", pidFile, bundle.id], {
          // The container inherits these: a piped stream would never reach EOF.
          stdin: "null",
          stdout: "null",
          stderr: "null",
        }),
        "runc create",
      );
      const pid = Number(await Deno.readTextFile(pidFile));
      let oom!: () => void;
      const oomed = new Promise<void>((resolve) => oom = resolve);
      const watch = await watchOom(pid, () => oom());
      try {
        await run(bundle.runc(["start", bundle.id], { stderr: "piped" }), "runc start");
        await deadline(oomed, 30_000, "an OOM notification");
        await run(
          bundle.runc(["delete", "--force", bundle.id], { stderr: "piped" }),
          "runc delete",
        );
        // Removing the cgroup ends the watch without close().
        await deadline(watch.done, 20_000, "the watch to stop after cgroup removal");
      } finally {
        watch.close();
      }
    } finally {
      await bundle.cleanup();
    }
  },
);
