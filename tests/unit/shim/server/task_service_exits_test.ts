// Unit tests of the Task service's exits, through the service: event order around starts and
// Kill replies, output before exit, pid reuse, runtime-reported and ctx.spawn exits (fakes in
// _task_service_fakes.ts; exits.ts's own tests are exits_test.ts).
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { CreateTaskRequestSchema } from "../../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Status } from "../../../../proto/gen/containerd/types/task/task_pb.ts";
import { TaskService } from "../../../../sdk/shim/server/task_service.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";
import {
  code,
  FakePlatform,
  FakeRuntime,
  settledOrPending,
  setup,
  spec,
  withBundle,
} from "./_task_service_fakes.ts";

Deno.test("TaskService holds a reaped exit until the process's output has landed (bounded)", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, events } = setup();
    // The output copy (a terminal's last line, read from the pty after the exit) is still going.
    const output = Promise.withResolvers<void>();
    platform.outputDone = output.promise;
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    let waited = false;
    const w = svc.wait({ id: "c1", execId: "" } as never).then((r) => (waited = true, r));
    platform.exit(pid!, 3);
    // containerd's client closes its FIFOs once it has the exit: neither Wait nor the event may
    // go out before the copy ends (several turns of the event loop, a timer's included).
    for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 0));
    assert.equal(waited, false, "Wait answered before the output landed");
    assert.deepEqual(events, ["/tasks/create", "/tasks/start"]);
    output.resolve();
    assert.equal((await w).exitStatus, 3);
    assert.deepEqual(events, ["/tasks/create", "/tasks/start", "/tasks/exit"]);

    // Output held open by something else (a child left behind): the exit still goes out.
    const held = setup();
    held.platform.outputDone = new Promise(() => {});
    const c2 = await held.svc.create(create(CreateTaskRequestSchema, { id: "c2", bundle }));
    await held.svc.start({ id: "c2", execId: "" } as never);
    held.platform.exit(c2.pid!, 4);
    assert.equal((await held.svc.wait({ id: "c2", execId: "" } as never)).exitStatus, 4);
    assert.deepEqual(held.events, ["/tasks/create", "/tasks/start", "/tasks/exit"]);
  });
});

Deno.test("TaskService holds a reaped exit for as long as its io says the output is still landing", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, events } = setup();
    // A slow client is still taking the exited process's output (ProcessIo.landed).
    const landed = Promise.withResolvers<void>();
    platform.outputLanded = landed.promise;
    platform.outputDone = new Promise(() => {}); // a child left behind holds the pipes
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    let waited = false;
    const w = svc.wait({ id: "c1", execId: "" } as never).then((r) => (waited = true, r));
    platform.exit(pid!, 3);
    // Longer than the fixed wait this replaced (500 ms): only landing lets the exit go.
    await new Promise((r) => setTimeout(r, 700));
    assert.equal(waited, false, "Wait answered while the output was still landing");
    assert.deepEqual(events, ["/tasks/create", "/tasks/start"]);
    landed.resolve();
    assert.equal((await w).exitStatus, 3);
    assert.deepEqual(events, ["/tasks/create", "/tasks/start", "/tasks/exit"]);
  });
});

Deno.test("TaskService publishes /tasks/start before /tasks/exit when the process dies at once", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, events } = setup();
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    platform.dieOnStart = true;
    await svc.start({ id: "c1", execId: "" } as never);
    await svc.wait({ id: "c1", execId: "" } as never);
    await new Promise((r) => setTimeout(r, 0));
    assert.deepEqual(events, ["/tasks/create", "/tasks/start", "/tasks/exit"]);
  });
});

Deno.test("TaskService publishes an init's exit after its execs' exits", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, events, exits } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    svc.exec({ id: "c1", execId: "e1", spec } as never);
    const { pid: epid } = await svc.start({ id: "c1", execId: "e1" } as never);
    platform.exit(pid!, 0); // init dies first ...
    await new Promise((r) => setTimeout(r, 10));
    platform.exit(epid!, 137); // ... its exec is killed with it
    await svc.wait({ id: "c1", execId: "" } as never);
    await new Promise((r) => setTimeout(r, 0));
    assert.deepEqual(exits, ["e1", "c1"], "the exec's exit first, the init's last");
    assert.deepEqual(events.slice(0, 4), [
      "/tasks/create",
      "/tasks/start",
      "/tasks/exec-added",
      "/tasks/exec-started",
    ]);
    const state = svc.state({ id: "c1", execId: "e1" } as never);
    assert.equal(state.exitStatus, 137);
  });
});

