/**
 * Test-side helpers for the VM example (`containerd-shim-skiff-vm-v2`) under a real containerd:
 * what is left of its VMs (QEMUs, state dirs, mounts), bounded polling, and one CRI pod's life
 * (a pod is one VM, two containers and more in it, ExecSync, CRI's logs, exit codes,
 * StopContainer's SIGTERM, stop and remove, nothing left) on either of containerd's sandboxers.
 *
 * TCG on a busy 2-core machine is slow (a boot takes tens of seconds): every wait is bounded
 * generously so that a hang fails the test instead of wedging it, and nothing is timed.
 *
 * @module
 */

import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import type { ContainerdVersion, PrivateContainerd } from "../sdk/testing/containerd.ts";
import { startContainerd } from "../sdk/testing/containerd.ts";
import { containerdClient } from "../sdk/testing/containerd_client.ts";
import { installShims } from "../sdk/install/install.ts";
import { buildVmImage, skiffCache } from "../examples/vm/image.ts";
import { CRI_NAMESPACE, type CriClient, criClient } from "../sdk/testing/cri_client.ts";
import { BUSYBOX_IMAGE_REF } from "../sdk/testing/image.ts";
import {
  ContainerConfigSchema,
  ContainerState,
  type ContainerStatus,
  NamespaceMode,
  PodSandboxConfigSchema,
} from "../proto/gen/runtime/v1/api_pb.ts";

/** The VM example's runtime type and launcher. */
export const VM_RUNTIME = "io.containerd.skiff-vm.v2";
export const VM_LAUNCHER = "containerd-shim-skiff-vm-v2";
/** Bound on one call that may boot a VM: generous, only there so that a hang fails. */
export const VM_CALL_MS = 240_000;
/** Bound on one test. */
export const VM_TEST_MS = 9 * 60_000;

/**
 * This test process's own parent of VM state dirs (`SKIFF_VM_STATE_DIR` in containerd's
 * environment, {@linkcode vmEnv}), so that the VMs of tests running beside it are neither
 * counted nor killed. Not under the shim's default `/run/skiff-vm`: nothing of it even contains
 * that path.
 */
export const VM_TEST_STATE = `/run/skiff-test-vm-${crypto.randomUUID().slice(0, 8)}`;

/** containerd's environment for the VM shim: the image cache and {@linkcode VM_TEST_STATE}. */
export function vmEnv(): Record<string, string> {
  return { SKIFF_CACHE: skiffCache(), SKIFF_VM_STATE_DIR: VM_TEST_STATE };
}

/**
 * After a test: kills its QEMUs still running, and returns what was left of its VMs (the
 * parent dir goes when empty; a leftover stays to be seen).
 */
export async function vmFinish(): Promise<string[]> {
  for (const p of vmQemus()) Deno.kill(p, "SIGKILL");
  const left = await vmLeftovers();
  await Deno.remove(VM_TEST_STATE).catch(() => {});
  return left;
}

/** QEMU processes of the VM shim whose state is under `parent` (default: this test's). */
export function vmQemus(parent = VM_TEST_STATE): number[] {
  const out: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
      if (argv[0]?.endsWith("qemu-system-x86_64") && argv.some((a) => a.includes(`${parent}/`))) {
        out.push(Number(e.name));
      }
    } catch { /* exited */ }
  }
  return out;
}

/** What is left of the VMs under `parent` (default: this test's): QEMUs, state dirs, mounts. */
export async function vmLeftovers(parent = VM_TEST_STATE): Promise<string[]> {
  const left: string[] = vmQemus(parent).map((p) => `qemu pid ${p}`);
  try {
    for (const e of Deno.readDirSync(parent)) left.push(`${parent}/${e.name}`);
  } catch { /* no state dir */ }
  const mounts = await Deno.readTextFile("/proc/self/mountinfo");
  for (const line of mounts.split("\n")) {
    if (line.includes(`${parent}/`)) left.push(`mount ${line.split(" ")[4]}`);
  }
  return left;
}

