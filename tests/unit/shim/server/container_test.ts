// Unit tests of Container: Start and exec refusals, an exec's failed start, Kill, Delete with
// what the container holds, and the stats of an exited init.
import assert from "node:assert/strict";
import { Code, isStatusError } from "../../../../sdk/ttrpc/status_error.ts";
import { createContainer } from "../../../../sdk/shim/server/create.ts";
import type { Container } from "../../../../sdk/shim/server/container.ts";
import { RUNTIME_DELETED_FILE } from "../../../../sdk/shim/contract/bundle_files.ts";
import { deps, FakePlatform, FakeRuntime } from "./_container_fakes.ts";

const STDIO = { stdin: "", stdout: "/exec-out", stderr: "", terminal: false };

async function withContainer(
  fn: (t: {
    c: Container;
    runtime: FakeRuntime;
    platform: FakePlatform;
    events: string[];
    bundle: string;
  }) => Promise<void>,
) {
  const bundle = await Deno.makeTempDir();
  // A pid namespace of its own: nothing outlives the init, so its exit kills nothing.
  await Deno.writeTextFile(
    `${bundle}/config.json`,
    JSON.stringify({ linux: { namespaces: [{ type: "pid" }] } }),
  );
  try {
    const platform = new FakePlatform();
    const runtime = new FakeRuntime();
    const { deps: d, events, listed } = deps(platform);
    const c = await createContainer({
      id: "c1",
      bundle,
      rootfs: [{ type: "bind", source: "/x", target: "", options: [] }],
      checkpoint: "",
      stdin: "",
      stdout: "/out",
      stderr: "",
      terminal: false,
    }, { namespace: "ns", runtime, options: {}, deps: d, list: (c: Container) => listed.push(c) });
    platform.calls.length = 0;
    runtime.calls.length = 0;
    await fn({ c, runtime, platform, events, bundle });
    d.exits.close();
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
}

function code(e: unknown): number | undefined {
  return isStatusError(e) ? e.code : undefined;
}

/** Lets the router's asynchronous deliveries run. */
const settle = () => new Promise((r) => setTimeout(r, 5));

Deno.test("start: once; a second Start is FailedPrecondition naming the state", async () => {
  await withContainer(async ({ c, runtime, events }) => {
    assert.equal(await c.start(""), 100);
    assert.deepEqual(runtime.calls, ["start c1"]);
    assert.equal(c.init.state, "running");
    await assert.rejects(c.start(""), (e) => {
      assert.equal(code(e), Code.FailedPrecondition);
      assert.match(String(e), /cannot start container "c1": it is running/);
      return true;
    });
    assert.deepEqual(events, ["/tasks/create", "/tasks/start"]);
  });
});

Deno.test("exec: added, started, announced; an unknown exec id is NotFound", async () => {
  await withContainer(async ({ c, platform, events }) => {
    await c.start("");
    c.addExec("e1", STDIO, () => ({ args: ["true"] }));
    assert.throws(() => c.addExec("e1", STDIO, () => ({})), (e) => code(e) === Code.AlreadyExists);
    assert.equal(await c.start("e1"), 101);
    assert.deepEqual(platform.calls, ["open io /exec-out"]);
    assert.equal(c.process("e1").state, "running");
    assert.deepEqual(c.runningExecs().map((p) => p.execId), ["e1"]);
    assert.throws(() => c.process("nope"), (e) => {
      assert.equal(code(e), Code.NotFound);
      assert.match(String(e), /exec "nope" of container "c1" not found/);
      return true;
    });
    assert.deepEqual(events, [
      "/tasks/create",
      "/tasks/start",
      "/tasks/exec-added",
      "/tasks/exec-started",
    ]);
  });
});

Deno.test("exec: a failed runtime exec closes its stdio and leaves it unstarted", async () => {
  await withContainer(async ({ c, runtime, platform }) => {
    await c.start("");
    c.addExec("e1", STDIO, () => ({}));
    runtime.fail.add("exec");
    await assert.rejects(c.start("e1"), /exec failed/);
    const p = c.process("e1");
    assert.equal(p.pid, 0);
    assert.equal(p.io, undefined);
    assert.deepEqual(platform.calls, ["open io /exec-out", "close io /exec-out"]);
    await assert.rejects(c.kill("e1", 15, false), (e) => code(e) === Code.FailedPrecondition);
  });
});

Deno.test("exec: refused once the init's exit is taken in", async () => {
  await withContainer(async ({ c, platform }) => {
    await c.start("");
    c.addExec("e1", STDIO, () => ({}));
    platform.reap(100, 0);
    await c.init.exited;
    await assert.rejects(c.start("e1"), (e) => {
      assert.equal(code(e), Code.FailedPrecondition);
      assert.match(String(e), /init process has exited/);
      return true;
    });
    assert.throws(() => c.addExec("e2", STDIO, () => ({})), /its init process has exited/);
  });
});

Deno.test("kill: the init through the runtime; an exec by pid; a finished one NotFound", async () => {
  await withContainer(async ({ c, runtime, platform }) => {
    await c.start("");
    c.addExec("e1", STDIO, () => ({}));
    await c.start("e1");
    await c.kill("", 15, true);
    await c.kill("e1", 9, false);
    assert.deepEqual(runtime.calls, ["start c1", "exec c1 e1", "kill c1 15 all"]);
    assert.deepEqual(platform.calls.at(-1), "kill 101 9");
    platform.reap(101, 137);
    await c.process("e1").exited;
    await assert.rejects(c.kill("e1", 9, false), (e) => {
      assert.equal(code(e), Code.NotFound);
      assert.match(String(e), /process already finished: exec "e1"/);
      return true;
    });
  });
});

Deno.test("delete: refused while running; then releases the runtime, OOM watch, rootfs, and notes it", async () => {
  await withContainer(async ({ c, runtime, platform, events, bundle }) => {
    await c.start("");
    await assert.rejects(c.delete("", () => {}), (e) => code(e) === Code.FailedPrecondition);
    platform.reap(100, 3);
    await c.init.exited;
    await settle();
    let unlisted = false;
    const out = await c.delete("", () => unlisted = true);
    assert.equal(unlisted, true);
    assert.equal(out.pid, 100);
    assert.equal(out.exitStatus, 3);
    assert.deepEqual(runtime.calls, ["start c1", "delete c1"]);
    assert.deepEqual(platform.calls, [
      "close io /out",
      "unwatch oom 100",
      `unmount ${bundle}/rootfs`,
    ]);
    assert.equal(events.at(-1), "/tasks/delete");
    assert.ok((await Deno.stat(`${bundle}/${RUNTIME_DELETED_FILE}`)).isFile);
  });
});

Deno.test("stats: the platform's for a running init; NotFound once it exited without a kept cgroup", async () => {
  await withContainer(async ({ c, platform }) => {
    await c.start("");
    await c.stats();
    assert.deepEqual(platform.calls, ["stats 100"]);
    platform.reap(100, 0);
    await c.init.exited;
    await assert.rejects(c.stats(), (e) => {
      assert.equal(code(e), Code.NotFound);
      assert.match(String(e), /container "c1" is not running/);
      return true;
    });
  });
});

/** A gate a fake step waits on until `open()`. */
function gate() {
  const g = Promise.withResolvers<void>();
  return { promise: g.promise, open: () => g.resolve() };
}

/** The Start of `e1` begun, and held in its I/O open or its runtime exec by `hold`. */
async function startHeld(c: Container, hold: { open(): void }) {
  c.addExec("e1", { ...STDIO, stdin: "/exec-in", terminal: true }, () => ({}));
  const started = c.start("e1");
  await settle();
  return { started, release: async () => (hold.open(), await started) };
}

Deno.test("closeIO: one arriving while an exec's stdio is still being opened closes stdin on attach", async () => {
  await withContainer(async ({ c, platform }) => {
    const g = gate();
    platform.ioGate = g.promise;
    const { release } = await startHeld(c, g);
    // The client finished writing as soon as the stdin FIFO was open: its CloseIO comes now.
    await c.closeStdin("e1");
    assert.equal(c.process("e1").stdinClosed, true);
    assert.deepEqual(platform.calls, ["open io /exec-out"]);
    assert.equal(await release(), 101);
    assert.deepEqual(platform.calls, ["open io /exec-out", "close stdin /exec-out"]);
    // More CloseIOs close nothing twice.
    await c.closeStdin("e1");
    assert.deepEqual(platform.calls, ["open io /exec-out", "close stdin /exec-out"]);
  });
});

Deno.test("closeIO: before Start, during the runtime's exec and after it: each end closed once", async () => {
  await withContainer(async ({ c, platform, runtime }) => {
    runtime.ownsStdio = true;
    c.addExec("e1", { ...STDIO, stdin: "/exec-in" }, () => ({}));
    await c.closeStdin("e1"); // nothing attached yet: remembered
    const g = gate();
    runtime.execGate = g.promise;
    const started = c.start("e1");
    await settle();
    // The shim's FIFO end is attached and closed at once; the runtime's comes with its report.
    assert.deepEqual(platform.calls, ["open io /exec-out", "close stdin /exec-out"]);
    await c.closeStdin("e1");
    g.open();
    assert.equal(await started, 101);
    await settle();
    assert.deepEqual(runtime.calls, ["exec c1 e1", "close stdin 101"]);
    await c.closeStdin("e1");
    assert.deepEqual(runtime.calls, ["exec c1 e1", "close stdin 101"]);
    assert.deepEqual(platform.calls, ["open io /exec-out", "close stdin /exec-out"]);
  });
});

Deno.test("resizePty: a size asked while an exec starts reaches its terminal once attached", async () => {
  await withContainer(async ({ c, platform, runtime }) => {
    const g = gate();
    platform.ioGate = g.promise;
    const { release } = await startHeld(c, g);
    await c.resize("e1", 120, 40);
    await release();
    assert.deepEqual(platform.calls, ["open io /exec-out", "resize /exec-out 120x40"]);
    // A runtime that owns the terminal gets it with its report.
    runtime.ownsStdio = true;
    const g2 = gate();
    runtime.execGate = g2.promise;
    c.addExec("e2", { ...STDIO, terminal: true }, () => ({}));
    const started = c.start("e2");
    await settle();
    await c.resize("e2", 80, 25);
    g2.open();
    assert.equal(await started, 102);
    await settle();
    assert.deepEqual(runtime.calls.slice(-2), ["exec c1 e2", "resize 102 80x25"]);
  });
});

Deno.test("kill, delete and a second start of an exec mid-start wait for it or are refused", async () => {
  await withContainer(async ({ c, platform, runtime }) => {
    const g = gate();
    runtime.execGate = g.promise;
    const { started } = await startHeld(c, g);
    await assert.rejects(c.start("e1"), (e) => {
      assert.equal(code(e), Code.FailedPrecondition);
      assert.match(String(e), /exec "e1" of container "c1": it is starting/);
      return true;
    });
    // Kill waits for the pid, as the Go shim's Kill waits behind its Start; Delete then finds
    // the exec running.
    const killed = c.kill("e1", 9, false);
    const deleted = c.delete("e1", () => {});
    await settle();
    assert.deepEqual(platform.calls, ["open io /exec-out"]);
    g.open();
    await started;
    await killed;
    assert.deepEqual(platform.calls, ["open io /exec-out", "kill 101 9"]);
    await assert.rejects(deleted, (e) => code(e) === Code.FailedPrecondition);
    assert.equal(c.process("e1").state, "running");
  });
});