Deno.test("TaskService answers a Kill of the init before it publishes the exit that Kill caused", async () => {
  // Seen under CRI: the init exits ~10 ms into a 40 ms `runc kill`; containerd deletes the task
  // on /tasks/exit, closing the connection the Kill reply had still to be written to.
  await withBundle(async (bundle) => {
    const { svc, platform, runtime, events } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    runtime.duringKill = async () => {
      runtime.duringKill = undefined; // only this Kill (not the kill --all on the init's exit)
      platform.exit(pid!, 143); // the signal is delivered and the init dies at once ...
      await new Promise((r) => setTimeout(r, 50)); // ... while the runtime's kill still runs
    };
    let exitPublishedBeforeReply: boolean | undefined;
    await svc.kill({ id: "c1", execId: "", signal: 15, all: false } as never).then(() => {
      exitPublishedBeforeReply = events.includes("/tasks/exit");
    });
    assert.equal(exitPublishedBeforeReply, false, `events when Kill returned: ${events}`);
    const w = await svc.wait({ id: "c1", execId: "" } as never);
    assert.equal(w.exitStatus, 143);
    assert.equal(events.at(-1), "/tasks/exit", "the exit is still published, after the reply");
  });
});

Deno.test("TaskService creates an exec after the init died while another exec starts; its Start fails (containerd #10589)", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, exits } = setup();
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    const gate = Promise.withResolvers<void>();
    platform.execGate = gate.promise;
    svc.exec({ id: "c1", execId: "e1", spec } as never);
    const start1 = svc.start({ id: "c1", execId: "e1" } as never);
    await new Promise((r) => setTimeout(r, 10));
    platform.exit(pid!, 137); // SIGKILL of the init while e1's runc exec is held up
    await new Promise((r) => setTimeout(r, 10));
    // The Go shim holds the init's exit while an exec starts: a second Exec still creates ...
    svc.exec({ id: "c1", execId: "e2", spec } as never);
    // ... and only its Start fails.
    await assert.rejects(
      svc.start({ id: "c1", execId: "e2" } as never),
      (e: unknown) => code(Code.FailedPrecondition)(e) && /init process has exited/.test(String(e)),
    );
    assert.deepEqual(exits, [], "the init's exit waits for e1's Start");
    gate.resolve();
    await assert.rejects(start1, /cannot exec in a stopped container/);
    assert.equal((await svc.wait({ id: "c1", execId: "" } as never)).exitStatus, 137);
    assert.deepEqual(exits, ["c1"]);
    // Once the init's exit is out, Exec refuses, as before.
    assert.throws(
      () => svc.exec({ id: "c1", execId: "e3", spec } as never),
      code(Code.FailedPrecondition),
    );
  });
});

Deno.test("TaskService takes a runtime's reported exits, and a reaped one only when the report fails", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, runtime, exits } = setup();
    const waits = new Map<string, PromiseWithResolvers<number>>();
    runtime.exits = waits;
    // Two inits in one sandbox process: the runtime reports the same pid for both.
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "pod", bundle }));
    platform.fixedPid = pid;
    const app = await svc.create(create(CreateTaskRequestSchema, { id: "app", bundle }));
    assert.equal(app.pid, pid);
    await svc.start({ id: "pod", execId: "" } as never);
    await svc.start({ id: "app", execId: "" } as never);
    waits.get("app")!.resolve(137); // the member exits inside the live sandbox
    assert.equal((await svc.wait({ id: "app", execId: "" } as never)).exitStatus, 137);
    assert.equal(svc.state({ id: "pod", execId: "" } as never).status, Status.RUNNING);
    platform.exit(pid!, 0); // the sandbox process dies: the reaper's exit waits aside ...
    const wait = svc.wait({ id: "pod", execId: "" } as never);
    assert.equal(await settledOrPending(wait), "pending", "the runtime reports the exit");
    waits.get("pod")!.reject(new Error("sandbox gone")); // ... until the report fails
    assert.equal((await wait).exitStatus, 0);
    await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(exits, ["app", "pod"], "one exit event per container");
    assert.equal(svc.state({ id: "pod", execId: "" } as never).exitStatus, 0);
  });
});

Deno.test("TaskService does not take the exit of a pid's earlier holder reaped while the new process starts", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    // An orphan that had pid 5151 since tick 3 is reaped inside the exec's start window, and the
    // exec then gets 5151: the orphan's exit is not the exec's.
    platform.execPids = [5151];
    platform.duringStart = (pid) => platform.exit(pid, 99, 3);
    svc.exec({ id: "c1", execId: "e1", spec } as never);
    await svc.start({ id: "c1", execId: "e1" } as never);
    platform.duringStart = undefined;
    const wait = svc.wait({ id: "c1", execId: "e1" } as never);
    assert.equal(await settledOrPending(wait), "pending");
    platform.exit(5151, 5);
    assert.equal((await wait).exitStatus, 5);
  });
});

