// Unit tests of ExitWindow: which exit kept while a process was being started is that process's.
import assert from "node:assert/strict";
import { ExitWindow } from "../../../../sdk/shim/server/exit_window.ts";
import { isExitOf } from "../../../../sdk/linux/reaper.ts";

const at = new Date(0);

Deno.test("isExitOf: same pid, and start times equal or unknown", () => {
  assert.equal(isExitOf({ pid: 5, status: 0, exitedAt: at }, 5, 10), true);
  assert.equal(isExitOf({ pid: 5, startTime: 10, status: 0, exitedAt: at }, 5), true);
  assert.equal(isExitOf({ pid: 5, startTime: 10, status: 0, exitedAt: at }, 5, 11), false);
  assert.equal(isExitOf({ pid: 6, startTime: 10, status: 0, exitedAt: at }, 5, 10), false);
});

Deno.test("take: an exit of a pid that started before the window is an older process's", () => {
  const w = new ExitWindow(1000);
  w.add({ pid: 7, startTime: 999, status: 1, exitedAt: at });
  assert.equal(w.take(7), undefined); // ours is gone already: no start time to compare
  w.add({ pid: 7, startTime: 1000, status: 2, exitedAt: at });
  assert.equal(w.take(7)?.status, 2);
});

Deno.test("take: with the process's own start time, only its exit matches", () => {
  const w = new ExitWindow(1000);
  w.add({ pid: 8, startTime: 1001, status: 1, exitedAt: at }); // an earlier 8 inside the window
  w.add({ pid: 8, startTime: 1005, status: 2, exitedAt: at });
  assert.equal(w.take(8, 1005)?.status, 2);
  assert.equal(w.take(8, 1007), undefined);
});

Deno.test("take: the first matching exit wins when start times are unknown", () => {
  const w = new ExitWindow(undefined); // the boot clock could not be read
  w.add({ pid: 9, status: 4, exitedAt: at });
  w.add({ pid: 9, status: 5, exitedAt: at });
  assert.equal(w.take(9)?.status, 4);
  assert.equal(w.take(10), undefined);
});
