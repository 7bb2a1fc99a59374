// Unit tests of the Task service's state machine: lifecycle, containerd's codes for invalid
// transitions, pause, Pids, Stats, restore (fakes in _task_service_fakes.ts; the integration
// tests run the real ones under real containerd).
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { CreateTaskRequestSchema } from "../../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Status } from "../../../../proto/gen/containerd/types/task/task_pb.ts";
import { code, settledOrPending, setup, spec, withBundle } from "./_task_service_fakes.ts";

Deno.test("TaskService runs create → start → exit → delete with events in order", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, events } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.CREATED);
    await svc.start({ id: "c1", execId: "" } as never);
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.RUNNING);
    const w1 = svc.wait({ id: "c1", execId: "" } as never);
    const w2 = svc.wait({ id: "c1", execId: "" } as never);
    platform.exit(pid!, 3);
    assert.deepEqual([(await w1).exitStatus, (await w2).exitStatus], [3, 3], "every waiter");
    const d = await svc.delete({ id: "c1", execId: "" } as never);
    assert.equal(d.exitStatus, 3);
    assert.deepEqual(events, ["/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"]);
  });
});

Deno.test("TaskService restores a task created from a checkpoint at Start, as the Go shim", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, runtime, events } = setup();
    const req = create(CreateTaskRequestSchema, { id: "c1", bundle, checkpoint: "/ckpt" });
    const created = await svc.create(req);
    assert.equal(created.pid, 0, "nothing runs before Start");
    assert.deepEqual(runtime.calls, [], "no runtime create for a restore");
    const started = await svc.start({ id: "c1", execId: "" } as never);
    assert.deepEqual(runtime.calls, ["restore c1 /ckpt no-subreaper"]);
    assert.equal(started.pid, platform.pidOf("c1"));
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.RUNNING);
    platform.exit(started.pid!, 7);
    assert.equal((await svc.wait({ id: "c1", execId: "" } as never)).exitStatus, 7);
    assert.deepEqual(events, ["/tasks/create", "/tasks/start", "/tasks/exit"]);

    // A runtime without restore: Create from a checkpoint is Unimplemented, as before.
    const bare = setup();
    (bare.runtime as { restore?: unknown }).restore = undefined;
    await assert.rejects(
      bare.svc.create(create(CreateTaskRequestSchema, { id: "c2", bundle, checkpoint: "/ckpt" })),
      code(Code.Unimplemented),
    );
  });
});

Deno.test("TaskService returns containerd's codes for invalid transitions", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, shutdowns } = setup();
    await assert.rejects(
      svc.create(create(CreateTaskRequestSchema, { id: "bad/id", bundle })),
      (e: unknown) =>
        code(Code.InvalidArgument)(e) && /invalid container id "bad\/id"/.test(String(e)),
    );
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await assert.rejects(
      svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle })),
      code(Code.AlreadyExists),
    );
    assert.throws(() => svc.state({ id: "nope", execId: "" } as never), code(Code.NotFound));
    await svc.start({ id: "c1", execId: "" } as never);
    await assert.rejects(
      svc.start({ id: "c1", execId: "" } as never),
      code(Code.FailedPrecondition),
    );
    await assert.rejects(
      svc.delete({ id: "c1", execId: "" } as never),
      code(Code.FailedPrecondition),
    );
    svc.shutdown({ id: "c1", now: false } as never);
    assert.equal(shutdowns(), 0, "Shutdown is a no-op while containers remain");

    svc.exec({ id: "c1", execId: "e1", spec, terminal: false } as never);
    assert.throws(
      () => svc.exec({ id: "c1", execId: "e1", spec } as never),
      code(Code.AlreadyExists),
    );
    await assert.rejects(
      svc.kill({ id: "c1", execId: "e1", signal: 9 } as never),
      code(Code.FailedPrecondition),
    );
    assert.throws(
      () => svc.exec({ id: "c1", execId: "e 2", spec } as never),
      code(Code.InvalidArgument),
    );
    assert.throws(
      () =>
        svc.exec(
          {
            id: "c1",
            execId: "e3",
            spec: create(AnySchema, { typeUrl: "x", value: new Uint8Array([1]) }),
          } as never,
        ),
      code(Code.InvalidArgument),
    );

    platform.exit(pid!, 0);
    await svc.wait({ id: "c1", execId: "" } as never);
    await assert.rejects(
      svc.kill({ id: "c1", execId: "", signal: 15 } as never),
      code(Code.NotFound),
    );
    await assert.rejects(
      svc.start({ id: "c1", execId: "e1" } as never),
      code(Code.FailedPrecondition),
    );
    await assert.rejects(svc.stats({ id: "c1" } as never), code(Code.NotFound));
    await assert.rejects(
      svc.checkpoint({ id: "c1", path: "/x" } as never),
      code(Code.FailedPrecondition),
    );
    await svc.delete({ id: "c1", execId: "" } as never);
    svc.shutdown({ id: "c1", now: false } as never);
    assert.equal(shutdowns(), 1, "Shutdown exits once nothing is left");
  });
});