Deno.test("TaskService routes an exit with a known pid but another start time away from that process", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform } = setup();
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    svc.exec({ id: "c1", execId: "e1", spec } as never);
    const { pid } = await svc.start({ id: "c1", execId: "e1" } as never);
    const wait = svc.wait({ id: "c1", execId: "e1" } as never);
    platform.exit(pid!, 42, 1); // a process that had this pid long ago
    assert.equal(await settledOrPending(wait), "pending");
    platform.exit(pid!, 0);
    assert.equal((await wait).exitStatus, 0);
  });
});

Deno.test("TaskService takes the exit of a process the runtime spawned with ctx.spawn and reported by pid (no hang)", async () => {
  await withBundle(async (bundle) => {
    const platform = new FakePlatform();
    // A non-OCI runtime as the guide writes one: it runs its process as a plain child through
    // ctx.spawn and resolves `{ pid }`, with no `exited`. The reaper never sees Deno's children.
    class ChildRuntime extends FakeRuntime {
      #spawn: (cmd: Deno.Command) => Deno.ChildProcess;
      #children = new Map<string, Deno.ChildProcess>();
      constructor(spawn: (cmd: Deno.Command) => Deno.ChildProcess) {
        super(platform);
        this.#spawn = spawn;
      }
      override create(id: string) {
        const child = this.#spawn(
          new Deno.Command("sh", { args: ["-c", "read x; exit 5"], stdin: "piped" }),
        );
        this.#children.set(id, child);
        return Promise.resolve({ pid: child.pid });
      }
      override async start(id: string) {
        const w = this.#children.get(id)!.stdin.getWriter();
        await w.write(new TextEncoder().encode("go\n"));
        await w.close();
      }
      override exec() {
        // Ends before exec returns: its exit is still its own.
        const child = this.#spawn(new Deno.Command("sh", { args: ["-c", "exit 9"] }));
        return child.status.then(() => ({ pid: child.pid }));
      }
    }
    class ChildShim extends Shim<{ x: number }> {
      readonly runtimeName = "io.containerd.test.v1";
      readonly options = { defaults: () => ({ x: 1 }) };
      runtime(ctx: { spawn: (cmd: Deno.Command) => Deno.ChildProcess }) {
        return new ChildRuntime(ctx.spawn);
      }
    }
    const svc = new TaskService({
      shim: new ChildShim(),
      platform,
      events: { publish: () => {} },
      logger: new Logger(),
      namespace: "ns",
      onShutdown: () => {},
    });
    await svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle }));
    await svc.start({ id: "c1", execId: "" } as never);
    await svc.exec({ id: "c1", execId: "e1", spec } as never);
    await svc.start({ id: "c1", execId: "e1" } as never);
    assert.equal((await svc.wait({ id: "c1", execId: "e1" } as never)).exitStatus, 9);
    assert.equal((await svc.wait({ id: "c1", execId: "" } as never)).exitStatus, 5);
    await svc.delete({ id: "c1", execId: "" } as never);
  });
});

Deno.test("TaskService refuses a reported pid whose exit it could never see (FailedPrecondition naming why) and undoes the create", async () => {
  await withBundle(async (bundle) => {
    const { svc, platform, runtime } = setup();
    // The Linux platform's answers for a pid that is another process's child.
    (platform as { unseenExit?: (pid: number) => string | undefined }).unseenExit = (pid) =>
      pid === 100 ? "its parent is pid 1, not this shim (pid 7)" : undefined;
    await assert.rejects(
      svc.create(create(CreateTaskRequestSchema, { id: "c1", bundle })),
      (e: unknown) => {
        assert.ok(e instanceof ConnectError || (e as Error).name === "ConnectError", String(e));
        assert.equal((e as ConnectError).code, Code.FailedPrecondition);
        assert.match(
          (e as Error).message,
          /container "c1": the runtime reported pid 100 without an exit, and the shim could never see it exit: its parent is pid 1, not this shim \(pid 7\)\. Report RuntimeProcess\.exited, or start the process with ctx\.spawn/,
        );
        return true;
      },
    );
    assert.deepEqual(
      runtime.calls,
      ["create c1", "delete c1"],
      "the runtime's container is deleted",
    );
    // A pid the shim will see exit (the next one) is taken as before.
    const { pid } = await svc.create(create(CreateTaskRequestSchema, { id: "c2", bundle }));
    assert.equal(pid, 101);
  });
});
