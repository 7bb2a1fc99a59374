// The Sandbox service's seam (sdk/shim/sandbox.ts) with a fake runtime hook, no containerd: a
// sandbox whose runtime reports its end (`SandboxStarted.exited`, a VM that died) is an exited
// sandbox for WaitSandbox and SandboxStatus; StopSandbox reports the runtime's exit status;
// ShutdownSandbox of a sandbox not stopped stops it first (containerd's controller shuts down a
// sandbox whose start failed) and lets the shim exit. containerd's shimtest contract (Sandbox
// suite): one sandbox per shim (a second CreateSandbox is AlreadyExists; a shared server's pods
// hold one each), StartSandbox before CreateSandbox is FailedPrecondition, and the verbose
// status info carries `pid` and `state`. The VM example under containerd:
// tests/external/vm_sandbox_containerd_test.ts.
import assert from "node:assert/strict";
import type { ServiceImplSpec } from "@connectrpc/connect";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";
import type { ContainerRuntime } from "../../../../sdk/shim/runtime.ts";
import type { SandboxRuntime, SandboxStarted } from "../../../../sdk/shim/sandbox.ts";
import { SandboxService } from "../../../../sdk/shim/server/sandbox_service.ts";
import type { TaskService } from "../../../../sdk/shim/server/task_service.ts";
import type { ShimPlatform } from "../../../../sdk/shim/server/platform.ts";
import { registerServices } from "../../../../sdk/shim/server/services.ts";
import type { ShimFlags } from "../../../../sdk/shim/contract/flags.ts";
import type { EventPublisher } from "../../../../sdk/shim/server/events.ts";
import type { TtrpcServer } from "../../../../sdk/ttrpc/server.ts";
import { Code } from "../../../../sdk/ttrpc/status_error.ts";
import type {
  CreateSandboxRequest,
  ShutdownSandboxRequest,
  StartSandboxRequest,
  StopSandboxRequest,
  WaitSandboxRequest,
} from "../../../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";

/** A runtime whose sandbox is a fake VM: it ends when `die` or `stop` is called. */
class FakeVmShim extends Shim<object> {
  readonly runtimeName = "io.containerd.fake-vm.v2";
  readonly options = { defaults: () => ({}) };
  readonly calls: string[] = [];
  end = Promise.withResolvers<number>();

  runtime(): ContainerRuntime {
    throw new Error("no containers here");
  }

  override sandbox(): SandboxRuntime<object> {
    return {
      create: () => (this.calls.push("create"), Promise.resolve()),
      start: (): Promise<SandboxStarted> => {
        this.calls.push("start");
        return Promise.resolve({ pid: 4242, exited: this.end.promise });
      },
      stop: () => {
        this.calls.push("stop");
        this.end.resolve(0); // a clean power-off
        return Promise.resolve();
      },
    };
  }
}

function service(shim: Shim<object>) {
  const killed: number[] = [];
  let shutdowns = 0;
  const tasks = {
    containers: new Map(),
    killAll: (graceMs: number) => (killed.push(graceMs), Promise.resolve()),
  } as unknown as TaskService<object>;
  const svc = new SandboxService<object>({
    shim,
    tasks,
    platform: {} as ShimPlatform,
    logger: new Logger({ sink: () => {} }),
    namespace: "ns",
    onShutdown: () => shutdowns++,
  });
  return { svc, killed, shutdowns: () => shutdowns };
}

const req = <T>(m: Record<string, unknown>) => m as unknown as T;
const id = "sbx-1";

async function started(svc: SandboxService<object>): Promise<void> {
  await svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: id, bundlePath: "/tmp" }));
  const s = await svc.startSandbox(req<StartSandboxRequest>({ sandboxId: id }));
  assert.equal(s.pid, 4242, "the runtime's pid represents the sandbox");
}

