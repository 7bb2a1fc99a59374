/**
 * The VM shim (`containerd-shim-skiff-vm-v2`, examples/vm/main.ts) under a real containerd 2.4,
 * driven by its `ctr`: a container boots its own VM (QEMU, TCG) and runs in it; its exit code 7
 * comes back; `ctr run -t` gets a terminal in the guest (ctr's size, typed input, exit code); a
 * long-running one answers execs (output, exit code, stdin, a terminal exec), ps and metrics
 * from the guest, and ends on SIGTERM;
 * after the deletes no QEMU, socket, share, mount or shim is left.
 *
 * Then, on containerd 1.6, 1.7 and 2.4, the Kubernetes path Kata takes on containerd's default
 * `podsandbox` sandboxer: CRI's pause container boots the pod's VM, the pod's containers reach the
 * same shim through the sandbox-id grouping and run in the same VM (one QEMU); ExecSync's exit
 * code, CRI's container logs, exit code 7, StopContainer's SIGTERM, stop and remove the pod,
 * nothing left.
 *
 * TCG on a busy 2-core machine is slow (a boot takes tens of seconds): every wait is bounded
 * generously so that a hang fails the test instead of wedging it, and nothing is timed.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { ctrRun, ctrRunArgs, shellQuote } from "../../sdk/testing/ctr.ts";
import { vmUnavailable } from "../../examples/vm/image.ts";
import {
  installVmShim,
  killVmsAfter,
  until,
  VM_CALL_MS as CALL_MS,
  VM_RUNTIME as RUNTIME,
  vmEnv,
  vmFinish,
  vmLeftovers,
  vmQemus,
} from "../_vm.ts";
import { criVmPod } from "../_vm_cri.ts";

const NS = "skiff-vm";

function describe(r: CtrResult): string {
  return `code ${r.code}${
    r.timedOut ? " (timed out)" : ""
  }\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

/**
 * Runs a command with stdin on a pipe and writes `input` once its output shows `marker`. With
 * `keepStdin`, stdin stays open until the command is done (under `script`, its end would hang
 * the terminal up early); else it is closed after the input (the container reads its end).
 */
async function interact(
  command: string,
  args: string[],
  env: Record<string, string>,
  marker: string,
  input: string,
  keepStdin: boolean,
): Promise<CtrResult> {
  const child = new Deno.Command(command, {
    args,
    env,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), CALL_MS);
  const stderr = new Response(child.stderr).text();
  const writer = child.stdin.getWriter();
  let stdout = "";
  const dec = new TextDecoder();
  try {
    let sent = false;
    for await (const chunk of child.stdout) {
      stdout += dec.decode(chunk, { stream: true });
      if (!sent && stdout.includes(marker)) {
        sent = true;
        await writer.write(new TextEncoder().encode(input));
        if (!keepStdin) await writer.close();
      }
    }
    const status = await child.status;
    return {
      code: status.code,
      stdout,
      stderr: await stderr,
      timedOut: status.signal === "SIGKILL",
    };
  } finally {
    clearTimeout(timer);
    await writer.close().catch(() => {});
  }
}

/** Runs ctr with stdin on a pipe: `input` is written once the process printed "ready". */
function ctrWithStdin(c: PrivateContainerd, args: string[], input: string): Promise<CtrResult> {
  const ctrArgs = ["-a", c.address, "-n", NS, ...args];
  return interact(`${c.binDir}/ctr`, ctrArgs, c.ctrEnv, "ready\n", input, false);
}

/** The terminal ctr runs on (`script`'s pty): its size reaches the guest through ResizePty. */
const TTY_SIZE = "31 101";
/** A guest command that waits until its terminal has TTY_SIZE (ctr resizes after the start). */
const UNTIL_SIZED = `until [ "$(stty size)" = "${TTY_SIZE}" ]; do usleep 200000; done; echo sized`;

/**
 * Runs ctr with `-t` under `script`, on a terminal of TTY_SIZE rows and columns: `input` is
 * typed once the output shows "sized" (the guest saw the size), so nothing races the resize.
 */
