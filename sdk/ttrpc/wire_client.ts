/**
 * `TtrpcWireClient`: a ttrpc client that calls methods with wire codecs, without Connect's
 * client or protobuf-es's schemas. A shim server forwards its events with it, so publishing
 * loads no generated descriptor; `createTtrpcTransport` builds Connect's typed clients on the
 * same connection handling.
 *
 * @module
 */

import { Code, isStatusError, statusError, TTRPC_DIAL_FAILED } from "./status_error.ts";
import type { Response } from "../../proto/gen/ttrpc/request_pb.ts";
import type { WireCodec, WireInit } from "../../proto/wire_table.ts";
import { ClientConnection } from "./_client_connection.ts";
import { socketPathOf } from "./address.ts";
import { statusErrorOf } from "./status.ts";

/**
 * Options for {@linkcode TtrpcWireClient}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { TtrpcWireClientOptions } from "@skiff/shim/ttrpc";
 * const options: TtrpcWireClientOptions = { path: "/run/containerd/containerd.sock.ttrpc" };
 * strictEqual(options.dialTimeoutMs, undefined);
 * ```
 */
export interface TtrpcWireClientOptions {
  /** The server's socket: `unix:///path`, `ttrpc+unix:///path` or a plain `/path`. */
  path: string;
  /** Give up dialling after this long (Code.Unavailable). Default 10000. */
  dialTimeoutMs?: number;
}

/**
 * One call's options.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { WireCallOptions } from "@skiff/shim/ttrpc";
 * const options: WireCallOptions = { timeoutMs: 5000, headers: { "containerd-namespace-ttrpc": "default" } };
 * strictEqual(options.timeoutMs, 5000);
 * ```
 */
export interface WireCallOptions {
  /** The call's deadline (sent as `timeout_nano`); DeadlineExceeded when it passes. */
  timeoutMs?: number;
  /** ttrpc metadata. */
  headers?: Record<string, string>;
  /** Stops waiting (nothing more is sent); the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * One outgoing call, as the connection takes it: the ttrpc `Request` envelope's fields.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RawCall } from "@skiff/shim/ttrpc";
 * const call: RawCall = { service: "s", method: "M", payload: new Uint8Array(), timeoutNano: 0n, metadata: [] };
 * strictEqual(call.method, "M");
 * ```
 */
export interface RawCall {
  /** The service's wire name. */
  service: string;
  /** The method's wire name. */
  method: string;
  /** The encoded request. */
  payload: Uint8Array;
  /** Remaining deadline in ns; 0n for none. */
  timeoutNano: bigint;
  /** ttrpc metadata (e.g. `containerd-namespace-ttrpc`). */
  metadata: { key: string; value: string }[];
}

/**
 * A ttrpc client over one multiplexed connection, dialled on first use and again after it
 * dropped.
 *
 * @example Call a method with its codecs
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createServiceImplSpec } from "@connectrpc/connect";
 * import { TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 * import { shimCodec } from "@skiff/shim/proto";
 * import { TtrpcWireClient } from "@skiff/shim/ttrpc";
 *
 * const server = new TtrpcServer().register(
 *   createServiceImplSpec<typeof Task>(Task, { connect: (r) => ({ shimPid: 7, version: r.id }) }),
 *   "containerd.task.v2.Task",
 * );
 * const dir = await Deno.makeTempDir();
 * await server.listen(`${dir}/shim.sock`);
 * const client = new TtrpcWireClient({ path: `${dir}/shim.sock` });
 * const res = await client.call(
 *   "containerd.task.v2.Task",
 *   "Connect",
 *   shimCodec("containerd.task.v2.ConnectRequest"),
 *   shimCodec("containerd.task.v2.ConnectResponse"),
 *   { id: "c1" },
 *   { timeoutMs: 5000 },
 * );
 * strictEqual(res.version, "c1");
 * await client.close();
 * await server.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export class TtrpcWireClient {
  #path: string;
  #dialTimeoutMs: number;
  #conn: ClientConnection | undefined;
  #dialing: Promise<ClientConnection> | undefined;
  #closed = false;

  /**
   * Creates a client; nothing is dialled before the first call.
   *
   * @param options the socket and the dial timeout
   */
  constructor(options: TtrpcWireClientOptions) {
    this.#path = socketPathOf(options.path);
    this.#dialTimeoutMs = options.dialTimeoutMs ?? 10_000;
  }

  /** The socket path dialled. */
  get path(): string {
    return this.#path;
  }

