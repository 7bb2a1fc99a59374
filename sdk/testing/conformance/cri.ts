/**
 * The CRI scenario: one host-network pod with one container, `ExecSync`, stop and remove, on a
 * second private containerd of the same version with CRI enabled and the runtime under test as
 * its only handler.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ContainerState } from "../../../proto/gen/runtime/v1/api_pb.ts";
import { startContainerd } from "../containerd.ts";
import { CRI_NAMESPACE, criClient } from "../cri_client.ts";
import { BUSYBOX_IMAGE_REF } from "../image.ts";
import { criContainerConfig, criPodConfig } from "../cri_container.ts";
import type { ScenarioContext } from "./kit.ts";

const HANDLER = "conformance";

/**
 * Runs the pod's life through CRI on its own CRI-enabled containerd, which it stops afterwards.
 *
 * @param ctx the scenario context (its containerd names the version and binaries)
 */
export async function criPodScenario(ctx: ScenarioContext): Promise<void> {
  const version = ctx.containerd.version;
  const runcRoot = ctx.taskOptions !== undefined;
  // 1.6's CRI sends a non-runc runtime only a config path; 1.7+ the table as TOML.
  const options =
    runcRoot && (ctx.runtime === "io.containerd.runc.v2" || !version.startsWith("1.6."))
      ? (p: { runcRoot: string }) => ({ Root: p.runcRoot })
      : undefined;
  const c = await ctx.within(
    startContainerd({
      binDir: ctx.containerd.binDir,
      extraPath: [ctx.shimDir],
      runtimes: { [HANDLER]: { runtimeType: ctx.runtime, ...(options ? { options } : {}) } },
      cri: { defaultHandler: HANDLER },
      env: ctx.env,
    }),
    "start a CRI-enabled containerd",
  );
  ctx.defer(() => c.stop());
  const cri = criClient(c.address);
  const o = { timeoutMs: 60_000 };
  await c.importBusyboxImage(CRI_NAMESPACE);
  await ctx.eventually(
    "CRI to list the busybox image",
    async () =>
      (await cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, o)).image
        ? true
        : undefined,
  );
  const config = criPodConfig(c, "conformance", { namespace: "conformance" });
  await Deno.mkdir(config.logDirectory, { recursive: true });
  const { podSandboxId } = await cri.runtime.runPodSandbox({ config, runtimeHandler: HANDLER }, o);
  const { containerId } = await cri.runtime.createContainer({
    podSandboxId,
    sandboxConfig: config,
    config: criContainerConfig("main", ["sleep", "600"], { logPath: "main.log" }),
  }, o);
  await cri.runtime.startContainer({ containerId }, o);
  const ex = await cri.runtime.execSync({
    containerId,
    cmd: ["sh", "-c", "echo exec-out; exit 3"],
    timeout: 30n,
  }, o);
  assert.equal(ex.exitCode, 3, "ExecSync's exit code");
  assert.equal(new TextDecoder().decode(ex.stdout), "exec-out\n", "ExecSync's stdout");
  await cri.runtime.stopContainer({ containerId, timeout: 0n }, o);
  const st = (await cri.runtime.containerStatus({ containerId }, o)).status;
  assert.equal(st?.state, ContainerState.CONTAINER_EXITED, "state after StopContainer");
  assert.equal(st?.exitCode, 137, "exit code after StopContainer");
  await cri.runtime.removeContainer({ containerId }, o);
  await cri.runtime.stopPodSandbox({ podSandboxId }, o);
  await cri.runtime.removePodSandbox({ podSandboxId }, o);
  const left = await cri.runtime.listPodSandbox({ filter: { id: podSandboxId } }, o);
  assert.deepEqual(left.items.map((p) => p.id), [], "pods left");
  await ctx.eventually("the pod's shim to exit", () =>
    Promise.resolve(
      c.shims().some((s) => s.argv.includes(podSandboxId) || s.argv.includes(containerId))
        ? undefined
        : true,
    ));
}
