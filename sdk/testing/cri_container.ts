/**
 * The CRI `ContainerConfig` of a test container in a host-network pod, as kubelet would send it:
 * the kit's busybox image by default, the log at `<name>/0.log` under the pod's log directory
 * (kubelet's `<container name>/<restart count>.log`), and kubelet's namespaces for such a pod.
 *
 * @module
 */

import { create } from "@bufbuild/protobuf";
import {
  type ContainerConfig,
  ContainerConfigSchema,
  NamespaceMode,
} from "../../proto/gen/runtime/v1/api_pb.ts";
import { BUSYBOX_IMAGE_REF } from "./image.ts";

/**
 * Options of {@linkcode criContainerConfig}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CriContainerOptions } from "./cri_container.ts";
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
 * import { BUSYBOX_IMAGE_REF } from "./image.ts";
 * import { criContainerConfig } from "./cri_container.ts";
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