function ctrOnTerminal(c: PrivateContainerd, args: string[], input: string): Promise<CtrResult> {
  const [rows, cols] = TTY_SIZE.split(" ");
  const ctr = [`${c.binDir}/ctr`, "-a", c.address, "-n", NS, ...args].map(shellQuote).join(" ");
  const script = ["-q", "-e", "-c", `stty rows ${rows} cols ${cols} && ${ctr}`, "/dev/null"];
  return interact("script", script, c.ctrEnv, "sized", input, true);
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
    const launcherDir = await installVmShim(prefix);
    let c: PrivateContainerd | undefined;
    // Longer than the other VM tests' bound: this one also runs two terminal sessions.
    using _bound = killVmsAfter("vm shim test", 12 * 60_000);
    try {
      c = await startContainerd({
        binDir: v!.binDir,
        extraPath: [launcherDir],
        env: vmEnv(),
      });
      const image = await c.importBusyboxImage(NS);
      const ctr = (args: string[]) => c!.ctr(args, { namespace: NS, timeoutMs: CALL_MS });
      /** `ctr run` of one container of the VM runtime (its own VM: no pod groups them). */
      const run = (id: string, args: string[], detach = false) =>
        ctrRun(c!, {
          image,
          id,
          namespace: NS,
          runtime: RUNTIME,
          cgroup: "",
          ...(detach ? { detach } : {}),
          args,
          timeoutMs: CALL_MS,
        });

      // One container, one VM: its output and exit code 7 come back from the guest.
      let t0 = performance.now();
      const once = await run("once", ["sh", "-c", "echo hello from $(uname -n); exit 7"]);
      const onceMs = performance.now() - t0;
      assert.equal(once.code, 7, describe(once));
      assert.equal(once.stdout, "hello from skiff-vm\n", describe(once));
      console.log(
        `ctr run (VM boot, container, exit, delete, VM stop): ${(onceMs / 1000).toFixed(1)} s`,
      );
      await until("the first VM to be gone", async () => (await vmLeftovers()).length === 0);

      // `ctr run -t`: a terminal in the guest, sized by ctr's ResizePty, typed into, exit 5.
      const tty = await ctrOnTerminal(
        c,
        ctrRunArgs(c, {
          image,
          id: "tty",
          runtime: RUNTIME,
          cgroup: "",
          tty: true,
          args: ["sh", "-c", `${UNTIL_SIZED}; read x; echo got:$x; exit 5`],
        }),
        "typed\r",
      );
      assert.equal(tty.code, 5, describe(tty));
      assert.match(tty.stdout, /^sized\r*$/m, describe(tty));
      assert.match(tty.stdout, /^got:typed\r*$/m, describe(tty));
      await until("the terminal's VM to be gone", async () => (await vmLeftovers()).length === 0);

      // A long-running container: an exec's output and exit code, then SIGTERM.
      t0 = performance.now();
      const long = await run("long", [
        "sh",
        "-c",
        "trap 'exit 42' TERM; while true; do sleep 1; done",
      ], true);
      assert.equal(long.code, 0, describe(long));
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
      // Stdin through the agent: written once the exec runs (ctr loses an earlier EOF), then
      // closed (CloseIO), so `cat` ends after every byte.
      const echoed = await ctrWithStdin(c, [
        "task",
        "exec",
        "--exec-id",
        "e2",
        "long",
        "sh",
        "-c",
        "echo ready; cat; echo done",
      ], "typed-into-the-vm\n");
      assert.equal(echoed.code, 0, describe(echoed));
      assert.equal(echoed.stdout, "ready\ntyped-into-the-vm\ndone\n", describe(echoed));
      // `ctr task exec -t`: a terminal exec, sized, typed into, exit 6.
      const ttyExec = await ctrOnTerminal(c, [
        "task",
        "exec",
        "-t",
        "--exec-id",
        "t1",
        "long",
        "sh",
        "-c",
        `${UNTIL_SIZED}; read x; echo got:$x; exit 6`,
      ], "into-the-pty\r");
      assert.equal(ttyExec.code, 6, describe(ttyExec));
      assert.match(ttyExec.stdout, /^got:into-the-pty\r*$/m, describe(ttyExec));
      const ps = await ctr(["task", "ps", "long"]);
      assert.equal(ps.code, 0, describe(ps));
      assert.match(ps.stdout, /^\d+\s/m, `guest pids: ${describe(ps)}`);
      // Metrics come from the container's cgroup v2 in the guest, through the agent.
      const metrics = await ctr(["task", "metrics", "--format", "json", "long"]);
      assert.equal(metrics.code, 0, describe(metrics));
      const m = JSON.parse(metrics.stdout) as { memory?: { usage?: number } };
      assert.ok((m.memory?.usage ?? 0) > 0, `memory usage in the guest: ${metrics.stdout}`);
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

      // A VM that dies ends its containers (status 255: the guest's exit is lost with it), and
      // deleting them leaves nothing.
      const doomed = await run("doomed", ["sleep", "600"], true);
      assert.equal(doomed.code, 0, describe(doomed));
      const [qemu] = vmQemus();
      assert.ok(qemu, "the container's VM");
      Deno.kill(qemu, "SIGKILL");
      await until("the task to stop with its VM", async () => {
        const ls = await ctr(["task", "ls"]);
        return /doomed\s+\d+\s+STOPPED/.test(ls.stdout);
      }, CALL_MS);
      const delDoomed = await ctr(["task", "delete", "doomed"]);
      assert.equal(delDoomed.code, 0, describe(delDoomed));
      assert.match(delDoomed.stderr, /exit code 255/, describe(delDoomed));
      assert.equal((await ctr(["container", "delete", "doomed"])).code, 0);
      await until("the dead VM's state to be gone", async () => (await vmLeftovers()).length === 0);

      // A shim that dies (SIGKILL) takes its VM with it: QEMU, share and mounts go.
      const orphan = await run("orphan", ["sleep", "600"], true);
      assert.equal(orphan.code, 0, describe(orphan));
      assert.equal(vmQemus().length, 1, "the orphan's VM");
      for (const s of c.shims()) Deno.kill(s.pid, "SIGKILL");
      await until("the orphaned VM to be gone", async () => (await vmLeftovers()).length === 0);
      await until("the orphan's task to stop", async () => {
        const ls = await ctr(["task", "ls"]);
        return !/orphan\s+\d+\s+RUNNING/.test(ls.stdout);
      }, CALL_MS);
      await ctr(["task", "delete", "orphan"]);
      assert.equal((await ctr(["container", "delete", "orphan"])).code, 0);
      await until("the shims to exit", () => Promise.resolve(c!.shims().length === 0));
    } catch (e) {
      if (c) console.error(`containerd log tail:\n${(await c.logs()).slice(-6000)}`);
      throw e;
    } finally {
      await c?.stop();
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
    assert.deepEqual(await vmFinish(), [], "nothing of the VMs is left");
  },
);

// Kata's path on containerd 1.6-2.x: the podsandbox sandboxer (1.x has no other). The `shim`
// sandboxer: tests/external/vm_sandbox_containerd_test.ts.
const criVersions = containerdVersions().filter((x) => /^(1\.6|1\.7|2\.4)\./.test(x.version));
for (const cv of criVersions.length > 0 ? criVersions : [undefined]) {
  integrationTest(
    `CRI on containerd ${cv?.version ?? "1.6, 1.7, 2.4"}: a pod is one VM on the podsandbox path`,
    {
      root: true,
      binaries: ["qemu-system-x86_64", "runc", "mount"],
      check: () =>
        cv ? vmUnavailable() : "containerd 1.6/1.7/2.4 in the skiff cache (tests/setup/prepare.sh)",
    },
    () => criVmPod(cv!, "podsandbox"),
  );
}