/** Polls until `probe` is true; fails after `ms`, naming what is left of the VMs. */
export async function until(
  what: string,
  probe: () => Promise<boolean>,
  ms = 60_000,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > end) {
      throw new Error(`gave up waiting for ${what} (VM leftovers: ${await vmLeftovers()})`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Builds the boot image and installs the VM shim's launcher under `prefix` (the installed
 * launcher runs a bundle, which boots the image the last build recorded).
 *
 * @returns the directory holding the launcher
 */
export async function installVmShim(prefix: string): Promise<string> {
  await buildVmImage();
  const [launcher] = await installShims({
    prefix,
    shims: { [VM_LAUNCHER]: "examples/vm/main.ts" },
  });
  return launcher!.slice(0, launcher!.lastIndexOf("/"));
}

/** Kills the test's QEMUs once `ms` have passed (a wedged test then fails, not hangs). */
export function killVmsAfter(what: string, ms = VM_TEST_MS): { [Symbol.dispose](): void } {
  const timer = setTimeout(() => {
    console.error(`${what}: over ${ms} ms, killing its VMs`);
    for (const p of vmQemus()) Deno.kill(p, "SIGKILL");
  }, ms);
  return { [Symbol.dispose]: () => clearTimeout(timer) };
}

const dec = new TextDecoder();

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

async function exitedStatus(rt: CriClient["runtime"], id: string): Promise<ContainerStatus> {
  let last: ContainerStatus | undefined;
  try {
    await until(`container ${id} to exit`, async () => {
      last = (await call("ContainerStatus", (o) =>
        rt.containerStatus({ containerId: id }, o))).status;
      return last?.state === ContainerState.CONTAINER_EXITED;
    }, VM_CALL_MS);
  } catch (e) {
    throw new Error(`${(e as Error).message} (last: ${describeStatus(last)})`);
  }
  return last!;
}

const seconds = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1)} s`;

/**
 * One pod of the VM runtime through CRI, from RunPodSandbox to RemovePodSandbox, and nothing of
 * it left. `sandboxer` is the CRI handler's: `podsandbox` (CRI's pause container boots the VM)
 * or `shim` (the Sandbox API: the sandbox is the VM, no pause container). `options` is the
 * handler's TOML options table; its `MemoryMiB` must size the VM.
 */
export async function criVmPod(
  cv: ContainerdVersion,
  sandboxer: "podsandbox" | "shim",
  options?: { MemoryMiB?: number; Cpus?: number },
): Promise<void> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-cri-" });
  const launcherDir = await installVmShim(prefix);
  let c: PrivateContainerd | undefined;
  let podId = "";
  let cri: CriClient | undefined;
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
          ...(options ? { options } : {}),
        },
      },
      cri: { defaultHandler: "skiff-vm" },
    });
    await c.importBusyboxImage(CRI_NAMESPACE);
    cri = criClient(c.address);
    const rt = cri.runtime;
    await until(
      "CRI to list the busybox image",
      async () =>
        !!(await call(
          "ImageStatus",
          (o) => cri!.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, o),
        )).image,
    );
    const uid = crypto.randomUUID();
    const config = create(PodSandboxConfigSchema, {
      metadata: { name: `pod-vm-${sandboxer}`, uid, namespace: "skiff-test", attempt: 0 },
      hostname: "",
      logDirectory: `${c.dir}/pods/${uid}`,
      linux: {
        cgroupParent: `/${c.cgroupParent}/pod-${uid}`,
        securityContext: {
          namespaceOptions: {
            network: NamespaceMode.NODE,
            pid: NamespaceMode.POD,
            ipc: NamespaceMode.POD,
          },
        },
      },
    });
    await Deno.mkdir(config.logDirectory, { recursive: true });
    let t0 = performance.now();
    podId = (await call("RunPodSandbox", (o) =>
      rt.runPodSandbox({ config, runtimeHandler: "skiff-vm" }, o))).podSandboxId;
    const readyMs = (await c.logs()).match(/msg="vm ready".*readyMs=(\d+)/)?.[1];
    console.log(
      `${sandboxer}: RunPodSandbox (VM boot to pod ready): ${seconds(t0)}, of which QEMU's ` +
        `start to agent-ready ${readyMs} ms (load ${Deno.loadavg()[0]})`,
    );
    const qemus = vmQemus();
    assert.equal(qemus.length, 1, "the pod's VM");
    await checkSandbox(c, podId, sandboxer, qemus[0]!);
    if (options?.MemoryMiB) {
      const argv = (await Deno.readTextFile(`/proc/${qemus[0]}/cmdline`)).split("\0");
      assert.equal(argv[argv.indexOf("-m") + 1], String(options.MemoryMiB), "the VM's size");
    }

    const start = async (name: string, script: string): Promise<string> => {
      const id = (await call(`CreateContainer(${name})`, (o) =>
        rt.createContainer({
          podSandboxId: podId,
          config: create(ContainerConfigSchema, {
            metadata: { name, attempt: 0 },
            image: { image: BUSYBOX_IMAGE_REF },
            command: ["sh", "-c", script],
            logPath: `${name}/0.log`,
            linux: {
              securityContext: {
                namespaceOptions: {
                  network: NamespaceMode.NODE,
                  pid: NamespaceMode.CONTAINER,
                  ipc: NamespaceMode.POD,
                },
              },
            },
          }),
          sandboxConfig: config,
        }, o))).containerId;
      await call(`StartContainer(${name})`, (o) =>
        rt.startContainer({ containerId: id }, o));
      return id;
    };

    // Two containers in the pod, one VM: ExecSync and the CRI log of a long-running one.
    t0 = performance.now();
    const svc = await start(
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
    await until(`both lines in ${logPath}`, async () =>
      (await criLog(logPath)).length >= 2);
    assert.deepEqual((await criLog(logPath)).sort(), [
      ["stderr", "warn-from-svc"],
      ["stdout", "hello-from-skiff-vm"], // the guest's hostname: it ran in the VM
    ]);

    // A container that exits 7 on its own, a second VM container next to svc.
    const seven = await start("seven", "echo bye; exit 7");
    assert.equal(vmQemus().length, 1, "the pod's containers share its VM");
    const s7 = await exitedStatus(rt, seven);
    assert.equal(s7.exitCode, 7, describeStatus(s7));
    assert.deepEqual(await criLog(s7.logPath), [["stdout", "bye"]]);

    // StopContainer's SIGTERM reaches the trap in the guest.
    const term = await start(
      "term",
      "trap 'echo got-term; exit 43' TERM; echo ready >/ready; while :; do sleep 1 & wait $!; done",
    );
    await until("the TERM trap to be set", async () =>
      (await call("ExecSync(cat /ready)", (o) =>
        rt.execSync({ containerId: term, cmd: ["cat", "/ready"], timeout: 120n }, o)))
        .exitCode === 0, VM_CALL_MS);
    await call("StopContainer(term)", (o) =>
      rt.stopContainer({ containerId: term, timeout: 60n }, o));
    const st = await exitedStatus(rt, term);
    assert.equal(st.exitCode, 43, describeStatus(st));
    assert.deepEqual(await criLog(st.logPath), [["stdout", "got-term"]]);

    // Stop and remove the pod as kubelet does; the VM goes with it.
    await call("StopContainer(svc)", (o) =>
      rt.stopContainer({ containerId: svc, timeout: 0n }, o));
    for (const id of [svc, seven, term]) {
      await call(`RemoveContainer(${id})`, (o) =>
        rt.removeContainer({ containerId: id }, o));
    }
    t0 = performance.now();
    await call("StopPodSandbox", (o) =>
      rt.stopPodSandbox({ podSandboxId: podId }, o));
    console.log(`${sandboxer}: StopPodSandbox (VM stop): ${seconds(t0)}`);
    await call("RemovePodSandbox", (o) =>
      rt.removePodSandbox({ podSandboxId: podId }, o));
    podId = "";
    await until("the VM to be gone", async () =>
      (await vmLeftovers()).length === 0);
    await until("the pod's shim to exit", () =>
      Promise.resolve(c!.shims().length === 0));
  } catch (e) {
    if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-8000)}`);
    throw e;
  } finally {
    if (podId) {
      const quick = { timeoutMs: 30_000 };
      await cri?.runtime.stopPodSandbox({ podSandboxId: podId }, quick).catch(() => {});
      await cri?.runtime.removePodSandbox({ podSandboxId: podId }, quick).catch(() => {});
    }
    await c?.stop();
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
  assert.deepEqual(await vmFinish(), [], "nothing of the VM is left");
}

/**
 * Which way the pod went: on `podsandbox`, CRI's pause container is a container of containerd;
 * on `shim`, there is none, and the Sandbox API's sandbox is the VM (its pid is QEMU's).
 */
async function checkSandbox(
  c: PrivateContainerd,
  podId: string,
  sandboxer: "podsandbox" | "shim",
  qemu: number,
): Promise<void> {
  const cl = containerdClient(c.address, CRI_NAMESPACE);
  const ids = (await cl.containers.list({})).containers.map((x) => x.id);
  if (sandboxer === "podsandbox") {
    assert.deepEqual(ids, [podId], "the pause container");
    return;
  }
  assert.deepEqual(ids, [], "no pause container");
  const s = await cl.sandboxController.status({ sandboxId: podId, sandboxer: "shim" });
  assert.equal(s.state, "SANDBOX_READY");
  assert.equal(s.pid, qemu, "the sandbox's pid is its VM's");
}
