/**
 * skiff's testing kit, for skiff's own tests and for runtime authors testing their shims
 * against real components:
 *
 * - {@link ShimHarness} plays containerd for one shim (runs `start`, records events, gives
 *   typed Task and Sandbox clients);
 * - {@link createBusyboxBundle} and {@link buildBusyboxImage} build a bundle or an OCI image
 *   from the host's static busybox;
 * - {@link startContainerd} runs a private containerd of a given version with its own root,
 *   state and sockets (optionally with CRI and runtime handlers), {@link containerdClient}
 *   talks gRPC to it as CRI would, and {@link criClient} talks CRI to it as kubelet would;
 * - {@link startRegistry} serves locally built images from a private registry on 127.0.0.1;
 * - installing a shim to test it: `installShims` from `@skiff/shim/install`;
 * - {@link runInGuest} runs one command of the checkout on cgroup v2, in a QEMU guest over the
 *   host's own root (`deno task guest` is its command line);
 * - {@link runConformance} runs the conformance catalogue (a scenario × containerd version
 *   matrix) against any shim binary; `deno task conformance` is its command line.
 *
 * @example Drive a shim like containerd does
 * ```ts ignore
 * import { createBusyboxBundle, ShimHarness } from "@skiff/shim/testing";
 *
 * const { bundle, cleanup } = await createBusyboxBundle({ args: ["sh", "-c", "exit 3"] });
 * const h = await ShimHarness.start({ shim: "/usr/local/bin/containerd-shim-my-v1", bundle });
 * await h.task.create({ id: h.id, bundle });
 * await h.task.start({ id: h.id });
 * console.log((await h.task.wait({ id: h.id })).exitStatus); // 3
 * await h.task.delete({ id: h.id });
 * await h.close();
 * await cleanup();
 * ```
 *
 * @module
 */

export {
  decodeTaskEvent,
  eventAs,
  parseStartOutput,
  type RecordedEvent,
  ShimHarness,
  type ShimHarnessOptions,
} from "./harness.ts";
export {
  type BusyboxBundle,
  type BusyboxBundleOptions,
  createBusyboxBundle,
  createOciSpec,
  findBusybox,
  type OciMount,
  type OciSpec,
  type OciSpecOptions,
} from "./bundle.ts";
export {
  buildBusyboxImage,
  buildPauseImage,
  BUSYBOX_IMAGE_REF,
  type BusyboxImageOptions,
  PAUSE_IMAGE_REF,
} from "./image.ts";
export {
  type LocalRegistry,
  registryBinary,
  startRegistry,
  type StartRegistryOptions,
} from "./registry.ts";
export { type OciDescriptor, type OciIndex, type OciLayout, readOciLayout } from "./oci_layout.ts";
export { createFifoSet, type FifoSet, readFifo } from "./fifo_set.ts";
export { type ContainerdVersion, containerdVersions } from "./containerd_versions.ts";
export { startContainerd, type StartContainerdOptions } from "./containerd.ts";
export { PrivateContainerd, type RuntimeConfig } from "./private_containerd.ts";
export type { CtrOptions, CtrResult } from "./ctr_command.ts";
export type { CriSetup } from "./containerd_config.ts";
export { type ContainerdClient, containerdClient } from "./containerd_client.ts";
export { CRI_NAMESPACE, type CriClient, criClient } from "./cri_client.ts";
export {
  criContainerConfig,
  type CriContainerOptions,
  criPodConfig,
  type CriPodOptions,
} from "./cri_container.ts";
export {
  type CriConfigOptions,
  type CriHandler,
  criPlugins,
  criRuntimePlugin,
} from "./cri_config.ts";
export { ctrRun, type CtrRunOptions, DEFAULT_NAMESPACE } from "./ctr.ts";
export {
  type GuestImage,
  guestImage,
  type GuestOptions,
  type GuestResult,
  guestUnavailable,
  runInGuest,
} from "./guest.ts";
export {
  type ConformanceOptions,
  NOT_COVERED,
  runConformance,
  SHARED_NO_UPGRADE,
} from "./conformance/runner.ts";
export {
  compareReports,
  type ConformanceReport,
  hasFailures,
  markdownReport,
  type Regression,
  type ScenarioResult,
} from "./conformance/report.ts";
export { CATALOGUE } from "./conformance/catalogue.ts";
export {
  type Requirements,
  RUNTIME_TRAITS,
  type RuntimeTraits,
  type Scenario,
  ScenarioSkip,
  type Trait,
} from "./conformance/scenario.ts";
export {
  type Neighbour,
  ScenarioContext,
  type ScenarioContextInit,
  type Stdio,
} from "./conformance/kit.ts";
export { EventRecorder, type TaskEvent } from "./conformance/events.ts";
export {
  CNI_BIN_DIR,
  CRITEST_HANDLER_FOCUS,
  CRITEST_HANDLERS,
  CRITEST_SKIPS,
  CRITEST_VERSION,
  critestBinary,
  critestCniConfig,
  type CritestImages,
  critestMatrix,
  type CritestMatrixOptions,
  critestRegressions,
  type CritestRun,
  type CritestSkip,
  type CritestSpec,
  defaultCritestHandlers,
  parseGinkgoReport,
  runCritest,
  runCritestMatrix,
  type RunCritestOptions,
  serveCritestImages,
} from "./critest.ts";
