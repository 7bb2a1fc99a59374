/**
 * Internal: one accepted ttrpc connection on the server side. Reads frames, enforces
 * containerd/ttrpc's stream rules with the same codes and messages as the Go server, runs
 * unary handlers concurrently and writes their responses as they finish (out of order,
 * matched by stream id).
 *
 * @module
 */

import type { DescMethod, DescService } from "@bufbuild/protobuf";
import type {
  Code as ConnectCode,
  HandlerContext,
  Interceptor,
  UnaryRequest,
  UnaryResponse,
} from "@connectrpc/connect";
import { type ControlledHandlerContext, handlerContext } from "./_handler_context.ts";
import { Code, statusError, TTRPC_SHUTTING_DOWN } from "./status_error.ts";
import type { Request } from "../../proto/gen/ttrpc/request_pb.ts";
import type { Status } from "../../proto/gen/google/rpc/status_pb.ts";
import { shimCodec } from "../../proto/shim_wire.ts";
import {
  type DecodedFrame,
  encodeFrame,
  FrameDecoder,
  FrameType,
  MAX_PAYLOAD_LENGTH,
} from "./frame.ts";
import { FrameWriter } from "./_frame_writer.ts";
import { statusOf } from "./status.ts";

/**
 * One servable method, however its messages are coded: from a Connect implementation
 * (protobuf-es schemas) or from wire codecs (`TtrpcServer.registerWire`).
 */
export interface Route {
  /** The method's descriptor, as handler contexts and interceptors see it. */
  method: DescMethod;
  /** Only unary methods are served; others are answered Unimplemented. */
  kind: "unary" | "streaming";
  /** Decodes the request payload; throws (or rejects) when it is malformed. */
  decode(bytes: Uint8Array): unknown;
  /** Completes a handler's answer into a message (defaults filled in), for interceptors. */
  complete(output: unknown): unknown;
  /** Encodes the answer. */
  encode(output: unknown): Uint8Array | Promise<Uint8Array>;
  /** The handler. */
  impl(input: unknown, ctx: HandlerContext): unknown;
}

/** A registered service: its descriptor, and its methods by wire (proto) name. */
export interface ServiceEntry {
  service: DescService;
  methods: Map<string, Route>;
}

/** A service registered lazily: its implementation is loaded on its first request. */
export interface LazyServiceEntry {
  load(): Promise<ServiceEntry>;
}

/** What a connection needs from its server. */
export interface ConnectionContext {
  services: ReadonlyMap<string, ServiceEntry | LazyServiceEntry>;
  interceptors: readonly Interceptor[];
  onError(err: unknown): void;
  /** Most calls running at once; more are answered ResourceExhausted. */
  maxCalls: number;
  /** The first frame, and any frame once started, must complete within this long. */
  frameTimeoutMs: number;
  /** A write that makes no progress for this long closes the connection. */
  writeTimeoutMs: number;
}

/**
 * What one connection carries across a live upgrade (sdk/shim/upgrade): the code that continues
 * it dispatches `replay` first (requests taken but not answered, in stream order), then decodes
 * `partial` (a frame begun but not complete) ahead of what it reads from the socket.
 */
export interface ConnectionCarry {
  /** The highest stream id taken; later requests must be above it. */
  lastStreamId: number;
  /** `ttrpc.Request` payloads, by stream id, to dispatch as if they had just arrived. */
  replay: { id: number; payload: Uint8Array }[];
  /** The bytes of the frame in progress. */
  partial: Uint8Array;
}

/** Which calls a held connection carries over instead of waiting for them (e.g. `Wait`). */
export type CarriedCall = (service: string, method: string) => boolean;

/** Read buffer size; frames larger than this arrive over several reads. */
const READ_CHUNK = 32 * 1024;
/**
 * Stop reading requests while this many response bytes wait to be written (backpressure): a
 * peer that sends requests and never reads the answers holds at most this much (plus one
 * answer) until the write timeout closes it.
 */
const WRITE_HIGH_WATER = 1 << 20;
/** setTimeout cannot express longer delays; such deadlines are treated as none. */
const MAX_TIMER_MS = 2_147_483_647;

/** Converts `timeout_nano` into the handler's timeout; 0 means none, negative already expired. */
function timeoutMsOf(timeoutNano: bigint): number | undefined {
  if (timeoutNano === 0n) return undefined;
  if (timeoutNano < 0n) return 0;
  const ms = Math.ceil(Number(timeoutNano) / 1e6);
  return ms > MAX_TIMER_MS ? undefined : ms;
}

function headersOf(req: Request): Headers {
  const headers = new Headers();
  for (const kv of req.metadata) {
    try {
      headers.append(kv.key, kv.value);
    } catch {
      // A key or value Headers cannot hold (ttrpc allows any string): not representable, skipped.
    }
  }
  return headers;
}

