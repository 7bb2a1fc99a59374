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
