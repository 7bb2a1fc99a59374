// The warm spare's rehearsal (sdk/shim/spare/rehearsal.ts): one pretend container through the server's
// own code, with nothing left behind and nothing of the shim's runtime touched.
import assert from "node:assert/strict";
import { rehearse } from "../../../../sdk/shim/spare/rehearsal.ts";
import { Reaper } from "../../../../sdk/linux/reaper.ts";
import { RuncShim } from "../../../../examples/runc/main.ts";

/** The runc shim, except that building its runtime fails the test. */
class NoRuntimeShim extends RuncShim {
  override runtime(): never {
    throw new Error("a rehearsal must not build the shim's runtime");
  }
}

/**
 * Our children that can be the rehearsal's (its `sh`, which names the rehearsal's pid file, and
 * the `sleep 30` it leaves), across all threads: `deno test --parallel` runs other files' tests,
 * and their children, in this process at the same time.
 */
function children(): number[] {
  const pids: number[] = [];
  for (const t of Deno.readDirSync(`/proc/${Deno.pid}/task`)) {
    try {
      const text = Deno.readTextFileSync(`/proc/${Deno.pid}/task/${t.name}/children`);
      pids.push(...text.split(" ").filter((w) => w !== "").map(Number));
    } catch { /* thread gone */ }
  }
  return pids.filter((pid) => {
    try {
      const argv = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
      return argv.some((a) => a.includes("skiff-rehearsal-")) || argv.join(" ") === "sleep 30 ";
    } catch {
      return false; // gone
    }
  });
}

/**
 * Our children that were not there `before`, once they are gone or 10 s have passed (bounded only
 * so that a leak fails; a busy machine reaps later). Children of earlier test files in this
 * process (deno test runs every file in one) are not the rehearsal's.
 */
async function settledChildren(before: number[] = []): Promise<number[]> {
  const added = () => children().filter((p) => !before.includes(p));
  for (let i = 0; i < 500 && added().length > 0; i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  return added();
}

/**
 * The rehearsal's own bound is 5 s, after which a spare just waits less warm; on a busy machine a
 * whole rehearsal can take longer, which is not what these tests are about.
 */
const BOUND_MS = 60_000;

Deno.test("rehearse() serves one pretend container and leaves nothing behind", async () => {
  const reaper = Reaper.start();
  const dir = await Deno.makeTempDir({ prefix: "skiff-rehearsal-" });
  try {
    // A dead spare's rehearsal directory is removed; a live process's is not.
    await Deno.mkdir(`${dir}/rehearsal-999999999`);
    await Deno.mkdir(`${dir}/rehearsal-1`);
    const before = children();
    assert.equal(await rehearse(new NoRuntimeShim(), reaper, dir, undefined, BOUND_MS), true);
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["rehearsal-1"]);
    assert.deepEqual(await settledChildren(before), []);
    // Twice in one process (a second rehearsal of an already warm server) works too.
    assert.equal(await rehearse(new NoRuntimeShim(), reaper, dir, undefined, BOUND_MS), true);
  } finally {
    reaper.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a rehearsal stopped by its signal (a start connected) stops and cleans up", async () => {
  const reaper = Reaper.start();
  const dir = await Deno.makeTempDir({ prefix: "skiff-rehearsal-" });
  const before = children();
  try {
    for (const delayMs of [0, 5, 15]) {
      const stop = new AbortController();
      const done = rehearse(new NoRuntimeShim(), reaper, dir, stop.signal);
      setTimeout(() => stop.abort(), delayMs);
      const whole = await done;
      // Stopped before its end it reports false; a fast machine may finish first.
      if (delayMs === 0) assert.equal(whole, false);
      assert.deepEqual([...Deno.readDirSync(dir)], []);
      assert.deepEqual(await settledChildren(before), []);
    }
  } finally {
    reaper.close();
    await Deno.remove(dir, { recursive: true });
  }
});