Deno.test("a sandbox whose runtime reports its end is exited: Wait returns, Status is not ready", async () => {
  const shim = new FakeVmShim();
  const { svc, shutdowns } = service(shim);
  await started(svc);
  assert.equal(svc.sandboxStatus(req({ sandboxId: id })).state, "SANDBOX_READY");
  const waited = svc.waitSandbox(req<WaitSandboxRequest>({ sandboxId: id }));
  shim.end.resolve(137); // the hypervisor was SIGKILLed
  assert.equal((await waited).exitStatus, 137);
  const st = svc.sandboxStatus(req({ sandboxId: id }));
  assert.equal(st.state, "SANDBOX_NOTREADY");
  assert.ok(st.exitedAt, "the exit time is reported");
  // Stop and Shutdown of the dead sandbox: no stop of the runtime (nothing is left to stop).
  await svc.stopSandbox(req<StopSandboxRequest>({ sandboxId: id }));
  await svc.shutdownSandbox(req<ShutdownSandboxRequest>({ sandboxId: id }));
  assert.deepEqual(shim.calls, ["create", "start"]);
  assert.equal(shutdowns(), 1, "the shim exits");
});

Deno.test("StopSandbox kills the containers, stops the runtime and reports its exit status", async () => {
  const shim = new FakeVmShim();
  const { svc, killed } = service(shim);
  await started(svc);
  const waited = svc.waitSandbox(req<WaitSandboxRequest>({ sandboxId: id }));
  await Promise.all([
    svc.stopSandbox(req<StopSandboxRequest>({ sandboxId: id, timeoutSecs: 3 })),
    svc.stopSandbox(req<StopSandboxRequest>({ sandboxId: id, timeoutSecs: 3 })),
  ]);
  assert.deepEqual(killed, [3000], "the containers are killed once");
  assert.deepEqual(shim.calls, ["create", "start", "stop"], "the runtime is stopped once");
  assert.equal((await waited).exitStatus, 0);
  assert.equal(svc.sandboxStatus(req({ sandboxId: id })).state, "SANDBOX_NOTREADY");
});

Deno.test("ShutdownSandbox of a sandbox not stopped stops it first and lets the shim exit", async () => {
  for (const start of [true, false]) {
    const shim = new FakeVmShim();
    const { svc, shutdowns } = service(shim);
    if (start) await started(svc);
    else await svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: id, bundlePath: "/" }));
    await svc.shutdownSandbox(req<ShutdownSandboxRequest>({ sandboxId: id }));
    assert.deepEqual(shim.calls, start ? ["create", "start", "stop"] : ["create", "stop"]);
    assert.equal(svc.size, 0);
    assert.equal(shutdowns(), 1);
    assert.throws(() => svc.sandboxStatus(req({ sandboxId: id })), /not found/);
  }
});

/** A runtime whose started sandbox ends when the runtime says so, with `resumeEnd` or without. */
class UpgradableVmShim extends Shim<object> {
  readonly runtimeName = "io.containerd.fake-vm.v2";
  readonly options = { defaults: () => ({}) };
  readonly calls: string[] = [];
  /** The end `start` reports (`SandboxStarted.exited`), which the previous code waits for. */
  end = Promise.withResolvers<number>();
  /** The end `resumeEnd` reports. */
  resumed = Promise.withResolvers<number>();

  constructor(readonly canResume: boolean) {
    super();
  }

  runtime(): ContainerRuntime {
    throw new Error("no containers here");
  }

  override sandbox(): SandboxRuntime<object> {
    return {
      start: () => {
        this.calls.push("start");
        return Promise.resolve({ pid: 4242, exited: this.end.promise });
      },
      ...(this.canResume
        ? {
          resumeEnd: (ctx) => {
            this.calls.push(`resumeEnd ${ctx.id}`);
            return this.resumed.promise;
          },
        }
        : {}),
    };
  }
}

