// Unit tests of the Task service's state machine and event order, with a fake runtime and a
// fake platform (the integration tests run the real ones under real containerd).
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { CreateTaskRequestSchema } from "../../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Status } from "../../../../proto/gen/containerd/types/task/task_pb.ts";
import { TaskService } from "../../../../sdk/shim/server/task_service.ts";
import type { ReapedExit, ShimPlatform } from "../../../../sdk/shim/server/platform.ts";
import type { ContainerRuntime } from "../../../../sdk/shim/runtime.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";

class FakeRuntime implements ContainerRuntime {
  calls: string[] = [];
  constructor(private p: FakePlatform) {}
  /** With `exits`: each init's exit is reported by the runtime (RuntimeProcess.exited). */
  exits: Map<string, PromiseWithResolvers<number>> | undefined;
  create(id: string, o: { bundle: string }) {
    this.calls.push(`create ${id}`);
    const pid = this.p.spawned(this.p.fixedPid ?? this.p.nextPid++);
    this.p.pidFiles.set(`${o.bundle}/init.pid`, pid);
    this.p.duringStart?.(pid);
    if (!this.exits) return Promise.resolve({ pid });
    const exit = Promise.withResolvers<number>();
    this.exits.set(id, exit);
    return Promise.resolve({ pid, exited: exit.promise });
  }
  start(id: string) {
    this.calls.push(`start ${id}`);
    // A process that dies at once: its exit races the start event.
    if (this.p.dieOnStart) this.p.exit(this.p.pidOf(id), 0);
    return Promise.resolve();
  }
  /** Runs inside kill, before it returns (e.g. the signalled init exits meanwhile). */
  duringKill: (() => Promise<void>) | undefined;
  async kill(id: string, sig: number, o?: { all?: boolean }) {
    this.calls.push(`kill ${id} ${sig}${o?.all ? " all" : ""}`);
    await this.duringKill?.();
  }
  delete(id: string) {
    this.calls.push(`delete ${id}`);
    return Promise.resolve();
  }
  async exec(id: string, execId: string, _p: unknown, _o: unknown) {
    this.calls.push(`exec ${id}`);
    if (this.p.execGate) {
      // runc exec held up before it runs (runc-fp's delayExec), then failing on a dead init.
      await this.p.execGate;
      throw new Error("cannot exec in a stopped container");
    }
    const pid = this.p.spawned(this.p.execPids.shift() ?? this.p.nextPid++);
    this.p.pidFiles.set(`exec ${execId}`, pid);
    this.p.duringStart?.(pid);
    return { pid };
  }
  ps() {
    // Like runc's: reads the cgroup, so a process that left it is not listed.
    return Promise.resolve([...this.p.pidFiles.values()].filter((p) => !this.p.outOfCgroup.has(p)));
  }
  pause(id: string) {
    this.calls.push(`pause ${id}`);
    return Promise.resolve();
  }
  resume(id: string) {
    this.calls.push(`resume ${id}`);
    return Promise.resolve();
  }
  update() {
    return Promise.resolve();
  }
  checkpoint() {
    return Promise.reject(new Error("criu failed"));
  }
  restore(id: string, o: { bundle: string; imagePath: string; noSubreaper?: boolean }) {
    this.calls.push(`restore ${id} ${o.imagePath}${o.noSubreaper ? " no-subreaper" : ""}`);
    const pid = this.p.spawned(this.p.nextPid++);
    this.p.pidFiles.set(`${o.bundle}/init.pid`, pid);
    return Promise.resolve({ pid });
  }
}

