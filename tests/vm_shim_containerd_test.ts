/**
 * The VM shim (`containerd-shim-skiff-vm-v2`, examples/vm/main.ts) under a real containerd 2.4,
 * driven by its `ctr`: a container boots its own VM (QEMU, TCG) and runs in it; its exit code 7
 * comes back; a long-running one answers an exec (output and exit code) and ends on SIGTERM;
 * after the deletes no QEMU, socket, share, mount or shim is left.
 *
 * TCG on a busy 2-core machine is slow (a boot takes tens of seconds): every wait is bounded
 * generously so that a hang fails the test instead of wedging it, and nothing is timed.
 */
import assert from "node:assert/strict";
import { integrationTest } from "./_integration.ts";
import {
  containerdVersions,
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
} from "../sdk/testing/containerd.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";
import { installShims } from "../sdk/install/install.ts";
import { buildVmImage, skiffCache, vmUnavailable } from "../examples/vm/image.ts";

const RUNTIME = "io.containerd.skiff-vm.v2";
const LAUNCHER = "containerd-shim-skiff-vm-v2";
const NS = "skiff-vm";
/** Where the shim keeps its VMs' state (examples/vm/main.ts). */
const VM_STATE = "/run/skiff-vm";
/** Bound on one ctr call that may boot a VM. */
const CALL_MS = 240_000;
/** Bound on the whole test. */
const TEST_MS = 9 * 60_000;

function describe(r: CtrResult): string {
  return `code ${r.code}${
    r.timedOut ? " (timed out)" : ""
  }\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

/** QEMU processes of this shim's VMs (their state is under VM_STATE). */
export function vmQemus(): number[] {
  const out: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
      if (argv[0]?.endsWith("qemu-system-x86_64") && argv.some((a) => a.includes(VM_STATE))) {
        out.push(Number(e.name));
      }
    } catch { /* exited */ }
  }
  return out;
}

/** What is left of the shim's VMs: QEMUs, state dirs, mounts. */
export async function vmLeftovers(): Promise<string[]> {
  const left: string[] = vmQemus().map((p) => `qemu pid ${p}`);
  try {
    for (const e of Deno.readDirSync(VM_STATE)) left.push(`${VM_STATE}/${e.name}`);
  } catch { /* no state dir */ }
  const mounts = await Deno.readTextFile("/proc/self/mountinfo");
  for (const line of mounts.split("\n")) {
    if (line.includes(`${VM_STATE}/`)) left.push(`mount ${line.split(" ")[4]}`);
  }
  return left;
}

/** Polls until `probe` is true; fails after `ms`. */
async function until(what: string, probe: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const v = containerdVersions().find((v) => v.version.startsWith("2.4."));

integrationTest(
  `containerd ${v?.version ?? "2.4"}: the VM shim runs containers in a QEMU guest through ctr`,
  {
    root: true,
    binaries: ["qemu-system-x86_64", "runc", "mount"],
    check: () => v ? vmUnavailable() : "containerd 2.4 in the skiff cache (tests/setup/prepare.sh)",
  },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-vm-shim-" });
    // The installed launcher runs a bundle, which boots the image the last build recorded.
    await buildVmImage();
    const [launcher] = await installShims({ prefix, shims: { [LAUNCHER]: "examples/vm/main.ts" } });
    let c: PrivateContainerd | undefined;
    const bound = setTimeout(() => {
      console.error(`vm shim test: over ${TEST_MS} ms, killing its VMs`);
      for (const p of vmQemus()) Deno.kill(p, "SIGKILL");
    }, TEST_MS);
    try {
      c = await startContainerd({
        binDir: v!.binDir,
        extraPath: [launcher.slice(0, launcher.lastIndexOf("/"))],
        env: { SKIFF_CACHE: skiffCache() },
      });
      const image = await c.importBusyboxImage(NS);
      const ctr = (args: string[]) => c!.ctr(args, { namespace: NS, timeoutMs: CALL_MS });

      // One container, one VM: its output and exit code 7 come back from the guest.
      let t0 = performance.now();
      const once = await ctrRun(c, {
        image,
        id: "once",
        namespace: NS,
        runtime: RUNTIME,
        cgroup: "",
        args: ["sh", "-c", "echo hello from $(uname -n); exit 7"],
        timeoutMs: CALL_MS,
      });
      const onceMs = performance.now() - t0;
      assert.equal(once.code, 7, describe(once));
      assert.equal(once.stdout, "hello from skiff-vm\n", describe(once));
      console.log(
        `ctr run (VM boot, container, exit, delete, VM stop): ${(onceMs / 1000).toFixed(1)} s`,
      );
      await until("the first VM to be gone", async () => (await vmLeftovers()).length === 0);

      // A long-running container: an exec's output and exit code, then SIGTERM.
      t0 = performance.now();
      const run = await ctrRun(c, {
        image,
        id: "long",
        namespace: NS,
        runtime: RUNTIME,
        cgroup: "",
        detach: true,
        args: ["sh", "-c", "trap 'exit 42' TERM; while true; do sleep 1; done"],
        timeoutMs: CALL_MS,
      });
      assert.equal(run.code, 0, describe(run));
      console.log(
        `ctr run -d (VM boot to running): ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
      assert.equal(vmQemus().length, 1, "one VM for the container");
      t0 = performance.now();
      const exec = await ctr([
        "task",
        "exec",
        "--exec-id",
        "e1",
        "long",
        "sh",
        "-c",
        "echo out; exit 3",
      ]);
      console.log(`ctr task exec in the VM: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      assert.equal(exec.code, 3, describe(exec));
      assert.equal(exec.stdout, "out\n", describe(exec));
      const ps = await ctr(["task", "ps", "long"]);
      assert.equal(ps.code, 0, describe(ps));
      const kill = await ctr(["task", "kill", "-s", "SIGTERM", "long"]);
      assert.equal(kill.code, 0, describe(kill));
      await until("the task to stop after SIGTERM", async () => {
        const ls = await ctr(["task", "ls"]);
        return /long\s+\d+\s+STOPPED/.test(ls.stdout);
      }, CALL_MS);
      // `ctr task delete` warns with the task's exit status: the trap's 42.
      const del = await ctr(["task", "delete", "long"]);
      assert.equal(del.code, 0, describe(del));
      assert.match(del.stderr, /task long exit with non-zero exit code 42/, describe(del));
      const rm = await ctr(["container", "delete", "long"]);
      assert.equal(rm.code, 0, describe(rm));
      await until("the VM to be gone", async () => (await vmLeftovers()).length === 0);
      await until("the shims to exit", () => Promise.resolve(c!.shims().length === 0));
    } catch (e) {
      if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-6000)}`);
      throw e;
    } finally {
      clearTimeout(bound);
      await c?.stop();
      for (const p of vmQemus()) Deno.kill(p, "SIGKILL");
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
    assert.deepEqual(await vmLeftovers(), [], "nothing of the VMs is left");
  },
);
