// The Sandbox service's seam (sdk/shim/sandbox.ts) with a fake runtime hook, no containerd: a
// sandbox whose runtime reports its end (`SandboxStarted.exited`, a VM that died) is an exited
// sandbox for WaitSandbox and SandboxStatus; StopSandbox reports the runtime's exit status;
// ShutdownSandbox of a sandbox not stopped stops it first (containerd's controller shuts down a
// sandbox whose start failed) and lets the shim exit. The VM example under containerd:
// tests/external/vm_sandbox_containerd_test.ts.
import assert from "node:assert/strict";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";
import type { ContainerRuntime } from "../../../../sdk/shim/runtime.ts";
import type { SandboxRuntime, SandboxStarted } from "../../../../sdk/shim/sandbox.ts";
import { SandboxService } from "../../../../sdk/shim/server/sandbox_service.ts";
import type { TaskService } from "../../../../sdk/shim/server/task_service.ts";
import type { ShimPlatform } from "../../../../sdk/shim/server/platform.ts";
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