Deno.test("TaskService pauses and resumes, and rejects resume of a running task", async () => {
  await withBundle(async (bundle) => {
    const { svc, runtime, events } = setup();
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await assert.rejects(svc.pause({ id: "c1" } as never), code(Code.FailedPrecondition));
    await svc.start({ id: "c1", execId: "" } as never);
    await svc.pause({ id: "c1" } as never);
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.PAUSED);
    await assert.rejects(
      svc.delete({ id: "c1", execId: "" } as never),
      code(Code.FailedPrecondition),
    );
    await svc.resume({ id: "c1" } as never);
    await assert.rejects(svc.resume({ id: "c1" } as never), code(Code.FailedPrecondition));
    assert.deepEqual(runtime.calls.slice(-2), ["pause c1", "resume c1"]);
    assert.ok(events.includes("/tasks/paused") && events.includes("/tasks/resumed"));
  });
});

Deno.test("TaskService Pids lists an init that died but is not reaped yet (containerd 1.7+ would drop the shim as leaked)", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    const pids = async () =>
      (await svc.pids({ id: "c1" } as never)).processes?.map((p) => (p as { pid: number }).pid);
    assert.deepEqual(await pids(), [pid]);
    // The init exits: it leaves its cgroup at once, but the shim reaps it a little later.
    platform.outOfCgroup.add(pid!);
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.RUNNING);
    assert.deepEqual(await pids(), [pid], "running per State, so listed by Pids");
    platform.exit(pid!, 3);
    // Once the reaped exit is processed (Wait answers), the init is STOPPED and not listed.
    assert.equal((await svc.wait({ id: "c1", execId: "" } as never)).exitStatus, 3);
    assert.equal(svc.state({ id: "c1", execId: "" } as never).status, Status.STOPPED);
    assert.deepEqual(await pids(), []);
  });
});

for (const startTimes of [true, false]) {
  const variant = startTimes ? "with start times" : "by pid alone (no start times)";
  const setupVariant = () => {
    const s = setup();
    if (!startTimes) {
      s.platform.startTimeOf = undefined;
      s.platform.bootTicks = undefined;
    }
    return s;
  };

  Deno.test(`TaskService never gives an exec the exit of an earlier process with its pid (${variant})`, async () => {
    await withBundle(async (bundle) => {
      const { svc, platform } = setupVariant();
      await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
      await svc.start({ id: "c1", execId: "" } as never);
      // exec 1279 gets pid 4242, exits 29 and is deleted; pids wrap; exec 1313 gets 4242 again.
      platform.execPids = [4242, 4242];
      svc.exec({ id: "c1", execId: "e1279", spec } as never);
      await svc.start({ id: "c1", execId: "e1279" } as never);
      platform.exit(4242, 29);
      assert.equal((await svc.wait({ id: "c1", execId: "e1279" } as never)).exitStatus, 29);
      await svc.delete({ id: "c1", execId: "e1279" } as never);
      svc.exec({ id: "c1", execId: "e1313", spec } as never);
      const { pid } = await svc.start({ id: "c1", execId: "e1313" } as never);
      assert.equal(pid, 4242);
      const wait = svc.wait({ id: "c1", execId: "e1313" } as never);
      assert.equal(await settledOrPending(wait), "pending", "the new exec is still running");
      assert.equal(svc.state({ id: "c1", execId: "e1313" } as never).status, Status.RUNNING);
      platform.exit(4242, 63);
      assert.equal((await wait).exitStatus, 63);
    });
  });

  Deno.test(`TaskService gives an exec that exits before its pid is known its own exit (${variant})`, async () => {
    await withBundle(async (bundle) => {
      const { svc, platform, events } = setupVariant();
      await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
      await svc.start({ id: "c1", execId: "" } as never);
      svc.exec({ id: "c1", execId: "fast", spec } as never);
      platform.duringStart = (pid) => platform.exit(pid, 71); // reaped before the pid file is read
      await svc.start({ id: "c1", execId: "fast" } as never);
      platform.duringStart = undefined;
      assert.equal((await svc.wait({ id: "c1", execId: "fast" } as never)).exitStatus, 71);
      await new Promise((r) => setTimeout(r, 0));
      assert.deepEqual(events.slice(-2), ["/tasks/exec-started", "/tasks/exit"]);
    });
  });

  Deno.test(`TaskService gives an init that exits during create its own exit, after /tasks/create (${variant})`, async () => {
    await withBundle(async (bundle) => {
      const { svc, platform, events } = setupVariant();
      platform.duringStart = (pid) => platform.exit(pid, 7);
      await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
      platform.duringStart = undefined;
      assert.equal((await svc.wait({ id: "c1", execId: "" } as never)).exitStatus, 7);
      await new Promise((r) => setTimeout(r, 0));
      assert.deepEqual(events, ["/tasks/create", "/tasks/exit"]);
    });
  });
}

