/**
 * The `delete` action after a SIGKILLed server, under CRI (podsandbox, the runc root private),
 * side by side with containerd's Go runc shim in the same containerd: a pod with a running
 * container (`sleep 3600`) per handler, its shim SIGKILLed. containerd runs
 * `<shim> -namespace NS -address A -publish-binary P -id ID -bundle B delete` (no options on
 * stdin) for every task whose shim connection it watches; the task of a container that joined
 * its pod's shim (a shim that advertised task API version 3) is watched from containerd 2.4 on.
 * containerd 2.1 (to 2.3) loads such a task with no close callback (core/runtime/v2
 * `ShimManager.Start`: `loadShim(ctx, bundle, func() {})`), so after the kill it runs `delete`
 * for the pod's sandbox only, CRI reports the container exited (255) and its process runs on,
 * whichever the shim. The test holds skiff to the Go shim on the same input: containerd asks
 * both the same (it runs `delete` with the container's id for both or for neither), where it
 * asks, both containers' processes end and leave nothing in the runc root, and where it does not,
 * the Go shim's container is left running exactly as skiff's is. Under every 2.x here; from
 * 2.4 on containerd must ask.
 *
 * Everything waits by polling with generous bounds; nothing asserts a duration.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../../../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../../../../sdk/testing/containerd.ts";
import { CRI_NAMESPACE, type CriClient, criClient } from "../../../../sdk/testing/cri_client.ts";
import { criContainerConfig, criPodConfig } from "../../../../sdk/testing/cri_container.ts";
import { BUSYBOX_IMAGE_REF } from "../../../../sdk/testing/image.ts";
import { installExampleShims } from "../../../../sdk/install/examples.ts";
import { ContainerState } from "../../../../proto/gen/runtime/v1/api_pb.ts";
import { alive, eventually, LAUNCHER, RUNTIME } from "../../../_spare.ts";

const NEEDS = { root: true, binaries: ["runc", "busybox", "sh", "mount", "umount"] };
const versions = containerdVersions().filter((v) => /^2\./.test(v.version));
/** The Go shim first (the reference), then skiff's runc example. */
const HANDLERS = { go: "runc", skiff: "skiff-runc" } as const;
/** Deadline of each CRI call: generous; only there so that a hang fails instead of wedging. */
const CALL = { timeoutMs: 120_000 };
/** Bound of what must happen eventually (never a timing assertion). */
const LONG_MS = 180_000;
const dec = new TextDecoder();

/** What became of a pod's container after its shim was SIGKILLed. */
interface Outcome {
  /** containerd ran the shim's `delete` with the container's id. */
  asked: boolean;
  /** The container's process is gone. */
  ended: boolean;
  /** The container is still in the private runc root. */
  inRuncRoot: boolean;
}