Deno.test("a started sandbox whose runtime reports its end is carried only with resumeEnd", async () => {
  const without = new UpgradableVmShim(false);
  const old = service(without).svc;
  await started(old);
  assert.throws(() => old.carry(), /sandbox "sbx-1".*resumeEnd/);

  const shim = new UpgradableVmShim(true);
  const { svc } = service(shim);
  await started(svc);
  const carried = svc.carry();
  assert.equal(carried.length, 1);
  assert.equal(carried[0].ends, true, "its end is the runtime's to report again");
  assert.equal(carried[0].state, "ready");
  assert.equal(carried[0].pid, 4242);
  assert.equal(carried[0].exited, undefined);

  // Code whose hook cannot report the end again cannot take it.
  assert.throws(
    () => service(new UpgradableVmShim(false)).svc.adopt(JSON.parse(JSON.stringify(carried))),
    /sandbox "sbx-1": this code's sandbox hook has no resumeEnd/,
  );

  // The next code: the same carry, through JSON as the state file has it.
  const next = new UpgradableVmShim(true);
  const { svc: resumed } = service(next);
  resumed.adopt(JSON.parse(JSON.stringify(carried)));
  assert.deepEqual(next.calls, [`resumeEnd ${id}`], "the end is asked for again");
  const st = resumed.sandboxStatus(req({ sandboxId: id }));
  assert.equal(st.state, "SANDBOX_READY");
  assert.equal(st.pid, 4242);
  const waited = resumed.waitSandbox(req<WaitSandboxRequest>({ sandboxId: id }));
  next.resumed.resolve(137); // the hypervisor was SIGKILLed after the upgrade
  assert.equal((await waited).exitStatus, 137);
  assert.equal(resumed.sandboxStatus(req({ sandboxId: id })).state, "SANDBOX_NOTREADY");
  // Stopped now: carried again, its end is no longer the runtime's to report.
  const again = resumed.carry();
  assert.equal(again[0].ends, undefined);
  assert.equal(again[0].exited?.status, 137);
});

Deno.test("a sandbox that ended before the upgrade is carried as stopped, without resumeEnd", async () => {
  const shim = new UpgradableVmShim(false);
  const { svc } = service(shim);
  await started(svc);
  const waited = svc.waitSandbox(req<WaitSandboxRequest>({ sandboxId: id }));
  shim.end.resolve(1);
  assert.equal((await waited).exitStatus, 1);
  const carried = svc.carry();
  assert.equal(carried[0].ends, undefined);
  assert.equal(carried[0].state, "stopped");

  const next = new UpgradableVmShim(false);
  const { svc: resumed } = service(next);
  resumed.adopt(JSON.parse(JSON.stringify(carried)));
  assert.deepEqual(next.calls, []);
  const w = await resumed.waitSandbox(req<WaitSandboxRequest>({ sandboxId: id }));
  assert.equal(w.exitStatus, 1);
});

/** Rejects (or throws) with `code` and a message matching `message`. */
async function refused(call: () => unknown, code: number, message: RegExp): Promise<void> {
  await assert.rejects(async () => await call(), (e: unknown) => {
    const err = e as { code?: number; rawMessage?: string };
    assert.equal(err.code, code, String(e));
    assert.match(err.rawMessage ?? "", message);
    return true;
  });
}

Deno.test("a second CreateSandbox on one shim is AlreadyExists, of another id as of the same", async () => {
  const shim = new FakeVmShim();
  const { svc } = service(shim);
  await started(svc);
  await refused(
    () => svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: "sbx-2", bundlePath: "/tmp" })),
    Code.AlreadyExists,
    /^cannot create sandbox "sbx-2": this shim already hosts sandbox "sbx-1"/,
  );
  await refused(
    () => svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: id, bundlePath: "/tmp" })),
    Code.AlreadyExists,
    /^sandbox "sbx-1" already exists$/,
  );
  // An invalid id is still InvalidArgument first (tests/integration/ops_shim_test.ts counts it).
  await refused(
    () =>
      svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: "not valid!", bundlePath: "/" })),
    Code.InvalidArgument,
    /invalid sandbox id/,
  );
  assert.equal(svc.size, 1);
  assert.deepEqual(shim.calls, ["create", "start"], "no runtime create for a refused sandbox");
  assert.equal(svc.sandboxStatus(req({ sandboxId: id })).state, "SANDBOX_READY");
  await refused(() => svc.sandboxStatus(req({ sandboxId: "sbx-2" })), Code.NotFound, /"sbx-2"/);
});

