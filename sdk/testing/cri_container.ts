/**
 * The CRI configs of a test pod on the host's network and of its containers, as kubelet would
 * send them: {@linkcode criPodConfig} (the pod's log directory and cgroup under a private
 * containerd's own dirs) and {@linkcode criContainerConfig} (the kit's busybox image by default,
 * the log at `<name>/0.log` under the pod's log directory, kubelet's `<container name>/<restart
 * count>.log`), with kubelet's namespaces for such a pod.
 *
 * @module
 */

import { create } from "@bufbuild/protobuf";
import {
  type ContainerConfig,
  ContainerConfigSchema,
  NamespaceMode,
  type PodSandboxConfig,
  PodSandboxConfigSchema,
} from "../../proto/gen/runtime/v1/api_pb.ts";
import { BUSYBOX_IMAGE_REF } from "./image.ts";

/**
 * Options of {@linkcode criContainerConfig}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CriContainerOptions } from "@skiff/shim/testing";
 * // A container restored from a checkpoint archive, its log next to the pod's others.
 * const o: CriContainerOptions = { image: "/tmp/counter-checkpoint.tar", logPath: "restored.log" };
 * strictEqual(o.logPath, "restored.log");
 * ```
 */
export interface CriContainerOptions {
  /** The image reference (or a checkpoint archive's path, to restore). Default: busybox. */
  image?: string;
  /** The log path, relative to the pod's `logDirectory`. Default `<name>/0.log`. */
  logPath?: string;
}

/**
 * Builds the `ContainerConfig` of a container in a host-network pod: metadata (`name`, attempt
 * 0), image, command, log path, and the namespaces kubelet sets for a host-network pod without
 * `shareProcessNamespace` (network from the node, its own pid namespace, the pod's ipc).
 *
 * @param name the container's name in the pod
 * @param command the command line, e.g. `["sh", "-c", script]`
 * @param opts image and log path, when not the defaults
 * @returns the config for `CreateContainer`
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual, strictEqual } from "node:assert/strict";
 * import { NamespaceMode } from "../../proto/gen/runtime/v1/api_pb.ts";
 * import { BUSYBOX_IMAGE_REF } from "@skiff/shim/testing";
 * import { criContainerConfig } from "@skiff/shim/testing";
 * const c = criContainerConfig("svc", ["sh", "-c", "echo hi; sleep 600"]);
 * strictEqual(c.image?.image, BUSYBOX_IMAGE_REF);
 * strictEqual(c.logPath, "svc/0.log");
 * deepStrictEqual(c.command, ["sh", "-c", "echo hi; sleep 600"]);
 * strictEqual(c.linux?.securityContext?.namespaceOptions?.network, NamespaceMode.NODE);
 * strictEqual(c.linux?.securityContext?.namespaceOptions?.pid, NamespaceMode.CONTAINER);
 * // await cri.runtime.createContainer({ podSandboxId, sandboxConfig, config: c });
 * ```
 */
export function criContainerConfig(
  name: string,
  command: string[],
  opts: CriContainerOptions = {},
): ContainerConfig {
  return create(ContainerConfigSchema, {
    metadata: { name, attempt: 0 },
    image: { image: opts.image ?? BUSYBOX_IMAGE_REF },
    command,
    logPath: opts.logPath ?? `${name}/0.log`,
    linux: {
      securityContext: {
        // kubelet's namespaces for a host-network pod without shareProcessNamespace.
        namespaceOptions: {
          network: NamespaceMode.NODE,
          pid: NamespaceMode.CONTAINER,
          ipc: NamespaceMode.POD,
        },
      },
    },
  });
}

/**
 * Options of {@linkcode criPodConfig}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CriPodOptions } from "@skiff/shim/testing";
 * const o: CriPodOptions = { namespace: "conformance", labels: { "skiff.test/handler": "runc" } };
 * strictEqual(o.namespace, "conformance");
 * ```
 */
export interface CriPodOptions {
  /** The pod's Kubernetes namespace. Default `skiff-test`. */
  namespace?: string;
  /** The pod's labels. Default none. */
  labels?: Record<string, string>;
}

/**
 * Builds the `PodSandboxConfig` of a host-network pod under a private containerd: a fresh uid,
 * the log directory `<c.dir>/pods/<uid>` (make it before `RunPodSandbox`: CRI writes the
 * containers' logs there), the cgroup parent `/<c.cgroupParent>/pod-<uid>` (which the private
 * containerd's `stop()` removes), an empty hostname (kubelet's for a host-network pod: runc
 * refuses one without a private UTS namespace), and kubelet's namespaces for such a pod
 * (network from the node, the pod's pid and ipc).
 *
 * @param c the private containerd's dir and cgroup parent
 * @param name the pod's name
 * @param opts namespace and labels, when not the defaults
 * @returns the config for `RunPodSandbox` (and `CreateContainer`'s `sandboxConfig`)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { NamespaceMode } from "../../proto/gen/runtime/v1/api_pb.ts";
 * import { criPodConfig } from "@skiff/shim/testing";
 * const pod = criPodConfig({ dir: "/tmp/skiff-ctrd-1", cgroupParent: "skiff-c1" }, "web");
 * const uid = pod.metadata!.uid;
 * strictEqual(pod.logDirectory, `/tmp/skiff-ctrd-1/pods/${uid}`);
 * strictEqual(pod.linux?.cgroupParent, `/skiff-c1/pod-${uid}`);
 * strictEqual(pod.linux?.securityContext?.namespaceOptions?.network, NamespaceMode.NODE);
 * // await Deno.mkdir(pod.logDirectory, { recursive: true });
 * // await cri.runtime.runPodSandbox({ config: pod, runtimeHandler: "runc" });
 * ```
 */
export function criPodConfig(
  c: { readonly dir: string; readonly cgroupParent: string },
  name: string,
  opts: CriPodOptions = {},
): PodSandboxConfig {
  const uid = crypto.randomUUID();
  return create(PodSandboxConfigSchema, {
    metadata: { name, uid, namespace: opts.namespace ?? "skiff-test", attempt: 0 },
    hostname: "",
    logDirectory: `${c.dir}/pods/${uid}`,
    labels: opts.labels ?? {},
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
}
