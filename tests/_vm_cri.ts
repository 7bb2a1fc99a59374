/**
 * One CRI pod of the VM example under a private containerd with CRI, on either of containerd's
 * sandboxers: `podsandbox` (CRI's pause container boots the VM) or `shim` (the Sandbox API: the
 * sandbox is the VM, no pause container). {@linkcode criVmPod} runs a pod's life (two containers
 * and more in one VM, ExecSync, CRI's logs, exit codes, StopContainer's SIGTERM, stop and
 * remove); {@linkcode criVmDies} kills a pod's QEMU. Afterwards nothing of the VM may be left.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { ContainerdVersion, PrivateContainerd } from "../sdk/testing/containerd.ts";
import { startContainerd } from "../sdk/testing/containerd.ts";
import { containerdClient } from "../sdk/testing/containerd_client.ts";
import { CRI_NAMESPACE, type CriClient, criClient } from "../sdk/testing/cri_client.ts";
import { BUSYBOX_IMAGE_REF } from "../sdk/testing/image.ts";
import { criContainerConfig, criPodConfig } from "../sdk/testing/cri_container.ts";
import {
  ContainerState,
  type ContainerStatus,
  type PodSandboxConfig,
  PodSandboxState,
} from "../proto/gen/runtime/v1/api_pb.ts";
import {
  installVmShim,
  killVmsAfter,
  until,
  VM_CALL_MS,
  VM_LAUNCHER,
  VM_RUNTIME,
  vmEnv,
  vmFinish,
  vmLeftovers,
  vmQemus,
} from "./_vm.ts";
import { shimLossLines } from "./_spare.ts";

/** containerd's sandboxer of the CRI handler. */
export type Sandboxer = "podsandbox" | "shim";
/** The handler's TOML options (examples/vm/main.ts). */
export interface VmOptions {
  MemoryMiB?: number;
  Cpus?: number;
}

const dec = new TextDecoder();
const seconds = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1)} s`;

async function call<T>(what: string, f: (o: { timeoutMs: number }) => Promise<T>): Promise<T> {
  try {
    return await f({ timeoutMs: VM_CALL_MS });
  } catch (e) {
    throw new Error(`CRI ${what} failed: ${(e as Error).message}`);
  }
}

/** CRI log lines of a file as [stream, text]. */
async function criLog(path: string): Promise<[string, string][]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text.split("\n").filter(Boolean).map((line) => {
    const m = line.match(/^\S+ (stdout|stderr) [PF] (.*)$/);
    assert.ok(m, `not a CRI log line in ${path}: ${JSON.stringify(line)}`);
    return [m[1]!, m[2]!];
  });
}

function describeStatus(s: ContainerStatus | undefined): string {
  return s
    ? `state ${ContainerState[s.state]}, exit code ${s.exitCode}, reason "${s.reason}", ` +
      `message "${s.message}"`
    : "no status";
}

/** A running pod of the VM runtime and what drives it. */
class Pod {
  constructor(
    readonly c: PrivateContainerd,
    readonly rt: CriClient["runtime"],
    readonly config: PodSandboxConfig,
    readonly sandboxer: Sandboxer,
    public id: string,
  ) {}

  /** Creates and starts a busybox container running `script`; returns its id. */
  async start(name: string, script: string): Promise<string> {
    const id = (await call(`CreateContainer(${name})`, (o) =>
      this.rt.createContainer({
        podSandboxId: this.id,
        config: criContainerConfig(name, ["sh", "-c", script]),
        sandboxConfig: this.config,
      }, o))).containerId;
    await call(`StartContainer(${name})`, (o) => this.rt.startContainer({ containerId: id }, o));
    return id;
  }

  /** Polls ContainerStatus until the container has exited. */
  async exited(id: string): Promise<ContainerStatus> {
    let last: ContainerStatus | undefined;
    try {
      await until(`container ${id} to exit`, async () => {
        last = (await call("ContainerStatus", (o) =>
          this.rt.containerStatus({ containerId: id }, o))).status;
        return last?.state === ContainerState.CONTAINER_EXITED;
      }, VM_CALL_MS);
    } catch (e) {
      throw new Error(`${(e as Error).message} (last: ${describeStatus(last)})`);
    }
    return last!;
  }

  /** Stops and removes the pod as kubelet does (RemovePodSandbox removes its containers). */
  async remove(): Promise<void> {
    const t0 = performance.now();
    await call("StopPodSandbox", (o) => this.rt.stopPodSandbox({ podSandboxId: this.id }, o));
    console.log(`${this.sandboxer}: StopPodSandbox: ${seconds(t0)}`);
    await call("RemovePodSandbox", (o) => this.rt.removePodSandbox({ podSandboxId: this.id }, o));
    this.id = "";
    await until("the VM to be gone", async () => (await vmLeftovers()).length === 0);
    await until("the pod's shim to exit", () => Promise.resolve(this.c.shims().length === 0));
  }
}

/**
 * Starts a containerd of `cv` with the VM runtime as CRI's default handler, runs a pod (checking
 * which sandboxer ran it and the VM's size), hands it to `body`, and afterwards requires that
 * nothing of the VM is left, whatever happened.
 */
async function withVmPod(
  cv: ContainerdVersion,
  sandboxer: Sandboxer,
  options: VmOptions | undefined,
  body: (pod: Pod, launcher: string) => Promise<void>,
): Promise<void> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-cri-" });
  const launcherDir = await installVmShim(prefix);
  let c: PrivateContainerd | undefined;
  let pod: Pod | undefined;
  using _bound = killVmsAfter(`vm CRI test (${sandboxer})`);
  try {
    c = await startContainerd({
      binDir: cv.binDir,
      extraPath: [launcherDir],
      env: vmEnv(),
      runtimes: {
        "skiff-vm": {
          runtimeType: VM_RUNTIME,
          ...(sandboxer === "shim" ? { sandboxer } : {}),
          ...(options ? { options: { ...options } } : {}),
        },
      },
      cri: { defaultHandler: "skiff-vm" },
    });
    pod = await runPod(c, sandboxer, options);
    await body(pod, `${launcherDir}/${VM_LAUNCHER}`);
  } catch (e) {
    if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-8000)}`);
    throw e;
  } finally {
    if (pod?.id) {
      const quick = { timeoutMs: 30_000 };
      await pod.rt.stopPodSandbox({ podSandboxId: pod.id }, quick).catch(() => {});
      await pod.rt.removePodSandbox({ podSandboxId: pod.id }, quick).catch(() => {});
    }
    await c?.stop();
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
  assert.deepEqual(await vmFinish(), [], "nothing of the VM is left");
}