const REQUEST = shimCodec("ttrpc.Request");
const RESPONSE = shimCodec("ttrpc.Response");

function responseFrame(id: number, status: Status | undefined, payload?: Uint8Array): Uint8Array {
  let bytes = RESPONSE.encode({ status, payload });
  if (bytes.length > MAX_PAYLOAD_LENGTH) {
    const err = statusError(
      `response of ${bytes.length} bytes exceeds maximum message size of ${MAX_PAYLOAD_LENGTH}`,
      Code.ResourceExhausted,
    );
    bytes = RESPONSE.encode({ status: statusOf(err) });
  }
  return encodeFrame(id, FrameType.Response, 0, bytes);
}

/**
 * The part of a connection the server uses: any ordered, reliable byte stream (a socket, or a
 * virtio-serial port in a VM guest).
 */
export type ByteStream = Pick<Deno.Conn, "read" | "write" | "close">;

/** Serves one connection until the peer leaves or the server closes it. */
export class ServerConnection {
  #conn: ByteStream;
  #ctx: ConnectionContext;
  #writer: FrameWriter;
  #decoder = new FrameDecoder();
  #lastStreamId = 0;
  #inFlight = new Map<number, ControlledHandlerContext>();
  /** Requests whose lazily loaded service is still loading. */
  #loading = 0;
  #draining = false;
  #closed = false;
  #madeCalls = false;
  /** Set while held for a live upgrade: which calls are carried rather than awaited. */
  #carried: CarriedCall | undefined;
  /** Requests taken while held, and answers of carried calls kept back while held. */
  #held: { id: number; payload: Uint8Array; req: Request }[] = [];
  #deferred: { id: number; payload: Uint8Array; frame: Uint8Array }[] = [];
  #calls = new Map<number, Request>();
  #carry: ConnectionCarry | undefined;
  /** Closes a connection whose first frame, or a started frame, does not complete in time. */
  #frameTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(conn: ByteStream, ctx: ConnectionContext, carry?: ConnectionCarry) {
    this.#conn = conn;
    this.#ctx = ctx;
    this.#carry = carry;
    if (carry) this.#lastStreamId = carry.lastStreamId;
    this.#writer = new FrameWriter(conn, (err) => {
      ctx.onError(err);
      this.#close(statusError("ttrpc connection failed while writing", Code.Canceled));
    }, ctx.writeTimeoutMs);
    this.#armFrameTimer("sent no complete frame");
  }

  /** True once a request reached a registered service (containerd's connections do at once). */
  get madeCalls(): boolean {
    return this.#madeCalls;
  }

  /** Number of calls whose handlers are still running. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Reads and dispatches until the connection ends; resolves when it is closed. */
  async run(): Promise<void> {
    const buf = new Uint8Array(READ_CHUNK);
    try {
      if (this.#carry) this.#resumeCarry(this.#carry);
      while (!this.#closed) {
        if (this.#writer.queuedBytes > WRITE_HIGH_WATER) await this.#writer.drained();
        const n = await this.#conn.read(buf);
        if (n === null) break;
        const frames = this.#decoder.push(buf.subarray(0, n));
        for (const frame of frames) this.#onFrame(frame);
        // The clock runs from the start of a frame (or of the connection) to its end, and is
        // not re-armed by later bytes: a peer trickling one byte at a time gains nothing.
        if (frames.length > 0 && this.#frameTimer !== undefined) {
          clearTimeout(this.#frameTimer);
          this.#frameTimer = undefined;
        }
        if (this.#decoder.partial && this.#frameTimer === undefined) {
          this.#armFrameTimer("left a frame incomplete");
        }
      }
    } catch (err) {
      if (!this.#closed && !(err instanceof Deno.errors.BadResource)) this.#ctx.onError(err);
    }
    // The peer is gone (or we closed): like Go, cancel what its calls are still doing.
    this.#close(statusError("ttrpc connection closed", Code.Canceled));
  }

  /**
   * Holds the connection for a live upgrade: requests that arrive from now on are kept, not
   * dispatched, and answers of `carried` calls are kept back. {@linkcode quiet} tells when only
   * carried calls are running and every answer is written; {@linkcode carry} then says what the
   * next code must continue with; {@linkcode release} undoes the hold (the upgrade failed).
   *
   * @param carried the calls carried over instead of awaited
   */
  hold(carried: CarriedCall): void {
    this.#carried = carried;
  }

  /** True when held, every running call is carried and nothing waits to be written. */
  get quiet(): boolean {
    if (!this.#carried || !this.#writer.idle || this.#loading > 0) return false;
    for (const id of this.#inFlight.keys()) {
      const req = this.#calls.get(id);
      if (!req || !this.#carried(req.service, req.method)) return false;
    }
    return true;
  }

  /**
   * What the next code continues with, taken synchronously right before the process image is
   * replaced; `undefined` when the connection cannot be handed over now (an oversized frame is
   * being skipped).
   */
  carry(): ConnectionCarry | undefined {
    const partial = this.#decoder.pendingBytes();
    if (partial === undefined) return undefined;
    const replay = new Map<number, Uint8Array>();
    for (const id of this.#inFlight.keys()) {
      const req = this.#calls.get(id);
      if (req) replay.set(id, REQUEST.encode(req));
    }
    for (const d of this.#deferred) replay.set(d.id, d.payload);
    for (const h of this.#held) replay.set(h.id, h.payload);
    return {
      lastStreamId: this.#lastStreamId,
      replay: [...replay].sort(([a], [b]) => a - b).map(([id, payload]) => ({ id, payload })),
      partial,
    };
  }

  /** Ends a hold: kept answers are written and kept requests dispatched, in order. */
  release(): void {
    if (!this.#carried) return;
    this.#carried = undefined;
    const deferred = this.#deferred.splice(0);
    const held = this.#held.splice(0);
    for (const d of deferred) if (!this.#closed) this.#writer.send(d.frame);
    for (const h of held) this.#onRequest(h.id, h.req);
  }

  #resumeCarry(carry: ConnectionCarry): void {
    this.#carry = undefined;
    // Not a new peer: it made calls to the previous code. No first-frame deadline (containerd
    // may stay silent for hours), unless a frame is half-way.
    this.#madeCalls = true;
    clearTimeout(this.#frameTimer);
    this.#frameTimer = undefined;
    for (const r of carry.replay) {
      let req: Request;
      try {
        req = REQUEST.decode(r.payload);
      } catch (err) {
        this.#ctx.onError(err);
        continue;
      }
      this.#onRequest(r.id, req);
    }
    for (const frame of this.#decoder.push(carry.partial)) this.#onFrame(frame);
    if (this.#decoder.partial) this.#armFrameTimer("left a frame incomplete");
  }

  /** Stops taking new calls; closes once running calls have answered. */
  drain(): void {
    this.#draining = true;
    this.#closeIfDrained();
  }

  /** Closes now; running handlers see their signal abort with `reason`. */
  abort(reason: unknown): void {
    this.#close(reason);
  }

  #armFrameTimer(what: string): void {
    const ms = this.#ctx.frameTimeoutMs;
    this.#frameTimer = setTimeout(() => {
      this.#frameTimer = undefined;
      const err = statusError(
        `ttrpc connection closed: the peer ${what} within ${ms} ms`,
        Code.DeadlineExceeded,
      );
      this.#ctx.onError(err);
      this.#close(err);
    }, ms);
    Deno.unrefTimer(this.#frameTimer as unknown as number);
  }

  #close(reason: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#frameTimer);
    this.#frameTimer = undefined;
    this.#writer.close();
    for (const ctx of this.#inFlight.values()) ctx.abort(reason);
    this.#inFlight.clear();
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
  }

  #closeIfDrained(): void {
    if (!this.#draining || this.#closed || this.#inFlight.size > 0) return;
    void this.#writer.drained().then(() => {
      if (this.#inFlight.size === 0) {
        this.#close(statusError("ttrpc server closed", Code.Unavailable));
      }
    });
  }

  #sendStatus(id: number, code: ConnectCode, message: string): void {
    if (this.#closed) return;
    this.#writer.send(responseFrame(id, statusOf(statusError(message, code))));
  }

  #onFrame(frame: DecodedFrame): void {
    const id = frame.header.streamId;
    if (frame.oversized) {
      return this.#sendStatus(
        id,
        Code.ResourceExhausted,
        `message length ${frame.header.length} exceed maximum message size of ${MAX_PAYLOAD_LENGTH}`,
      );
    }
    if (id % 2 !== 1) {
      return this.#sendStatus(
        id,
        Code.InvalidArgument,
        "StreamID must be odd for client initiated streams",
      );
    }
    if (frame.header.type === FrameType.Data) {
      // Only unary calls are dispatched, and they take no Data frames: an active stream
      // ignores them; an unknown one gets Go's answer.
      if (!this.#inFlight.has(id)) {
        this.#sendStatus(id, Code.InvalidArgument, "StreamID is no longer active");
      }
      return;
    }
    // Responses from a client and unknown types are ignored, for future compatibility.
    if (frame.header.type !== FrameType.Request) return;
    if (id <= this.#lastStreamId) {
      return this.#sendStatus(
        id,
        Code.InvalidArgument,
        "StreamID cannot be re-used and must increment",
      );
    }
    this.#lastStreamId = id;
    let req: Request;
    try {
      req = REQUEST.decode(frame.payload);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      return this.#sendStatus(id, Code.InvalidArgument, `unmarshal request error: ${msg}`);
    }
    if (this.#carried) {
      this.#held.push({ id, payload: frame.payload!, req });
      return;
    }
    this.#onRequest(id, req);
  }

  #onRequest(id: number, req: Request): void {
    if (this.#draining) {
      return this.#sendStatus(id, Code.Unavailable, TTRPC_SHUTTING_DOWN);
    }
    const service = this.#ctx.services.get(req.service);
    if (service === undefined) {
      return this.#sendStatus(id, Code.Unimplemented, `service ${req.service}`);
    }
    this.#madeCalls = true;
    if (this.#inFlight.size >= this.#ctx.maxCalls) {
      return this.#sendStatus(
        id,
        Code.ResourceExhausted,
        `too many calls on this connection: ${this.#inFlight.size} running (the maximum)`,
      );
    }
    if ("load" in service) {
      void this.#loadThenRoute(id, req, service);
      return;
    }
    this.#route(id, req, service);
  }

  async #loadThenRoute(id: number, req: Request, lazy: LazyServiceEntry): Promise<void> {
    let service: ServiceEntry;
    // While its service loads, a request is in no list: a live upgrade must not take the
    // connection as quiet (it would neither answer nor carry the request).
    this.#loading++;
    try {
      service = await lazy.load();
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      return this.#sendStatus(id, Code.Internal, `loading service ${req.service}: ${msg}`);
    } finally {
      this.#loading--;
    }
    if (this.#draining) {
      return this.#sendStatus(id, Code.Unavailable, TTRPC_SHUTTING_DOWN);
    }
    this.#route(id, req, service);
  }

  #route(id: number, req: Request, service: ServiceEntry): void {
    const method = service.methods.get(req.method);
    if (method === undefined) {
      return this.#sendStatus(id, Code.Unimplemented, `method ${req.method}`);
    }
    if (method.kind !== "unary") {
      return this.#sendStatus(
        id,
        Code.Unimplemented,
        `method ${req.method}: ${method.kind} calls are not supported by this server`,
      );
    }
    void this.#dispatch(id, req, service.service, method);
  }

  async #dispatch(id: number, req: Request, service: DescService, method: Route): Promise<void> {
    const url = `/${req.service}/${req.method}`;
    const ctx = handlerContext({
      service,
      method: method.method,
      url,
      timeoutMs: timeoutMsOf(req.timeoutNano),
      requestHeader: headersOf(req),
    });
    this.#inFlight.set(id, ctx);
    this.#calls.set(id, req);
    let frame: Uint8Array;
    try {
      let input;
      try {
        input = await method.decode(req.payload);
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        // Go's generated handlers fail decoding with Internal and this wording.
        throw statusError(`ttrpc: error unmarshalling payload: ${msg}`, Code.Internal);
      }
      const output = this.#ctx.interceptors.length === 0
        ? await method.impl(input, ctx)
        : await this.#intercepted(method, ctx, input, url);
      frame = responseFrame(id, undefined, await method.encode(output));
    } catch (err) {
      frame = responseFrame(id, statusOf(err));
    } finally {
      if (this.#inFlight.get(id) === ctx) this.#inFlight.delete(id);
      this.#calls.delete(id);
      // Completing the call aborts its signal (Connect semantics) and clears the deadline timer.
      ctx.abort();
    }
    if (this.#carried?.(req.service, req.method)) {
      // Held: the next code answers it again from the same state, or release() sends this.
      this.#deferred.push({ id, payload: REQUEST.encode(req), frame });
      return;
    }
    if (!this.#closed) this.#writer.send(frame);
    this.#closeIfDrained();
  }

  /** Runs the handler inside the server interceptors, as Connect's own handlers do. */
  async #intercepted(
    method: Route,
    ctx: HandlerContext,
    input: unknown,
    url: string,
  ): Promise<unknown> {
    let next = async (req: UnaryRequest): Promise<UnaryResponse> => ({
      stream: false,
      service: ctx.service,
      method: method.method as UnaryResponse["method"],
      header: ctx.responseHeader,
      trailer: ctx.responseTrailer,
      message: (await method.complete(await method.impl(req.message, ctx))) as UnaryResponse[
        "message"
      ],
    });
    for (const interceptor of [...this.#ctx.interceptors].reverse()) {
      next = interceptor(next as Parameters<Interceptor>[0]) as typeof next;
    }
    const res = await next({
      stream: false,
      service: ctx.service,
      method: method.method as UnaryRequest["method"],
      requestMethod: "POST",
      url,
      signal: ctx.signal,
      header: ctx.requestHeader,
      contextValues: ctx.values,
      message: input as UnaryRequest["message"],
    });
    return res.message;
  }
}
