/**
 * A ttrpc server interceptor that times every unary call, reports it to an observer (the
 * shim's metrics) and writes one debug-level log line per call with the RPC, the container
 * and exec ids from the request, the namespace, the status code and the duration.
 *
 * Nothing here logs at info level: a shim answers State and Wait calls all day long.
 *
 * @module
 */

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "../shim/logger.ts";

/** The header containerd puts the namespace in on every ttrpc call. */
const NAMESPACE_HEADER = "containerd-namespace-ttrpc";

const CODE_NAMES: Readonly<Record<number, string>> = {
  0: "OK",
  [Code.Canceled]: "Canceled",
  [Code.Unknown]: "Unknown",
  [Code.InvalidArgument]: "InvalidArgument",
  [Code.DeadlineExceeded]: "DeadlineExceeded",
  [Code.NotFound]: "NotFound",
  [Code.AlreadyExists]: "AlreadyExists",
  [Code.PermissionDenied]: "PermissionDenied",
  [Code.ResourceExhausted]: "ResourceExhausted",
  [Code.FailedPrecondition]: "FailedPrecondition",
  [Code.Aborted]: "Aborted",
  [Code.OutOfRange]: "OutOfRange",
  [Code.Unimplemented]: "Unimplemented",
  [Code.Internal]: "Internal",
  [Code.Unavailable]: "Unavailable",
  [Code.DataLoss]: "DataLoss",
  [Code.Unauthenticated]: "Unauthenticated",
};

/**
 * The gRPC name of a status code (`OK`, `NotFound`, …), as Go's `codes.Code.String()` and
 * the usual `grpc_code` labels spell it.
 *
 * @param code a Connect code, or 0 for success
 * @returns the name; `Code(<n>)` for a number outside the table
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code } from "@connectrpc/connect";
 * import { grpcCodeName } from "@skiff/shim/ops";
 * strictEqual(grpcCodeName(Code.NotFound), "NotFound");
 * strictEqual(grpcCodeName(0), "OK");
 * ```
 */
export function grpcCodeName(code: Code | 0): string {
  return CODE_NAMES[code] ?? `Code(${code})`;
}

/** One finished call, as {@linkcode RpcInterceptorOptions.observe} receives it. */
export interface RpcObservation {
  /** Service name as it was called on the wire (`containerd.task.v3.Task`). */
  service: string;
  /** Method name (`Create`). */
  method: string;
  /** gRPC code name (`OK`, `NotFound`, …). */
  code: string;
  /** Handler time in seconds. */
  seconds: number;
}

/**
 * Options of {@linkcode rpcInterceptor}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RpcInterceptorOptions, RpcObservation } from "@skiff/shim/ops";
 * const seen: RpcObservation[] = [];
 * const o: RpcInterceptorOptions = { observe: (ob) => seen.push(ob) }; // no logger: no debug lines
 * strictEqual(o.logger, undefined);
 * ```
 */
export interface RpcInterceptorOptions {
  /** Receives every finished call (for metrics). */
  observe?: (o: RpcObservation) => void;
  /** Logger for the per-call debug line; lines are built only when debug is enabled. */
  logger?: Logger;
}

function stringField(message: unknown, key: string): string | undefined {
  const v = (message as Record<string, unknown> | undefined)?.[key];
  return typeof v === "string" && v !== "" ? v : undefined;
}

/**
 * Makes the interceptor. The service label comes from the call's URL (`/<service>/<method>`),
 * so a Task call made under the v3 name is told apart from one under the v2 name even though
 * one implementation serves both.
 *
 * @param opts where observations and log lines go
 * @returns a Connect interceptor for `TtrpcServerOptions.interceptors`
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
 * import { createTtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 * import { rpcInterceptor } from "@skiff/shim/ops";
 *
 * const calls: string[] = [];
 * const server = new TtrpcServer({
 *   interceptors: [rpcInterceptor({ observe: (o) => calls.push(`${o.method} ${o.code}`) })],
 * }).register(createServiceImplSpec<typeof Task>(Task, {}), "containerd.task.v2.Task");
 * const dir = await Deno.makeTempDir();
 * await server.listen(`${dir}/shim.sock`);
 * const transport = createTtrpcTransport({ path: `${dir}/shim.sock` });
 * await createClient(Task, transport).state({ id: "c1" }).catch(() => {}); // not implemented
 * deepStrictEqual(calls, ["State Unimplemented"]);
 * await transport.close();
 * await server.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function rpcInterceptor(opts: RpcInterceptorOptions): Interceptor {
  const { observe, logger } = opts;
  return (next) => async (req) => {
    const started = performance.now();
    let code = "OK";
    let error: string | undefined;
    try {
      return await next(req);
    } catch (e) {
      const ce = ConnectError.from(e);
      code = grpcCodeName(ce.code);
      error = ce.rawMessage;
      throw e;
    } finally {
      const seconds = (performance.now() - started) / 1000;
      const service = /^\/([^/]+)\//.exec(req.url)?.[1] ?? req.service.typeName;
      const method = req.method.name;
      observe?.({ service, method, code, seconds });
      if (logger?.enabled("debug")) {
        const message = req.stream ? undefined : req.message;
        logger.debug("rpc", {
          rpc: `${service}/${method}`,
          id: stringField(message, "id") ?? stringField(message, "sandboxId") ??
            stringField(message, "containerId"),
          exec_id: stringField(message, "execId"),
          namespace: req.header.get(NAMESPACE_HEADER) || undefined,
          code,
          duration_ms: Math.round(seconds * 1e6) / 1e3,
          error,
        });
      }
    }
  };
}