/** A runtime whose sandbox `create` waits for the test to let it finish or fail. */
class GatedShim extends Shim<object> {
  readonly runtimeName = "io.containerd.fake-vm.v2";
  readonly options = { defaults: () => ({}) };
  gate = Promise.withResolvers<void>();

  runtime(): ContainerRuntime {
    throw new Error("no containers here");
  }

  override sandbox(): SandboxRuntime<object> {
    return { create: () => this.gate.promise };
  }
}

Deno.test("a CreateSandbox under way holds the shim; one whose runtime create failed holds nothing", async () => {
  const shim = new GatedShim();
  const { svc } = service(shim);
  const first = svc.createSandbox(
    req<CreateSandboxRequest>({ sandboxId: "sbx-a", bundlePath: "/" }),
  );
  await refused(
    () => svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: "sbx-b", bundlePath: "/" })),
    Code.AlreadyExists,
    /^cannot create sandbox "sbx-b": this shim already hosts sandbox "sbx-a"/,
  );
  await refused(
    () => svc.startSandbox(req<StartSandboxRequest>({ sandboxId: "sbx-a" })),
    Code.FailedPrecondition,
    /^cannot start sandbox "sbx-a": its CreateSandbox has not finished$/,
  );
  shim.gate.reject(new Error("no room for the VM"));
  await assert.rejects(first, /no room for the VM/);
  assert.equal(svc.size, 0);
  shim.gate = Promise.withResolvers();
  shim.gate.resolve();
  await svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: "sbx-b", bundlePath: "/" }));
  assert.equal(svc.size, 1, "the shim's sandbox is the one created");
});

Deno.test("StartSandbox before CreateSandbox is FailedPrecondition; other calls of an unknown sandbox stay NotFound", async () => {
  const shim = new FakeVmShim();
  const { svc } = service(shim);
  await refused(
    () => svc.startSandbox(req<StartSandboxRequest>({ sandboxId: id })),
    Code.FailedPrecondition,
    /^cannot start sandbox "sbx-1": CreateSandbox was not called for it$/,
  );
  // NotFound is containerd's "gone": its controller's Stop takes it as done, CRI's status as
  // SANDBOX_NOTREADY.
  await refused(
    () => svc.sandboxStatus(req({ sandboxId: id })),
    Code.NotFound,
    /"sbx-1" not found/,
  );
  await refused(
    () => svc.stopSandbox(req<StopSandboxRequest>({ sandboxId: id })),
    Code.NotFound,
    /"sbx-1" not found/,
  );
  assert.deepEqual(shim.calls, [], "the runtime was not asked to start anything");

  await svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: id, bundlePath: "/tmp" }));
  await refused(
    () => svc.startSandbox(req<StartSandboxRequest>({ sandboxId: "sbx-2" })),
    Code.FailedPrecondition,
    /^cannot start sandbox "sbx-2": CreateSandbox was not called for it \(this shim hosts sandbox "sbx-1"\)$/,
  );
  const s = await svc.startSandbox(req<StartSandboxRequest>({ sandboxId: id }));
  assert.equal(s.pid, 4242);
  assert.deepEqual(shim.calls, ["create", "start"]);
});

