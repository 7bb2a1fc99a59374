// Unit tests of createContainer: the steps in order, the announcement after the init is known,
// and every step undone in reverse when a later one fails.
import assert from "node:assert/strict";
import { createContainer } from "../../../../sdk/shim/server/create.ts";
import type { Container } from "../../../../sdk/shim/server/container.ts";
import { deps, FakePlatform, FakeRuntime } from "./_container_fakes.ts";

const MOUNTS = [{ type: "overlay", source: "overlay", target: "", options: [] }];

async function withBundle(fn: (bundle: string) => Promise<void>) {
  const bundle = await Deno.makeTempDir();
  try {
    await fn(bundle);
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
}

function request(bundle: string, o: { rootfs?: boolean; checkpoint?: string } = {}) {
  return {
    id: "c1",
    bundle,
    rootfs: o.rootfs ? MOUNTS : [],
    checkpoint: o.checkpoint ?? "",
    stdin: "",
    stdout: "/out",
    stderr: "",
    terminal: false,
  };
}

Deno.test("create: mount, stdio, the runtime's create, the OOM watch, then listed and announced", async () => {
  await withBundle(async (bundle) => {
    const platform = new FakePlatform();
    const runtime = new FakeRuntime();
    const { deps: d, events, listed } = deps(platform);
    const c = await createContainer(request(bundle, { rootfs: true }), {
      namespace: "ns",
      runtime,
      options: {},
      deps: d,
      list: (c: Container) => {
        events.push("listed");
        listed.push(c);
      },
    });
    assert.deepEqual(platform.calls, [`mount ${bundle}/rootfs`, "open io /out", "watch oom 100"]);
    assert.deepEqual(runtime.calls, ["create c1"]);
    assert.deepEqual(events, ["listed", "/tasks/create"]);
    assert.equal(c.init.pid, 100);
    assert.equal(c.init.state, "created");
    assert.equal(c.rootfsMounted, true);
    assert.equal(c.restoring, false);
  });
});

Deno.test("create: a failed runtime create undoes stdio and the mount, in reverse, and announces nothing", async () => {
  await withBundle(async (bundle) => {
    const platform = new FakePlatform();
    const runtime = new FakeRuntime();
    runtime.fail.add("create");
    const { deps: d, events, listed } = deps(platform);
    await assert.rejects(
      createContainer(request(bundle, { rootfs: true }), {
        namespace: "ns",
        runtime,
        options: {},
        deps: d,
        list: (c: Container) => listed.push(c),
      }),
      /create failed/,
    );
    assert.deepEqual(platform.calls, [
      `mount ${bundle}/rootfs`,
      "open io /out",
      "close io /out",
      `unmount ${bundle}/rootfs`,
    ]);
    assert.deepEqual(events, []);
    assert.equal(listed.length, 0);
  });
});

Deno.test("create: stdio that never gets ready deletes what the runtime created", async () => {
  await withBundle(async (bundle) => {
    const platform = new FakePlatform();
    platform.failIoReady = true;
    const runtime = new FakeRuntime();
    const { deps: d, events } = deps(platform);
    await assert.rejects(
      createContainer(request(bundle), {
        namespace: "ns",
        runtime,
        options: {},
        deps: d,
        list: () => {},
      }),
      /stdio not ready/,
    );
    assert.deepEqual(runtime.calls, ["create c1", "delete c1 force"]);
    assert.deepEqual(platform.calls, ["open io /out", "close io /out"]);
    assert.deepEqual(events, []);
  });
});

Deno.test("create: from a checkpoint nothing runs until Start restores it", async () => {
  await withBundle(async (bundle) => {
    const platform = new FakePlatform();
    const runtime = new FakeRuntime();
    const { deps: d, events, listed } = deps(platform);
    const c = await createContainer(request(bundle, { checkpoint: "/cp" }), {
      namespace: "ns",
      runtime,
      options: {},
      deps: d,
      list: (c: Container) => listed.push(c),
    });
    assert.deepEqual(runtime.calls, []);
    assert.deepEqual(platform.calls, ["open io /out"]);
    assert.deepEqual(events, ["/tasks/create"]);
    assert.equal(c.restoring, true);
    assert.equal(c.init.pid, 0);
    // Start restores it, with its OOM watch, and announces the start.
    assert.equal(await c.start(""), 100);
    assert.deepEqual(runtime.calls, [`restore c1 /cp ${bundle}/work/criu-work subreaper=false`]);
    assert.deepEqual(platform.calls, ["open io /out", "watch oom 100"]);
    assert.equal(c.restoring, false);
    assert.equal(c.init.state, "running");
    assert.deepEqual(events, ["/tasks/create", "/tasks/start"]);
  });
});
