// Unit tests of ShimProcess: the state machine containerd's State and Delete read, the exit
// every Wait fans out to, and the hold on exits while Start is in flight.
import assert from "node:assert/strict";
import { Code } from "../../../../sdk/ttrpc/status_error.ts";
import { ShimProcess } from "../../../../sdk/shim/server/process.ts";

const STDIO = { stdin: "", stdout: "/run/out", stderr: "", terminal: false };

Deno.test("a process goes created -> running -> paused -> running -> stopped", () => {
  const p = new ShimProcess("c1", "", STDIO);
  assert.equal(p.state, "created");
  assert.equal(p.pid, 0);
  p.started({ pid: 12 }, 345);
  assert.equal(p.pid, 12);
  assert.equal(p.startTime, 345);
  assert.equal(p.state, "created"); // created by the runtime; running only at Start
  p.markStarted();
  assert.equal(p.state, "running");
  p.setPaused("pausing");
  p.setPaused("paused");
  assert.equal(p.state, "paused");
  p.setPaused("running");
  p.markExited({ status: 2, exitedAt: new Date(0) });
  assert.equal(p.state, "stopped");
  p.setPaused("paused"); // a stopped process stays stopped
  p.markStarted();
  assert.equal(p.state, "stopped");
});

Deno.test("the first exit is the one kept, and every Wait gets it", async () => {
  const p = new ShimProcess("c1", "e1", STDIO);
  const waits = [p.exited, p.exited];
  p.markExited({ status: 3, exitedAt: new Date(1) });
  p.markExited({ status: 255, exitedAt: new Date(2) });
  for (const w of waits) assert.equal((await w).status, 3);
  assert.equal(p.exit?.status, 3);
});

Deno.test("startSettled waits for endStart; without a Start it resolves at once", async () => {
  const p = new ShimProcess("c1", "", STDIO);
  await p.startSettled();
  p.beginStart();
  let settled = false;
  const s = p.startSettled().then(() => settled = true);
  await Promise.resolve();
  assert.equal(settled, false);
  p.endStart();
  await s;
  assert.equal(settled, true);
});

Deno.test("only a created or stopped process may be deleted; the error names it", () => {
  const p = new ShimProcess("c1", "e1", STDIO);
  p.assertDeletable();
  p.markStarted();
  assert.throws(() => p.assertDeletable(), (e: Error & { code?: unknown }) => {
    assert.equal(e.code, Code.FailedPrecondition);
    assert.match(e.message, /running process: exec "e1" of container "c1"/);
    return true;
  });
  p.setPaused("paused");
  assert.throws(() => p.assertDeletable(), /paused process/);
  p.markExited({ status: 0, exitedAt: new Date() });
  p.assertDeletable();
});

Deno.test("the I/O attached is kept, and forgotten when a start fails", () => {
  const p = new ShimProcess("c1", "", STDIO);
  const io = {
    closeStdin: () => Promise.resolve(),
    drain: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
  p.attachIo(io);
  assert.equal(p.io, io);
  p.attachIo(undefined);
  assert.equal(p.io, undefined);
  assert.equal(p.id, "c1");
  assert.equal(new ShimProcess("c1", "e9", STDIO).id, "e9");
});