Deno.test("SandboxStatus's verbose info carries the sandbox's pid and state; without verbose there is no info", async () => {
  const shim = new FakeVmShim();
  const { svc } = service(shim);
  const verbose = () => svc.sandboxStatus(req({ sandboxId: id, verbose: true }));
  await svc.createSandbox(req<CreateSandboxRequest>({ sandboxId: id, bundlePath: "/tmp" }));
  assert.deepEqual(verbose().info, {
    runtime: "io.containerd.fake-vm.v2",
    bundle: "/tmp",
    pid: "0",
    state: "SANDBOX_NOTREADY",
  });
  await svc.startSandbox(req<StartSandboxRequest>({ sandboxId: id }));
  const ready = verbose();
  assert.equal(ready.pid, 4242);
  assert.equal(ready.state, "SANDBOX_READY");
  assert.equal(ready.info?.pid, "4242", "the pid, in decimal");
  assert.equal(ready.info?.state, "SANDBOX_READY", "the same state as the state field");
  assert.deepEqual(svc.sandboxStatus(req({ sandboxId: id })).info, {}, "CRI: info only if verbose");
  await svc.stopSandbox(req<StopSandboxRequest>({ sandboxId: id }));
  const stopped = verbose();
  assert.equal(stopped.info?.state, "SANDBOX_NOTREADY");
  assert.equal(stopped.info?.pid, "4242");
});

/**
 * One pod's services as sdk/shim/server/pod.ts registers them (a shared server does so for each
 * of its pods, on each pod's own ttrpc server): the Sandbox API's methods once loaded.
 */
async function podSandboxApi(shim: Shim<object>, pod: string) {
  let load: (() => Promise<ServiceImplSpec>) | undefined;
  const server = {
    registerWire: () => server,
    registerLazy: (l: () => Promise<ServiceImplSpec>) => (load = l, server),
  } as unknown as TtrpcServer;
  const services = registerServices<object>(server, {
    shim,
    flags: { namespace: "ns", id: pod } as ShimFlags,
    logger: new Logger({ sink: () => {} }),
    bundle: `/nonexistent/skiff-test/${pod}`,
    endpoint: { address: `unix:///run/${pod}.sock`, version: 3, protocol: "ttrpc" },
    socket: `/run/${pod}.sock`,
    platform: { onExit: () => () => {} } as unknown as ShimPlatform,
    events: {} as EventPublisher,
    shutdown: () => {},
  });
  const spec = await load!();
  const call = (method: string, request: Record<string, unknown>) =>
    (spec.methods[method] as unknown as { impl: (r: unknown, c: unknown) => unknown }).impl(
      request,
      { requestHeader: new Headers() },
    );
  return { call, services };
}

Deno.test("a shared server's pods each host their own sandbox: one per pod, not one per process", async () => {
  const shim = new FakeVmShim();
  const a = await podSandboxApi(shim, "sbx-a");
  const b = await podSandboxApi(shim, "sbx-b");
  try {
    await a.call("createSandbox", { sandboxId: "sbx-a", bundlePath: "/tmp/a" });
    await b.call("createSandbox", { sandboxId: "sbx-b", bundlePath: "/tmp/b" });
    await refused(
      () => a.call("createSandbox", { sandboxId: "sbx-c", bundlePath: "/tmp/c" }),
      Code.AlreadyExists,
      /this shim already hosts sandbox "sbx-a"/,
    );
    await refused(
      () => b.call("startSandbox", { sandboxId: "sbx-a" }),
      Code.FailedPrecondition,
      /^cannot start sandbox "sbx-a": CreateSandbox was not called for it \(this shim hosts sandbox "sbx-b"\)$/,
    );
    await a.call("startSandbox", { sandboxId: "sbx-a" });
    await b.call("startSandbox", { sandboxId: "sbx-b" });
    assert.equal(a.services.sandboxes(), 1);
    assert.equal(b.services.sandboxes(), 1);
  } finally {
    a.services.tasks.close();
    b.services.tasks.close();
  }
});