/** RunPodSandbox of a host-network pod, timed, and which way it went. */
async function runPod(
  c: PrivateContainerd,
  sandboxer: Sandboxer,
  options: VmOptions | undefined,
): Promise<Pod> {
  await c.importBusyboxImage(CRI_NAMESPACE);
  const cri = criClient(c.address);
  await until(
    "CRI to list the busybox image",
    async () =>
      !!(await call(
        "ImageStatus",
        (o) => cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, o),
      )).image,
  );
  const config = criPodConfig(c, `pod-vm-${sandboxer}`);
  await Deno.mkdir(config.logDirectory, { recursive: true });
  const t0 = performance.now();
  const id = (await call(
    "RunPodSandbox",
    (o) => cri.runtime.runPodSandbox({ config, runtimeHandler: "skiff-vm" }, o),
  )).podSandboxId;
  const readyMs = (await c.logs()).match(/msg="vm ready".*readyMs=(\d+)/)?.[1];
  console.log(
    `${sandboxer}: RunPodSandbox (VM boot to pod ready): ${seconds(t0)}, of which QEMU's ` +
      `start to agent-ready ${readyMs} ms (load ${Deno.loadavg()[0]})`,
  );
  const pod = new Pod(c, cri.runtime, config, sandboxer, id);
  const qemus = vmQemus();
  assert.equal(qemus.length, 1, "the pod's VM");
  await checkSandbox(pod, qemus[0]!);
  if (options?.MemoryMiB) {
    const argv = (await Deno.readTextFile(`/proc/${qemus[0]}/cmdline`)).split("\0");
    assert.equal(argv[argv.indexOf("-m") + 1], String(options.MemoryMiB), "the VM's size");
  }
  return pod;
}

/**
 * Which way the pod went: on `podsandbox`, CRI's pause container is a container of containerd;
 * on `shim`, there is none, and the Sandbox API's sandbox is the VM (its pid is QEMU's).
 */
