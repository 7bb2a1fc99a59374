// processes.ts: the process-table helpers a private containerd's teardown uses, on a real tree
// of processes (a shell and its sleep).
import assert from "node:assert/strict";
import { descendantsOf, kill, processesWithArg, waitGone } from "../../../sdk/testing/processes.ts";

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
    for (let i = 0; i < 250 && below.length === 0; i++) {
      found = processesWithArg(marker);
      below = descendantsOf([child.pid]);
      if (below.length === 0) await new Promise((r) => setTimeout(r, 20));
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