function runc(c: PrivateContainerd, args: string[]): Promise<Deno.CommandOutput> {
  return new Deno.Command("runc", {
    args: ["--root", `${c.runcRoot}/${CRI_NAMESPACE}`, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
}

/** The server serving pod `podId`: skiff's records its pid, the Go shim's argv names the pod. */
function shimOf(c: PrivateContainerd, podId: string): Promise<number> {
  const bundle = `${c.state}/io.containerd.runtime.v2.task/${CRI_NAMESPACE}/${podId}`;
  return eventually(`the shim of pod ${podId}`, () => {
    try {
      const pid = Number(Deno.readTextFileSync(`${bundle}/shim.pid`).trim());
      if (pid > 0) return pid;
    } catch { /* the Go shim writes none here */ }
    return c.shims().find((p) => p.argv.includes(podId))?.pid;
  }, LONG_MS);
}

/** containerd's log lines of `msg` about `id` (`id=<id>` field). */
async function logged(c: PrivateContainerd, msg: string, id: string): Promise<boolean> {
  return (await c.logs()).split("\n").some((l) => l.includes(`msg="${msg}`) && l.includes(id));
}

/** Runs a pod of `sleep 3600` under `handler`, SIGKILLs its shim and says what became of it. */
async function killedPod(c: PrivateContainerd, cri: CriClient, handler: string): Promise<Outcome> {
  const config = criPodConfig(c, `killed-${handler}`);
  await Deno.mkdir(config.logDirectory, { recursive: true });
  const { podSandboxId: podId } = await cri.runtime.runPodSandbox(
    { config, runtimeHandler: handler },
    CALL,
  );
  let cpid = 0;
  let containerId = "";
  try {
    ({ containerId } = await cri.runtime.createContainer({
      podSandboxId: podId,
      config: criContainerConfig("main", ["sleep", "3600"]),
      sandboxConfig: config,
    }, CALL));
    await cri.runtime.startContainer({ containerId }, CALL);
    const state = await runc(c, ["state", containerId]);
    assert.ok(state.success, `runc state ${containerId}: ${dec.decode(state.stderr)}`);
    cpid = JSON.parse(dec.decode(state.stdout)).pid;
    assert.ok(alive(cpid), `${handler}: the container's process runs`);
    const shim = await shimOf(c, podId);

    Deno.kill(shim, "SIGKILL");
    await eventually(`${handler}: shim ${shim} gone`, () => alive(shim) ? undefined : true);
    const s = await eventually(`${handler}: CRI to report ${containerId} exited`, async () => {
      const s = (await cri.runtime.containerStatus({ containerId }, CALL)).status;
      return s?.state === ContainerState.CONTAINER_EXITED ? s : undefined;
    }, LONG_MS);
    assert.equal(s.exitCode, 255, `${handler}: CRI's exit code of a task whose shim died`);
    // containerd is done with both: the sandbox's dead shim cleaned up, the container's exit
    // handled by CRI (its task deleted in the task service).
    await eventually(
      `${handler}: containerd to clean up the sandbox and handle the exit`,
      async () =>
        await logged(c, "cleaning up dead shim", podId) &&
          await logged(c, "Ensure that container", containerId)
          ? true
          : undefined,
      LONG_MS,
    );
    const asked = await logged(c, "cleaning up dead shim", containerId);
    if (asked) {
      await eventually(
        `${handler}: ${containerId}'s process to end (containerd ran delete for it)`,
        () => alive(cpid) ? undefined : true,
        LONG_MS,
      );
    }
    return {
      asked,
      ended: !alive(cpid),
      inRuncRoot: (await runc(c, ["state", containerId])).success,
    };
  } finally {
    // What containerd left (2.1): the container, then the pod.
    if (containerId) await runc(c, ["delete", "--force", containerId]);
    if (cpid > 0 && alive(cpid)) Deno.kill(cpid, "SIGKILL");
    await cri.runtime.stopPodSandbox({ podSandboxId: podId }, CALL).catch(() => {});
    await cri.runtime.removePodSandbox({ podSandboxId: podId }, CALL).catch(() => {});
  }
}

for (const v of versions) {
  integrationTest(
    `CRI on containerd ${v.version}: a SIGKILLed shim's pod container ends exactly when the Go shim's does`,
    NEEDS,
    async () => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-dead-shim-" });
      try {
        const [launcher] = await installExampleShims({
          prefix,
          shims: { [LAUNCHER]: "examples/runc/main.ts" },
        });
        const c = await startContainerd({
          binDir: v.binDir,
          extraPath: [launcher!.slice(0, launcher!.lastIndexOf("/"))],
          runtimes: {
            [HANDLERS.go]: {
              runtimeType: "io.containerd.runc.v2",
              options: (c) => ({ Root: c.runcRoot }),
            },
            [HANDLERS.skiff]: { runtimeType: RUNTIME, options: (c) => ({ Root: c.runcRoot }) },
          },
          cri: { defaultHandler: HANDLERS.go },
        });
        try {
          await c.importBusyboxImage(CRI_NAMESPACE);
          const cri = criClient(c.address);
          await eventually("CRI to list the busybox image", async () => {
            const s = await cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, CALL);
            return s.image ? true : undefined;
          }, LONG_MS);
          const go = await killedPod(c, cri, HANDLERS.go);
          const skiff = await killedPod(c, cri, HANDLERS.skiff);
          console.log(
            `containerd ${v.version}: Go shim ${JSON.stringify(go)}, skiff ${
              JSON.stringify(skiff)
            }`,
          );
          assert.deepEqual(skiff, go, "skiff's container fares as the Go shim's");
          if (go.asked) assert.deepEqual(go, { asked: true, ended: true, inRuncRoot: false });
          // 2.4 watches a container that joined its pod's shim; 2.1 to 2.3 do not.
          assert.equal(go.asked, !/^2\.[123]\./.test(v.version), "containerd ran delete for it");
        } finally {
          await c.stop();
        }
      } finally {
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