async function checkSandbox(pod: Pod, qemu: number): Promise<void> {
  const cl = containerdClient(pod.c.address, CRI_NAMESPACE);
  const ids = (await cl.containers.list({})).containers.map((x) => x.id);
  if (pod.sandboxer === "podsandbox") {
    assert.deepEqual(ids, [pod.id], "the pause container");
    return;
  }
  assert.deepEqual(ids, [], "no pause container");
  const s = await cl.sandboxController.status({ sandboxId: pod.id, sandboxer: "shim" });
  assert.equal(s.state, "SANDBOX_READY");
  assert.equal(s.pid, qemu, "the sandbox's pid is its VM's");
}

/**
 * A pod's life through CRI: two containers and more in its one VM, ExecSync's exit code, CRI's
 * logs, exit code 7, StopContainer's SIGTERM, stop and remove; nothing of the VM left.
 * `options`' `MemoryMiB` must size the VM.
 */
export function criVmPod(
  cv: ContainerdVersion,
  sandboxer: Sandboxer,
  options?: VmOptions,
): Promise<void> {
  return withVmPod(cv, sandboxer, options, async (pod) => {
    const { rt, config } = pod;
    // Two containers in the pod, one VM: ExecSync and the CRI log of a long-running one.
    let t0 = performance.now();
    const svc = await pod.start(
      "svc",
      "echo hello-from-$(uname -n); echo warn-from-svc >&2; exec sleep 600",
    );
    console.log(`${sandboxer}: CreateContainer+StartContainer in the VM: ${seconds(t0)}`);
    t0 = performance.now();
    const ex = await call("ExecSync", (o) =>
      rt.execSync({
        containerId: svc,
        cmd: ["sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"],
        timeout: 120n,
      }, o));
    console.log(`${sandboxer}: ExecSync in the VM: ${seconds(t0)}`);
    assert.equal(ex.exitCode, 3, "ExecSync's exit code");
    assert.equal(dec.decode(ex.stdout), "exec-out\n");
    assert.equal(dec.decode(ex.stderr), "exec-err\n");
    const logPath = `${config.logDirectory}/svc/0.log`;
    await until(`both lines in ${logPath}`, async () => (await criLog(logPath)).length >= 2);
    assert.deepEqual((await criLog(logPath)).sort(), [
      ["stderr", "warn-from-svc"],
      ["stdout", "hello-from-skiff-vm"], // the guest's hostname: it ran in the VM
    ]);

    // A container that exits 7 on its own, a second VM container next to svc.
    const seven = await pod.start("seven", "echo bye; exit 7");
    assert.equal(vmQemus().length, 1, "the pod's containers share its VM");
    const s7 = await pod.exited(seven);
    assert.equal(s7.exitCode, 7, describeStatus(s7));
    assert.deepEqual(await criLog(s7.logPath), [["stdout", "bye"]]);

    // StopContainer's SIGTERM reaches the trap in the guest.
    const term = await pod.start(
      "term",
      "trap 'echo got-term; exit 43' TERM; echo ready >/ready; while :; do sleep 1 & wait $!; done",
    );
    await until(
      "the TERM trap to be set",
      async () =>
        (await call(
          "ExecSync(cat /ready)",
          (o) => rt.execSync({ containerId: term, cmd: ["cat", "/ready"], timeout: 120n }, o),
        ))
          .exitCode === 0,
      VM_CALL_MS,
    );
    await call(
      "StopContainer(term)",
      (o) => rt.stopContainer({ containerId: term, timeout: 60n }, o),
    );
    const st = await pod.exited(term);
    assert.equal(st.exitCode, 43, describeStatus(st));
    assert.deepEqual(await criLog(st.logPath), [["stdout", "got-term"]]);

    // Stop and remove the pod as kubelet does; the VM goes with it.
    await call("StopContainer(svc)", (o) => rt.stopContainer({ containerId: svc, timeout: 0n }, o));
    for (const id of [svc, seven, term]) {
      await call(`RemoveContainer(${id})`, (o) => rt.removeContainer({ containerId: id }, o));
    }
    await pod.remove();
  });
}

/**
 * Kills the pod's QEMU and waits for what follows: on the `shim` sandboxer CRI sees the pod not
 * ready (WaitSandbox), the container `svc` ends with 255, nothing of the VM is left.
 */
