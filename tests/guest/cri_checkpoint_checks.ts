// Kubernetes' forensic container checkpointing, run INSIDE the cgroup v2 test guest by
// tests/external/cgroup2_guest_test.ts (criu refuses the host's kernel; it works in the guest). Not a
// *_test.ts file: the host's `deno test tests/` does not pick it up, and outside the guest every
// test here fails at once.
//
// What kubelet's checkpoint API does, through CRI on containerd 2.1: a host-network pod with one
// container running a counter; `CheckpointContainer` to a tar location while it keeps running;
// the archive holds CRI's metadata (config.dump, spec.dump, status.dump) and criu's images under
// checkpoint/. Then the restore kubelet does not do itself but containerd offers: CreateContainer
// in the same pod with the archive's path as the image, and StartContainer, which restores the
// process from the archive; its counter goes on from the checkpointed value. containerd 2.2 puts
// that restore behind `enable_experimental_restore_via_create` and 2.3 deprecates it (removed in
// 2.4); 2.1 has it on, so 2.1 is what runs here. For containerd's Go runc shim and skiff's runc
// example side by side.
import assert from "node:assert/strict";
import { type ContainerConfig, ContainerState } from "../../proto/gen/runtime/v1/api_pb.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { criClient } from "../../sdk/testing/cri_client.ts";
import { criContainerConfig, criPodConfig } from "../../sdk/testing/cri_container.ts";
import { buildBusyboxImage } from "../../sdk/testing/image.ts";
import { startRegistry } from "../../sdk/testing/registry.ts";
import { RUNC_RUNTIME } from "../../sdk/testing/ctr.ts";

const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));
const HANDLER = "ckpt";
/** Each CRI call; the guest is slow, a checkpoint of a small container takes tens of seconds. */
const CALL = { timeoutMs: 300_000 };

function guard(): void {
  assert.equal(Deno.env.get("SKIFF_GUEST"), "1", "runs inside the test guest only");
  assert.ok(v21, "containerd 2.1 (tests/setup/prepare.sh)");
}

