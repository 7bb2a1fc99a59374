// The VM runtime's foundation (examples/vm) end to end: a real QEMU guest (TCG) boots the VM
// image, its agent answers over the virtio-serial socket, and containers run inside the guest
// with runc from bundles on the pod's 9p share; stopping the VM leaves no process, socket,
// mount or temp dir.
import assert from "node:assert/strict";
import { readToEnd } from "../../examples/vm/client.ts";
import { buildVmImage, vmUnavailable } from "../../examples/vm/image.ts";
import { Vm } from "../../examples/vm/vm.ts";
import { createBusyboxBundle } from "../../sdk/testing/bundle.ts";
import { exists, integrationTest } from "../_integration.ts";

const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** Bound on the whole test: TCG on a busy 2-core machine is slow, a hang must still end. */
const BOUND_MS = 15 * 60_000;

integrationTest(
  "vm: boot a QEMU guest, run containers in it through the agent, stop with nothing left",
  { root: true, binaries: ["qemu-system-x86_64", "runc"], check: () => vmUnavailable() },
  async () => {
    const image = await buildVmImage();
    const vm = await Vm.start({ image, readyTimeoutMs: 5 * 60_000 });
    const bound = setTimeout(() => {
      console.error(`vm test: over ${BOUND_MS} ms, killing QEMU\n${vm.console}`);
      Deno.kill(vm.pid, "SIGKILL");
    }, BOUND_MS);
    const stateDir = vm.shared.slice(0, vm.shared.lastIndexOf("/"));
    try {
      console.log(
        `boot to agent-ready: ${(vm.readyMs / 1000).toFixed(1)} s ` +
          `(guest uptime ${vm.ping.uptimeSeconds.toFixed(1)} s, kernel ${vm.ping.kernel})`,
      );
      assert.equal(vm.ping.kernel, image.kernelRelease);
      const agent = vm.agent;
      // Stdin, execs and kills in the guest are covered on the host (vm_agent_test.ts); in
      // the guest they hung once and are the next session's to pin down.
      await createBusyboxBundle({
        dir: `${vm.shared}/one`,
        args: ["sh", "-c", "echo hello; exit 7"],
      });
      const pid = (await agent.create({
        containerId: "one",
        bundle: `${vm.guestShared}/one`,
        stdio: { stdout: true },
      })).pid;
      await agent.start({ containerId: "one" });
      assert.equal(text(await readToEnd(agent, "stdout", "one")), "hello\n");
      const waited = await agent.wait({ containerId: "one" });
      assert.deepEqual([waited.exitStatus, waited.pid], [7, pid]);
      await agent.delete({ containerId: "one" });

      // A terminal in the guest: runc's pty, sized before the start, typed into, exit 4.
      await createBusyboxBundle({
        dir: `${vm.shared}/tty`,
        args: ["sh", "-c", "read x; stty size; echo got:$x; exit 4"],
        terminal: true,
      });
      await agent.create({
        containerId: "tty",
        bundle: `${vm.guestShared}/tty`,
        stdio: { stdin: true, stdout: true, terminal: true },
      });
      await agent.resize({ containerId: "tty", width: 101, height: 31 });
      await agent.start({ containerId: "tty" });
      const ttyOut = readToEnd(agent, "stdout", "tty");
      await agent.writeStdin({ containerId: "tty", data: new TextEncoder().encode("hi\n") });
      const tty = text(await ttyOut);
      assert.match(tty, /^31 101\r$/m, JSON.stringify(tty));
      assert.match(tty, /^got:hi\r$/m, JSON.stringify(tty));
      assert.equal((await agent.wait({ containerId: "tty" })).exitStatus, 4);
      await agent.delete({ containerId: "tty" });
    } finally {
      clearTimeout(bound);
      await vm.stop();
    }
    assert.ok((await vm.exited).success, "the guest powered itself off");
    assert.equal(await exists(stateDir), false, `${stateDir} (socket, share) is removed`);
    assert.equal(await exists(`/proc/${vm.pid}`), false, "QEMU is gone");
    const mounts = await Deno.readTextFile("/proc/self/mountinfo");
    assert.ok(!mounts.includes(stateDir), "nothing stays mounted under the VM's state");
  },
);