  /**
   * Calls one unary method.
   *
   * @param service the service's wire name
   * @param method the method's wire name
   * @param input the request's codec
   * @param output the response's codec
   * @param message the request
   * @param options deadline, metadata, cancellation
   * @returns the decoded response
   * @throws {ConnectError} the server's status, or Unavailable, DeadlineExceeded, Internal
   */
  async call<I, O>(
    service: string,
    method: string,
    input: WireCodec<I>,
    output: WireCodec<O>,
    message: WireInit<I>,
    options: WireCallOptions = {},
  ): Promise<O> {
    const ms = options.timeoutMs;
    const deadline = ms === undefined ? undefined : AbortSignal.timeout(ms);
    const signals = [options.signal, deadline].filter((s) => s !== undefined);
    const signal = signals.length === 1 ? signals[0] : AbortSignal.any(signals);
    const metadata = Object.entries(options.headers ?? {}).map(([key, value]) => ({ key, value }));
    let res: Response;
    try {
      res = await this.callRaw({
        service,
        method,
        payload: input.encode(message),
        timeoutNano: ms === undefined ? 0n : BigInt(Math.max(1, Math.round(ms * 1e6))),
        metadata,
      }, signal);
    } catch (err) {
      if (deadline?.aborted && err === deadline.reason) {
        throw statusError(
          `${service}/${method} to ${this.#path}: no answer within ${ms} ms`,
          Code.DeadlineExceeded,
        );
      }
      throw err;
    }
    if (res.status !== undefined && res.status.code !== 0) throw statusErrorOf(res.status);
    try {
      return output.decode(res.payload);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      throw statusError(
        `cannot decode ${output.typeName} from ${service}/${method}: ${msg}`,
        Code.Internal,
      );
    }
  }

  /**
   * Sends one request on the shared connection and resolves with its Response.
   *
   * @param req the request's envelope fields
   * @param signal stops waiting when aborted
   * @returns the Response, whatever its status
   */
  async callRaw(
    req: RawCall,
    signal: AbortSignal = new AbortController().signal,
  ): Promise<Response> {
    const conn = await this.#connection(signal);
    return await conn.call(req, signal);
  }

  /** Closes the connection; calls waiting fail Unavailable and later calls too. */
  close(): Promise<void> {
    this.#closed = true;
    this.#conn?.close(
      statusError(`ttrpc client of ${this.#path} closed`, Code.Unavailable),
    );
    this.#conn = undefined;
    return Promise.resolve();
  }

  /** The shared connection, dialled on first use and again after it dropped. */
  #connection(signal: AbortSignal): Promise<ClientConnection> {
    if (this.#closed) {
      return Promise.reject(
        statusError(`ttrpc client of ${this.#path} is closed`, Code.Unavailable),
      );
    }
    if (this.#conn?.usable) return Promise.resolve(this.#conn);
    if (signal.aborted) return Promise.reject(signal.reason);
    if (!this.#dialing) {
      this.#dialing = this.#dial().finally(() => this.#dialing = undefined);
      // Every waiter handles the outcome below; a dial whose waiters all gave up must not
      // surface as an unhandled rejection (Deno would end the process: the shim).
      this.#dialing.catch(() => {});
    }
    // One caller giving up must not cancel a dial other callers share: race only this wait.
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      this.#dialing!.then(resolve, reject).finally(() =>
        signal.removeEventListener("abort", onAbort)
      );
    });
  }

  async #dial(): Promise<ClientConnection> {
    const path = this.#path;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const connecting = Deno.connect({ transport: "unix", path });
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(
          statusError(
            `${TTRPC_DIAL_FAILED} ${path}: timed out after ${this.#dialTimeoutMs} ms`,
            Code.Unavailable,
          ),
        );
      }, this.#dialTimeoutMs);
    });
    let conn: Deno.UnixConn;
    try {
      conn = await Promise.race([connecting, timeout]);
    } catch (err) {
      // A connect that completes after the timeout must not leak its socket.
      connecting.then((c) => c.close(), () => {});
      if (isStatusError(err)) throw err;
      const msg = err instanceof Error ? err.message : String(err);
      throw statusError(`${TTRPC_DIAL_FAILED} ${path}: ${msg}`, Code.Unavailable);
    } finally {
      clearTimeout(timer);
    }
    if (this.#closed) {
      conn.close();
      throw statusError(`ttrpc client of ${path} is closed`, Code.Unavailable);
    }
    const c = new ClientConnection(conn, path, (gone) => {
      if (this.#conn === gone) this.#conn = undefined;
    });
    this.#conn = c;
    return c;
  }
}