/** The tar's member names, via the host's tar (the guest runs the host's root). */
async function tarList(path: string): Promise<string[]> {
  const out = await new Deno.Command("tar", {
    args: ["-tf", path],
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  assert.ok(out.success, `tar -tf ${path}: ${new TextDecoder().decode(out.stderr)}`);
  return new TextDecoder().decode(out.stdout).split("\n").filter(Boolean)
    .map((n) => n.replace(/^\.\//, ""));
}

async function criCheckpoint(runtime: string, shimDir?: string): Promise<void> {
  guard();
  const c = await startContainerd({
    binDir: v21!.binDir,
    ...(shimDir ? { extraPath: [shimDir] } : {}),
    runtimes: { [HANDLER]: { runtimeType: runtime } },
    cri: { defaultHandler: HANDLER },
  });
  // The image comes from a registry, as on a node: the archive's config.dump records the
  // container's image as NAME@DIGEST, and the restore pulls that (containerd 2.1 pulls it even
  // when the image is present). An imported image has no repo digest, so CRI would record its
  // bare image id, which containerd cannot pull ("invalid port" parsing "dummy://sha256:...").
  // containerd reaches a registry on 127.0.0.1 over plain HTTP without a hosts config.
  const registry = await startRegistry();
  try {
    const cri = criClient(c.address);
    const image = await registry.push("skiff/busybox:ckpt", await buildBusyboxImage());
    await cri.images.pullImage({ image: { image } }, CALL);
    const sandboxConfig = criPodConfig(c, "ckpt", { namespace: "skiff" });
    await Deno.mkdir(sandboxConfig.logDirectory, { recursive: true });
    const { podSandboxId } = await cri.runtime.runPodSandbox(
      { config: sandboxConfig, runtimeHandler: HANDLER },
      CALL,
    );
    // The shell's variables carry the state: a token drawn at start and the count. A process
    // started afresh would draw another token and count from 1.
    const script = "t=$(cat /proc/sys/kernel/random/uuid); i=0; " +
      'while :; do i=$((i+1)); echo "$t $i" > /count; sleep 0.2; done';
    const config = (name: string, image: string): ContainerConfig =>
      criContainerConfig(name, ["sh", "-c", script], { image, logPath: `${name}.log` });
    const read = async (containerId: string): Promise<{ token: string; n: number }> => {
      const r = await cri.runtime.execSync(
        { containerId, cmd: ["cat", "/count"], timeout: 120n },
        CALL,
      );
      assert.equal(
        r.exitCode,
        0,
        `cat /count in ${containerId}: ${new TextDecoder().decode(r.stderr)}`,
      );
      const [token, n] = new TextDecoder().decode(r.stdout).trim().split(" ");
      return { token: token!, n: Number(n) };
    };
    const until = async (containerId: string, atLeast: number) => {
      for (let i = 0; i < 600; i++) {
        const now = await read(containerId).catch(() => ({ token: "", n: 0 }));
        if (now.n >= atLeast) return now;
        await new Promise((r) => setTimeout(r, 500));
      }
      throw new Error(`${containerId}: the counter never reached ${atLeast}`);
    };

    const { containerId } = await cri.runtime.createContainer({
      podSandboxId,
      sandboxConfig,
      config: config("counter", image),
    }, CALL);
    await cri.runtime.startContainer({ containerId }, CALL);
    await until(containerId, 5);

    const location = `${c.dir}/counter-checkpoint.tar`;
    try {
      await cri.runtime.checkpointContainer({ containerId, location, timeout: 300n }, CALL);
    } catch (e) {
      throw new Error(`CheckpointContainer: ${(e as Error).message}\n${await c.logs()}`);
    }
    const members = await tarList(location);
    for (const m of ["config.dump", "spec.dump", "status.dump", "checkpoint/inventory.img"]) {
      assert.ok(members.includes(m), `${m} in the archive: ${members.join(" ")}`);
    }
    assert.ok(
      members.some((m) => /^checkpoint\/pstree\.img$/.test(m)),
      `criu's process tree in the archive: ${members.join(" ")}`,
    );
    // Forensic checkpointing leaves the container running: its counter goes on.
    const before = await read(containerId);
    const st = (await cri.runtime.containerStatus({ containerId }, CALL)).status;
    assert.equal(st?.state, ContainerState.CONTAINER_RUNNING, "running after CheckpointContainer");
    await until(containerId, before.n + 2);
    await cri.runtime.stopContainer({ containerId, timeout: 0n }, CALL);
    await cri.runtime.removeContainer({ containerId }, CALL);

    // The restore: the archive's path as the image of a new container in the same pod.
    let restored: string;
    try {
      restored = (await cri.runtime.createContainer({
        podSandboxId,
        sandboxConfig,
        config: config("restored", location),
      }, CALL)).containerId;
      await cri.runtime.startContainer({ containerId: restored }, CALL);
    } catch (e) {
      throw new Error(
        `restore through CreateContainer: ${(e as Error).message}\n${await c.logs()}`,
      );
    }
    // The count goes on from where the dump was taken (5 or more), with the same token.
    const after = await until(restored, 5);
    assert.equal(after.token, before.token, "the restored process is the checkpointed one");
    await until(restored, after.n + 2);
    await cri.runtime.stopContainer({ containerId: restored, timeout: 0n }, CALL);
    await cri.runtime.removeContainer({ containerId: restored }, CALL);
    await cri.runtime.stopPodSandbox({ podSandboxId }, CALL);
    await cri.runtime.removePodSandbox({ podSandboxId }, CALL);
  } finally {
    await c.stop();
    await registry.stop();
  }
}

Deno.test("guest: CRI CheckpointContainer and restore, containerd's Go runc shim", async () => {
  await criCheckpoint(RUNC_RUNTIME);
});

Deno.test("guest: CRI CheckpointContainer and restore, skiff's runc example", async () => {
  const shims = Deno.env.get("SKIFF_GUEST_SHIMS");
  assert.ok(shims, "SKIFF_GUEST_SHIMS: the host-installed shim launchers");
  await criCheckpoint("io.containerd.skiff-runc.v2", shims);
});
