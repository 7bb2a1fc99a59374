// adoptChild (sdk/linux/adopted_child.ts): a child the previous code of a shim started, continued
// after a live upgrade with no Deno handle, its exit taken from the shim's reaper by pid and
// start time. Here an orphan re-parented to this process (the reaper makes it the subreaper)
// stands in for it: its SIGTERM is reported as 128+15; a start time that does not match, or an
// exit code the previous code saw, is reported at once, and `kill` then signals nobody.
import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { preloadLibc } from "../../../sdk/linux/libc.ts";
import { type ProcessExit, Reaper } from "../../../sdk/linux/reaper.ts";
import { processAlive, processParent, processStartTime } from "../../../sdk/linux/proc_stat.ts";
import { adoptChild } from "../../../sdk/linux/adopted_child.ts";
import { deadline } from "../../_linux_support.ts";

const sanitize = { sanitizeOps: true, sanitizeResources: true };
preloadLibc(); // bound once for the whole file, so the resource sanitizer sees no new library

/** Starts `exec sleep 30` in a background sh that the outer sh abandons; the orphan's pid. */
async function orphanSleep(reaper: Reaper): Promise<number> {
  const out = await reaper.spawn(
    new Deno.Command("sh", {
      args: ["-c", "sh -c 'exec sleep 30' >/dev/null 2>&1 </dev/null & echo $!"],
      stdout: "piped",
    }),
  ).output();
  assert.equal(out.code, 0);
  const pid = Number(new TextDecoder().decode(out.stdout).trim());
  assert.ok(Number.isSafeInteger(pid) && pid > 0, `a pid: ${pid}`);
  return pid;
}

/** Whether `p` has settled already (its callbacks run before this one's). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  const pending = Symbol("pending");
  return (await Promise.race([p, Promise.resolve(pending)])) !== pending;
}

/** SIGKILLs `pid` if it still runs and waits (bounded) until the reaper has reaped it. */
async function killAndReap(reaper: Reaper, pid: number, startTime: number): Promise<void> {
  if (processStartTime(pid) !== startTime) return;
  const gone = new Promise<ProcessExit>((resolve) => {
    const off = reaper.onExit((e) => {
      if (e.pid === pid) (off(), resolve(e));
    });
  });
  try {
    Deno.kill(pid, "SIGKILL");
  } catch { /* exited meanwhile */ }
  await deadline(gone, 20_000, `exit of orphan ${pid}`);
}

integrationTest(
  "adoptChild() reports an inherited child's exit from the reaper: 128+15 after its kill",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    let pid = 0;
    let startTime: number | undefined;
    try {
      pid = await orphanSleep(reaper);
      startTime = processStartTime(pid);
      assert.ok(startTime !== undefined, `orphan ${pid} runs`);
      assert.equal(processParent(pid), Deno.pid, "re-parented to this process, the subreaper");
      const child = adoptChild(pid, startTime, reaper);
      assert.equal(child.pid, pid);
      assert.equal(await settled(child.status), false, "running: no exit yet");
      child.kill("SIGTERM");
      const status = await deadline(child.status, 20_000, `exit of adopted child ${pid}`);
      assert.deepEqual(status, { success: false, code: 143, signal: null });
      assert.notEqual(processStartTime(pid), startTime, "reaped");
      child.kill("SIGKILL"); // gone: nothing is signalled
    } finally {
      if (startTime !== undefined) await killAndReap(reaper, pid, startTime);
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "adoptChild() reports a child whose start time does not match as gone (255), or the exit code given, at once",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    let pid = 0;
    let startTime: number | undefined;
    try {
      pid = await orphanSleep(reaper);
      startTime = processStartTime(pid);
      assert.ok(startTime !== undefined, `orphan ${pid} runs`);

      // The pid is another process's now (the start time differs): 255, and never signalled.
      const other = adoptChild(pid, startTime + 1, reaper);
      assert.equal(await settled(other.status), true, "reported at once");
      assert.deepEqual(await other.status, { success: false, code: 255, signal: null });
      other.kill("SIGKILL");
      assert.equal(processAlive(pid), true, "the process that has the pid now is not killed");

      // The previous code saw it exit: that code, at once, even though the pid still matches.
      for (const code of [3, 0]) {
        const seen = adoptChild(pid, startTime, reaper, code);
        assert.equal(await settled(seen.status), true, "reported at once");
        assert.deepEqual(await seen.status, { success: code === 0, code, signal: null });
        seen.kill("SIGKILL");
        assert.equal(processAlive(pid), true, "an exited child is not signalled");
      }

      // Exited and reaped before (the pid is nobody's, or another process's): 255 at once.
      await killAndReap(reaper, pid, startTime);
      const later = adoptChild(pid, startTime, reaper);
      assert.equal(await settled(later.status), true, "reaped before: gone at once");
      assert.equal((await later.status).code, 255);
    } finally {
      if (startTime !== undefined) await killAndReap(reaper, pid, startTime);
      reaper.close();
    }
  },
  sanitize,
);
