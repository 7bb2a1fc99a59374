/**
 * ttrpc for Deno, wire-compatible with containerd/ttrpc (Go): a server that dispatches to
 * Connect service implementations, and a client that is a Connect `Transport`.
 *
 * ttrpc is containerd's lightweight RPC protocol between the daemon and its shims: protobuf
 * messages in 10-byte-header frames over a unix socket, unary calls multiplexed by odd stream
 * ids, errors as `google.rpc.Status`. Connect's types (`ServiceImplSpec`, `HandlerContext`,
 * `Transport`, `ConnectError`, interceptors) carry over unchanged.
 *
 * @example Serve a service and call it
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
 * import { createTtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 *
 * const server = new TtrpcServer();
 * server.register(
 *   createServiceImplSpec<typeof Task>(Task, {
 *     state: (req, ctx) => ({
 *       id: req.id,
 *       bundle: ctx.requestHeader.get("containerd-namespace-ttrpc") ?? "",
 *     }),
 *   }),
 *   "containerd.task.v2.Task",
 *   "containerd.task.v3.Task",
 * );
 * const dir = await Deno.makeTempDir();
 * await server.listen(`${dir}/shim.sock`);
 *
 * const transport = createTtrpcTransport({ path: `unix://${dir}/shim.sock` });
 * const task = createClient(Task, transport);
 * const headers = { "containerd-namespace-ttrpc": "default" };
 * const state = await task.state({ id: "c1" }, { headers });
 * strictEqual(state.id, "c1");
 * strictEqual(state.bundle, "default");
 *
 * await transport.close();
 * await server.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */

export { socketPathOf } from "./address.ts";
export {
  type DecodedFrame,
  encodeFrame,
  FRAME_HEADER_LENGTH,
  FrameDecoder,
  FrameFlags,
  type FrameHeader,
  FrameType,
  MAX_PAYLOAD_LENGTH,
} from "./frame.ts";
export {
  type CarriedCall,
  type CarriedConnection,
  type ConnectionCarry,
  type TtrpcByteStream,
  type TtrpcCloseOptions,
  type TtrpcListenOptions,
  TtrpcServer,
  type TtrpcServerOptions,
  type WireMethod,
} from "./server.ts";
export { errorFromStatus, statusFromError } from "./status_connect.ts";
export {
  createTtrpcTransport,
  type TtrpcTransport,
  type TtrpcTransportOptions,
} from "./transport.ts";
export {
  type RawCall,
  TtrpcWireClient,
  type TtrpcWireClientOptions,
  type WireCallOptions,
} from "./wire_client.ts";
export type { WireCodec, WireInit } from "../../proto/wire_table.ts";