Deno.test("TaskService Pids lists running execs the runtime's ps does not see (gVisor's own pid space)", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    svc.exec({ id: "c1", execId: "e1", spec } as never);
    const { pid: epid } = await svc.start({ id: "c1", execId: "e1" } as never);
    platform.outOfCgroup.add(pid!).add(epid!); // the runtime's ps lists neither
    const listed = (await svc.pids({ id: "c1" } as never)).processes ?? [];
    assert.deepEqual(listed.map((p) => (p as { pid: number }).pid), [pid, epid]);
    assert.ok((listed[1] as { info?: unknown }).info, "the exec carries its ProcessDetails");
    platform.exit(epid!, 0);
    await svc.wait({ id: "c1", execId: "e1" } as never);
    const after = (await svc.pids({ id: "c1" } as never)).processes ?? [];
    assert.deepEqual(after.map((p) => (p as { pid: number }).pid), [pid]);
  });
});

Deno.test("TaskService passes a runtime's own stats status through; a failed read is NotFound", async () => {
  await withBundle(async (bundle) => {
    const { svc, runtime } = setup();
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    const r = runtime as unknown as { stats?: (id: string) => Promise<never> };
    r.stats = (id) => Promise.reject(new ConnectError(`no stats for ${id}`, Code.Unimplemented));
    await assert.rejects(svc.stats({ id: "c1" } as never), code(Code.Unimplemented));
    r.stats = () => Promise.reject(new Error("memory.stat: ENOENT"));
    await assert.rejects(
      svc.stats({ id: "c1" } as never),
      (e: unknown) =>
        code(Code.NotFound)(e) && /stats of container "c1": memory.stat: ENOENT/.test(String(e)),
    );
  });
});

Deno.test("TaskService answers Stats of an exited init from the cgroup it kept, until Delete (containerd 2.4's OOM check)", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    const kept = [{ controllers: ["memory"], path: "/ns/c1" }];
    const asked: unknown[] = [];
    Object.assign(platform, {
      cgroupOf: (pid: number) => pid === platform.pidOf("c1") ? kept : undefined,
      stats: (_pid: number, cgroup?: unknown) => {
        asked.push(cgroup);
        return Promise.resolve(create(AnySchema, { typeUrl: "io.containerd.cgroups.v1.Metrics" }));
      },
    });
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    assert.equal(
      (await svc.stats({ id: "c1" } as never)).stats?.typeUrl,
      "io.containerd.cgroups.v1.Metrics",
    );
    platform.exit(pid!, 137);
    await svc.wait({ id: "c1", execId: "" } as never);
    // As the Go shim: the exited task's cgroup (kept at create) still answers.
    assert.equal(
      (await svc.stats({ id: "c1" } as never)).stats?.typeUrl,
      "io.containerd.cgroups.v1.Metrics",
    );
    assert.deepEqual(asked, [kept, kept]);
    await svc.delete({ id: "c1", execId: "" } as never);
    await assert.rejects(svc.stats({ id: "c1" } as never), code(Code.NotFound));
  });
});

Deno.test("TaskService answers Stats of an init in the shim's own cgroup Unimplemented, naming it, and watches no OOM there", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    let watched = 0;
    Object.assign(platform, {
      inShimCgroup: () => "/system.slice/containerd.service",
      watchOom: () => {
        watched++;
        return Promise.resolve({ close() {} });
      },
    });
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    await assert.rejects(
      svc.stats({ id: "c1" } as never),
      (e: unknown) =>
        code(Code.Unimplemented)(e) &&
        (e as Error).message.includes(
          `stats of container "c1": its init (pid ${pid}) runs in the shim's own cgroup (/system.slice/containerd.service)`,
        ),
    );
    assert.equal(watched, 0, "no OOM watch of the shim's cgroup");
  });
});