class FakePlatform implements ShimPlatform {
  nextPid = 100;
  pidFiles = new Map<string, number>();
  dieOnStart = false;
  fixedPid: number | undefined;
  outOfCgroup = new Set<number>();
  /** Pids handed to the next execs, in order (recycled pids); then nextPid. */
  execPids: number[] = [];
  /** When set, the runtime's exec waits for it and then fails. */
  execGate: Promise<void> | undefined;
  /** What each process's output drain waits for (its copies' end); done at once by default. */
  outputDone: Promise<void> = Promise.resolve();
  /** Runs inside the runtime's create/exec, once the new process has its pid. */
  duringStart: ((pid: number) => void) | undefined;
  /** Clock ticks since boot; every new process starts one tick later than the last. */
  ticks = 1000;
  /** Start times of live processes, as /proc would tell. */
  starts = new Map<number, number>();
  startTimeOf?: (pid: number) => number | undefined = (pid) => this.starts.get(pid);
  bootTicks?: () => number = () => this.ticks;
  #listeners = new Set<(e: ReapedExit) => void>();
  pidOf(id: string) {
    void id; // one container per test
    return [...this.pidFiles.entries()].find(([f]) => f.endsWith("/init.pid"))![1];
  }
  /** A new process got `pid` (a live pid is the same process: a gVisor sandbox's, shared). */
  spawned(pid: number): number {
    if (!this.starts.has(pid)) this.starts.set(pid, ++this.ticks);
    return pid;
  }
  /** Reaps `pid`: by default the live process that has it; `startTime` names another. */
  exit(pid: number, status: number, startTime = this.starts.get(pid)) {
    if (startTime === this.starts.get(pid)) this.starts.delete(pid);
    const e: ReapedExit = { pid, status, exitedAt: new Date() };
    if (startTime !== undefined && this.startTimeOf) e.startTime = startTime;
    for (const l of this.#listeners) l(e);
  }
  spawn(cmd: Deno.Command) {
    return cmd.spawn();
  }
  onExit(l: (e: ReapedExit) => void) {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }
  openIo() {
    const outputDone = () => this.outputDone;
    return Promise.resolve({
      io: {
        terminal: false,
        stdio: { stdin: "null", stdout: "null", stderr: "null" } as const,
        attach() {},
        streams: () => ({}),
      },
      ready: () => Promise.resolve(),
      handle: {
        closeStdin: () => Promise.resolve(),
        drain: async (ms?: number) => {
          let timer: ReturnType<typeof setTimeout> | undefined;
          await Promise.race([outputDone(), new Promise((r) => timer = setTimeout(r, ms))]);
          clearTimeout(timer);
        },
        close: () => Promise.resolve(),
      },
    });
  }
  mount() {
    return Promise.resolve();
  }
  unmount() {
    return Promise.resolve();
  }
  stats(): Promise<Any> {
    return Promise.resolve(create(AnySchema, {}));
  }
  watchOom() {
    return Promise.resolve({ close() {} });
  }
  kill(pid: number) {
    this.exit(pid, 137);
  }
}

function setup() {
  const platform = new FakePlatform();
  const runtime = new FakeRuntime(platform);
  class TestShim extends Shim<{ x: number }> {
    readonly runtimeName = "io.containerd.test.v1";
    readonly options = { defaults: () => ({ x: 1 }) };
    runtime() {
      return runtime;
    }
  }
  const events: string[] = [];
  const exits: string[] = [];
  let shutdowns = 0;
  const svc = new TaskService({
    shim: new TestShim(),
    platform,
    events: {
      publish: (topic: string, _s: unknown, msg: unknown) => {
        events.push(topic);
        if (topic === "/tasks/exit") exits.push((msg as { id: string }).id);
      },
    },
    logger: new Logger(),
    namespace: "ns",
    onShutdown: () => shutdowns++,
  });
  return { svc, platform, runtime, events, exits, shutdowns: () => shutdowns };
}

async function withBundle(fn: (bundle: string) => Promise<void>) {
  const bundle = await Deno.makeTempDir();
  try {
    await fn(bundle);
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
}

function code(c: Code) {
  return (e: unknown) => e instanceof ConnectError && e.code === c;
}

const spec: Any = create(AnySchema, {
  typeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process",
  value: new TextEncoder().encode(JSON.stringify({ args: ["true"], cwd: "/" })),
});

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

/** Resolves with `p`'s value, or "pending" when it has not settled after a few turns. */
async function settledOrPending<V>(p: Promise<V>): Promise<V | "pending"> {
  const pending = new Promise<"pending">((r) => setTimeout(() => r("pending"), 20));
  return await Promise.race([p, pending]);
}

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