async function killVm(pod: Pod, qemu: number, svc: string): Promise<void> {
  Deno.kill(qemu, "SIGKILL");
  if (pod.sandboxer === "shim") {
    await until(
      "CRI to see the pod not ready",
      async () =>
        (await call(
          "PodSandboxStatus",
          (o) => pod.rt.podSandboxStatus({ podSandboxId: pod.id }, o),
        ))
          .status?.state === PodSandboxState.SANDBOX_NOTREADY,
      VM_CALL_MS,
    );
  }
  const s = await pod.exited(svc);
  assert.equal(s.exitCode, 255, describeStatus(s));
  await until("the dead VM's state to be gone", async () => (await vmLeftovers()).length === 0);
}

/**
 * A pod whose VM dies (QEMU SIGKILLed) on the `shim` sandboxer: CRI learns it from WaitSandbox
 * (the pod is NOTREADY), its container has exited (255), nothing of the VM is left even before the
 * pod is removed, and removing it ends the shim.
 */
export function criVmDies(cv: ContainerdVersion): Promise<void> {
  return withVmPod(cv, "shim", undefined, async (pod) => {
    const svc = await pod.start("svc", "exec sleep 600");
    await killVm(pod, vmQemus()[0]!, svc);
    await pod.remove();
  });
}

/**
 * A pod upgraded live through CRI (`<launcher> upgrade --all`, twice): the shim's pid, the VM
 * and the pod's containers carry on; ExecSync, the container's CRI log, a new container in the
 * pod work after; then the pod's VM dies, and the new code reports it as the old one would
 * (on `shim`, the Sandbox API's end of the sandbox: the pod is not ready), its containers exit
 * 255, nothing of the VM is left.
 */
export function criVmUpgrade(cv: ContainerdVersion, sandboxer: Sandboxer): Promise<void> {
  return withVmPod(cv, sandboxer, undefined, async (pod, launcher) => {
    const { rt, config } = pod;
    const svc = await pod.start(
      "svc",
      "i=0; while :; do echo line-$i; i=$((i+1)); usleep 50000; done",
    );
    const logPath = `${config.logDirectory}/svc/0.log`;
    await until("the counter in the CRI log", async () => (await criLog(logPath)).length > 0);
    const [qemu] = vmQemus();
    const shims = pod.c.shims().map((s) => s.pid);
    for (let i = 1; i <= 2; i++) {
      const r = await new Deno.Command(launcher, {
        args: [
          "upgrade",
          "--all",
          "--force",
          "--state-dir",
          `${pod.c.state}/io.containerd.runtime.v2.task`,
        ],
        stdin: "null",
      }).output();
      const out = dec.decode(r.stdout) + dec.decode(r.stderr);
      assert.equal(r.code, 0, `upgrade ${i}: ${out}`);
      assert.match(out, /: upgraded/, `upgrade ${i}: ${out}`);
      assert.deepEqual(pod.c.shims().map((s) => s.pid), shims, "the same shim processes");
      assert.deepEqual(vmQemus(), [qemu], "the same VM");
      const ex = await call(
        "ExecSync",
        (o) =>
          rt.execSync({
            containerId: svc,
            cmd: ["sh", "-c", `echo after-${i}; exit ${i}`],
            timeout: 120n,
          }, o),
      );
      assert.equal(ex.exitCode, i, "ExecSync's exit code after the upgrade");
      assert.equal(dec.decode(ex.stdout), `after-${i}\n`);
    }
    assert.deepEqual(await shimLossLines(pod.c), [], "containerd never lost the shim");
    // The counter's lines in CRI's log: none lost, none twice, across the upgrades.
    const count = (await criLog(logPath)).length;
    await until("the counter to go on", async () => (await criLog(logPath)).length > count + 5);
    const lines = (await criLog(logPath)).map(([stream, text]) => `${stream} ${text}`);
    lines.forEach((l, n) => assert.equal(l, `stdout line-${n}`, `line ${n} of the CRI log`));
    // A new container in the upgraded pod, in the same VM.
    const seven = await pod.start("seven", "echo bye; exit 7");
    const s7 = await pod.exited(seven);
    assert.equal(s7.exitCode, 7, describeStatus(s7));
    assert.deepEqual(vmQemus(), [qemu], "the pod's containers share its VM");
    // The VM dies: the new code sees its end as the old one did.
    await killVm(pod, qemu!, svc);
    for (const id of [svc, seven]) {
      await call(`RemoveContainer(${id})`, (o) => rt.removeContainer({ containerId: id }, o));
    }
    await pod.remove();
  });
}
