/**
 * A typed client for Kubernetes' Container Runtime Interface (`runtime.v1`) over containerd's
 * unix socket, so tests can do what kubelet does without `crictl`: run pods, create, start, stop
 * and remove containers, `ExecSync`, read statuses and the runtime's handlers.
 *
 * CRI is served on containerd's own gRPC socket when its CRI plugin is enabled (see
 * `startContainerd({ cri: ... })`); there is no namespace header: CRI always works in `k8s.io`.
 *
 * @example Usage
 * ```ts ignore
 * import { criClient } from "@skiff/shim/testing";
 *
 * const cri = criClient("/run/containerd/containerd.sock");
 * console.log((await cri.runtime.version({ version: "v1" })).runtimeVersion);
 * ```
 *
 * @module
 */

import * as net from "node:net";
import { type Client, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ImageService, RuntimeService } from "../../proto/gen/runtime/v1/api_pb.ts";

/** The containerd namespace CRI keeps its pods, containers and images in. */
export const CRI_NAMESPACE = "k8s.io";

/** Clients for CRI's two services on one socket. */
export interface CriClient {
  /** `runtime.v1.RuntimeService`: pods, containers, exec, status. */
  runtime: Client<typeof RuntimeService>;
  /** `runtime.v1.ImageService`: images. */
  images: Client<typeof ImageService>;
}

/**
 * Connects to CRI on containerd's gRPC socket. Pass `{ signal }` or `{ timeoutMs }` as the
 * second argument of each call to bound it.
 *
 * @param socket path of containerd's gRPC socket
 * @returns the two service clients
 * @example Usage
 * ```ts ignore
 * const cri = criClient(c.address);
 * const { podSandboxId } = await cri.runtime.runPodSandbox({ config, runtimeHandler: "runc" }, {
 *   timeoutMs: 60_000,
 * });
 * ```
 */
export function criClient(socket: string): CriClient {
  const transport = createGrpcTransport({
    baseUrl: "http://containerd",
    nodeOptions: { createConnection: () => net.connect(socket) },
  });
  return {
    runtime: createClient(RuntimeService, transport),
    images: createClient(ImageService, transport),
  };
}
