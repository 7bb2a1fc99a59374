/**
 * `createTtrpcTransport`: a Connect `Transport` speaking ttrpc over a unix socket, so that
 * `createClient(Service, transport)` gives typed clients for containerd's ttrpc services.
 *
 * @module
 */

import {
  type DescMessage,
  type DescMethodStreaming,
  type DescMethodUnary,
  fromBinary,
  type MessageInitShape,
  toBinary,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextValues,
  createContextValues,
  type Interceptor,
  type StreamResponse,
  type Transport,
  type UnaryResponse,
} from "@connectrpc/connect";
import { runUnaryCall } from "@connectrpc/connect/protocol";
import { errorFromStatus } from "./status_connect.ts";
import { TtrpcWireClient } from "./wire_client.ts";

/**
 * Options for {@linkcode createTtrpcTransport}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { TtrpcTransportOptions } from "@skiff/shim/ttrpc";
 * const options: TtrpcTransportOptions = { path: "/run/containerd/containerd.sock.ttrpc", dialTimeoutMs: 2000 };
 * strictEqual(options.dialTimeoutMs, 2000);
 * ```
 */
export interface TtrpcTransportOptions {
  /** The server's socket: `unix:///path`, `ttrpc+unix:///path` or a plain `/path`. */
  path: string;
  /** Give up dialling after this long (Code.Unavailable). Default 10000. */
  dialTimeoutMs?: number;
  /** Deadline for calls that set none themselves; default none. */
  defaultTimeoutMs?: number;
  /** Client interceptors (first is outermost). */
  interceptors?: Interceptor[];
}

/**
 * A Connect `Transport` over one multiplexed ttrpc connection, plus `close()`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
 * import { createTtrpcTransport, type TtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 * // A shim that answers Connect, on a temporary socket.
 * const dir = await Deno.makeTempDir();
 * const server = new TtrpcServer().register(
 *   createServiceImplSpec<typeof Task>(Task, { connect: () => ({ shimPid: Deno.pid }) }),
 *   "containerd.task.v2.Task",
 * );
 * await server.listen(`${dir}/shim.sock`);
 *
 * const transport: TtrpcTransport = createTtrpcTransport({ path: `unix://${dir}/shim.sock` });
 * const pid = (await createClient(Task, transport).connect({ id: "c1" })).shimPid;
 * strictEqual(pid, Deno.pid);
 * await transport.close();
 * await server.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export interface TtrpcTransport extends Transport {
  /** Closes the connection; calls in flight and later calls fail with `Code.Unavailable`. */
  close(): Promise<void>;
  /** Same as `close()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Creates a ttrpc client transport. The connection is dialled lazily on the first call and
 * shared by all calls: each gets the next odd stream id, its deadline travels as
 * `timeout_nano`, its headers as ttrpc metadata (e.g. `containerd-namespace-ttrpc`), and a
 * non-zero response status becomes a `ConnectError` with that code. When the connection drops,
 * every call in flight fails with `Code.Unavailable` and the next call dials again. Cancelling a
 * call only stops waiting for it, as in Go. Streaming calls are not supported yet.
 *
 * Headers iterate like `Headers` do, so repeated values of one key travel joined with ", ".
 *
 * @param options socket address, timeouts and interceptors
 * @returns the transport
 *
 * @example Publish an event to containerd
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
 * import { createTtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
 * import { EventsService as Events } from "@skiff/shim/proto";
 *
 * // containerd's events socket (TTRPC_ADDRESS), played by a server that keeps the topics.
 * const topics: string[] = [];
 * const containerd = new TtrpcServer().register(
 *   createServiceImplSpec<typeof Events>(Events, {
 *     forward: (req) => (topics.push(req.envelope?.topic ?? ""), {}),
 *   }),
 *   "containerd.services.events.ttrpc.v1.Events",
 * );
 * const dir = await Deno.makeTempDir();
 * await containerd.listen(`${dir}/containerd.sock.ttrpc`);
 *
 * const transport = createTtrpcTransport({ path: `${dir}/containerd.sock.ttrpc` });
 * const events = createClient(Events, transport);
 * await events.forward(
 *   { envelope: { topic: "/tasks/oom", namespace: "default" } },
 *   { headers: { "containerd-namespace-ttrpc": "default" }, timeoutMs: 5000 },
 * );
 * strictEqual(topics[0], "/tasks/oom");
 * await transport.close();
 * await containerd.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function createTtrpcTransport(options: TtrpcTransportOptions): TtrpcTransport {
  return new TtrpcClientTransport(options);
}

class TtrpcClientTransport implements TtrpcTransport {
  #client: TtrpcWireClient;
  #defaultTimeoutMs: number | undefined;
  #interceptors: Interceptor[];

  constructor(options: TtrpcTransportOptions) {
    this.#client = new TtrpcWireClient(options);
    this.#defaultTimeoutMs = options.defaultTimeoutMs;
    this.#interceptors = options.interceptors ?? [];
  }

  unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: HeadersInit | undefined,
    input: MessageInitShape<I>,
    contextValues?: ContextValues,
  ): Promise<UnaryResponse<I, O>> {
    timeoutMs ??= this.#defaultTimeoutMs;
    const deadline = timeoutMs === undefined ? undefined : performance.now() + timeoutMs;
    return runUnaryCall<I, O>({
      interceptors: this.#interceptors,
      signal,
      timeoutMs,
      req: {
        stream: false,
        service: method.parent,
        method,
        requestMethod: "POST",
        url: `/${method.parent.typeName}/${method.name}`,
        header: new Headers(header),
        contextValues: contextValues ?? createContextValues(),
        message: input,
      },
      next: async (req) => {
        const metadata: { key: string; value: string }[] = [];
        req.header.forEach((value, key) => {
          metadata.push({ key, value });
        });
        // The deadline is measured from the call's start; what remains now is what we send.
        const timeoutNano = deadline === undefined
          ? 0n
          : BigInt(Math.max(1, Math.round((deadline - performance.now()) * 1e6)));
        const res = await this.#client.callRaw({
          service: method.parent.typeName,
          method: method.name,
          payload: toBinary(method.input, req.message),
          timeoutNano,
          metadata,
        }, req.signal);
        if (res.status !== undefined && res.status.code !== 0) throw errorFromStatus(res.status);
        let message;
        try {
          message = fromBinary(method.output, res.payload);
        } catch (err) {
          const msg = err instanceof Error ? err.message : String(err);
          throw new ConnectError(
            `cannot decode ${method.output.typeName} from ${method.parent.typeName}/${method.name}: ${msg}`,
            Code.Internal,
          );
        }
        return {
          stream: false,
          service: method.parent,
          method,
          header: new Headers(),
          trailer: new Headers(),
          message,
        };
      },
    });
  }

  stream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodStreaming<I, O>,
    _signal: AbortSignal | undefined,
    _timeoutMs: number | undefined,
    _header: HeadersInit | undefined,
    _input: AsyncIterable<MessageInitShape<I>>,
    _contextValues?: ContextValues,
  ): Promise<StreamResponse<I, O>> {
    return Promise.reject(
      new ConnectError(
        `streaming call ${method.parent.typeName}/${method.name} is not supported by the ttrpc transport`,
        Code.Unimplemented,
      ),
    );
  }

  close(): Promise<void> {
    return this.#client.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
