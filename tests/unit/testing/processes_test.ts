// processes.ts: the process-table helpers a private containerd's teardown uses, on a real tree
// of processes (a shell and its sleep).
import assert from "node:assert/strict";
import { descendantsOf, kill, processesWithArg, waitGone } from "../../../sdk/testing/processes.ts";

function cmdline(pid: number): string {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/cmdline`);
  } catch {
    return "";
  }
}

Deno.test("descendantsOf finds children and grandchildren; processesWithArg matches whole arguments", async () => {
  const marker = `skiff-processes-test-${crypto.randomUUID()}`;
  const child = new Deno.Command("/bin/sh", {
    args: ["-c", "sleep 60 & wait", marker],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    let found: { pid: number; argv: string[] }[] = [];
    let below: number[] = [];
    // Until the forked child has exec'd sleep, it still carries sh's arguments (the marker).
    const sleeping = (pids: number[]) =>
      pids.length === 1 && cmdline(pids[0]).startsWith("sleep\x00");
    for (let i = 0; i < 250 && !sleeping(below); i++) {
      if (i > 0) await new Promise((r) => setTimeout(r, 20));
      below = descendantsOf([child.pid]);
      found = processesWithArg(marker);
    }
    assert.deepEqual(found.map((p) => p.pid), [child.pid]);
    assert.deepEqual(processesWithArg(marker.slice(0, -1)), []); // not a whole argument
    assert.equal(below.length, 1);
    assert.equal(Deno.readTextFileSync(`/proc/${below[0]}/cmdline`), "sleep\x0060\x00");
    kill(below[0], "SIGKILL");
    kill(below[0], "SIGKILL"); // gone already (or a zombie): no error
    assert.equal(await waitGone([child.pid], 10_000), true);
  } finally {
    kill(child.pid, "SIGKILL");
    await child.status;
  }
});
