/**
 * Typed gRPC clients for containerd's own API over its unix socket (Connect's gRPC transport
 * on Deno's `node:http2`), so tests can do what CRI does without `crictl`: create containers
 * and tasks, drive the sandbox store and controller, read the version, and subscribe to events.
 *
 * @module
 */

import * as net from "node:net";
import { type Client, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Version } from "../../proto/gen/containerd/services/version/v1/version_pb.ts";
import { Containers } from "../../proto/gen/containerd/services/containers/v1/containers_pb.ts";
import { Tasks } from "../../proto/gen/containerd/services/tasks/v1/tasks_pb.ts";
import { Controller, Store } from "../../proto/gen/containerd/services/sandbox/v1/sandbox_pb.ts";
import { Events } from "../../proto/gen/containerd/services/events/v1/events_pb.ts";
import { Snapshots } from "../../proto/gen/containerd/services/snapshots/v1/snapshots_pb.ts";
import { Leases } from "../../proto/gen/containerd/services/leases/v1/leases_pb.ts";
import { Introspection } from "../../proto/gen/containerd/services/introspection/v1/introspection_pb.ts";

/** The gRPC metadata key containerd reads the namespace from. */
export const GRPC_NAMESPACE_HEADER = "containerd-namespace";

/** Clients for containerd's services, bound to one namespace. */
export interface ContainerdClient {
  /** `containerd.services.version.v1.Version`. */
  version: Client<typeof Version>;
  /** `containerd.services.containers.v1.Containers`. */
  containers: Client<typeof Containers>;
  /** `containerd.services.tasks.v1.Tasks`. */
  tasks: Client<typeof Tasks>;
  /** `containerd.services.sandbox.v1.Store`. */
  sandboxStore: Client<typeof Store>;
  /** `containerd.services.sandbox.v1.Controller`. */
  sandboxController: Client<typeof Controller>;
  /** `containerd.services.events.v1.Events`. */
  events: Client<typeof Events>;
  /** `containerd.services.snapshots.v1.Snapshots`. */
  snapshots: Client<typeof Snapshots>;
  /** `containerd.services.leases.v1.Leases`. */
  leases: Client<typeof Leases>;
  /** `containerd.services.introspection.v1.Introspection` (`PluginInfo`: a shim's `-info`). */
  introspection: Client<typeof Introspection>;
}

/**
 * Connects to containerd's gRPC socket.
 *
 * @param socket path of containerd's gRPC socket (`-a` of ctr)
 * @param namespace sent as `containerd-namespace` on every call
 * @example Usage
 * ```ts ignore
 * const c = containerdClient("/run/containerd/containerd.sock", "default");
 * console.log((await c.version.version({})).version);
 * ```
 */
export function containerdClient(socket: string, namespace: string): ContainerdClient {
  const ns: Interceptor = (next) => (req) => {
    req.header.set(GRPC_NAMESPACE_HEADER, namespace);
    return next(req);
  };
  const transport = createGrpcTransport({
    baseUrl: "http://containerd",
    interceptors: [ns],
    nodeOptions: { createConnection: () => net.connect(socket) },
  });
  return {
    version: createClient(Version, transport),
    containers: createClient(Containers, transport),
    tasks: createClient(Tasks, transport),
    sandboxStore: createClient(Store, transport),
    sandboxController: createClient(Controller, transport),
    events: createClient(Events, transport),
    snapshots: createClient(Snapshots, transport),
    leases: createClient(Leases, transport),
    introspection: createClient(Introspection, transport),
  };
}
