/**
 * Test-side helpers for the VM example (`containerd-shim-skiff-vm-v2`) under a real containerd:
 * its installation, a state directory per test process, what is left of its VMs (QEMUs, state
 * dirs, mounts) and bounded polling. A CRI pod of it: `_vm_cri.ts`.
 *
 * TCG on a busy 2-core machine is slow (a boot takes tens of seconds): every wait is bounded
 * generously so that a hang fails the test instead of wedging it, and nothing is timed.
 *
 * @module
 */

import { installExampleShims } from "../sdk/install/examples.ts";
import { buildVmImage, skiffCache } from "../examples/vm/image.ts";

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
  const [launcher] = await installExampleShims({
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
