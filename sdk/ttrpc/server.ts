/**
 * `TtrpcServer`: serves Connect service implementations over ttrpc, wire-compatible with
 * containerd/ttrpc (Go), on unix sockets.
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~300 lines) is the TtrpcServer
// class (connections live in _server_connection.ts)

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext, Interceptor, ServiceImplSpec } from "@connectrpc/connect";
import { Code, statusError } from "./status_error.ts";
import { setDetailEncoder } from "./status.ts";
import { leanService } from "./lean_descriptor.ts";
import type { WireCodec } from "../../proto/wire_table.ts";
import {
  type ByteStream,
  type LazyServiceEntry,
  type Route,
  ServerConnection,
  type ServiceEntry,
} from "./_server_connection.ts";
import {
  effectiveIds,
  PeerCredentialResolver,
  type PeerCredentials,
  socketName,
} from "./_peer_cred.ts";
import type { CarriedCall, ConnectionCarry } from "./_server_connection.ts";

export type { CarriedCall, ConnectionCarry };

/**
 * A connection as it crosses a live upgrade: its socket (by inode, which names it in
 * `/proc/self/fd`) and what the next code continues with.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CarriedConnection } from "@skiff/shim/ttrpc";
 * const c: CarriedConnection = { inode: 4242, carry: { lastStreamId: 7, replay: [], partial: new Uint8Array() } };
 * strictEqual(c.carry.lastStreamId, 7);
 * ```
 */
export interface CarriedConnection {
  /** The socket's inode. */
  inode: number;
  /** Stream state and requests to replay. */
  carry: ConnectionCarry;
}

/**
 * Options for {@linkcode TtrpcServer}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { TtrpcServerOptions } from "@skiff/shim/ttrpc";
 * const options: TtrpcServerOptions = { requireSameUser: true, onError: console.error };
 * strictEqual(options.requireSameUser, true);
 * ```
 */
export interface TtrpcServerOptions {
  /**
   * Refuse connections from processes whose uid/gid differ from this process's effective
   * uid/gid, like Go shims' `UnixSocketRequireSameUser()`. Needs `--allow-ffi` and `--allow-read`
   * (/proc). Deno hides the descriptor of an accepted connection, so it is located through
   * /proc/net/unix and /proc/self/fd; when that is ambiguous the connection is refused (fail
   * closed). Applies to listeners served with {@linkcode TtrpcServer.listen} and unix listeners
   * given to {@linkcode TtrpcServer.serve}; not to {@linkcode TtrpcServer.serveConn}.
   */
  requireSameUser?: boolean;
  /** Server interceptors, applied to every unary call (first is outermost). */
  interceptors?: Interceptor[];
  /**
   * Receives errors no peer can be told about: failed accepts, refused peers, broken
   * connections. Defaults to ignoring them.
   */
  onError?: (error: unknown) => void;
  /**
   * Most connections served at once (default {@linkcode DEFAULT_MAX_CONNECTIONS}; containerd
   * keeps one or two). A connection over the bound first evicts the oldest connection that has
   * not made a call yet (a peer that connects and idles or sends only garbage); when every
   * connection has made one, the new connection is closed at once, unanswered.
   */
  maxConnections?: number;
  /**
   * Most calls running at once on one connection (default
   * {@linkcode DEFAULT_MAX_CALLS_PER_CONNECTION}); a request over it is answered
   * `ResourceExhausted` without running.
   */
  maxCallsPerConnection?: number;
  /**
   * A connection is closed when its first frame has not arrived, or a frame it started has not
   * been completed, within this long (default {@linkcode DEFAULT_FRAME_TIMEOUT_MS}). An idle
   * connection between frames is never timed out (containerd's sits idle for hours).
   */
  frameTimeoutMs?: number;
  /**
   * A connection is closed when a write to it makes no progress for this long (default
   * {@linkcode DEFAULT_WRITE_TIMEOUT_MS}): a peer that stopped reading its answers. While its
   * answers wait, no more of its requests are read.
   */
  writeTimeoutMs?: number;
  /**
   * Replaces each accepted connection, once its peer passed the check of `requireSameUser` (so
   * its socket inode is known), by a stream the caller owns: the connection is served through
   * what this returns, or as it is when it returns `undefined`. A shim that hands its
   * connections to new code in place uses it so that every read of a connection is one it asked
   * for (a `Deno.Conn` may have taken bytes off the socket for a read it has not delivered yet).
   * `fd` is the connection's descriptor as the check found it (Deno's: valid during the call).
   */
  takeConnection?: (conn: Deno.Conn, inode: number, fd: number) => TtrpcByteStream | undefined;
}

/**
 * What {@linkcode TtrpcServer.serveConn} serves: the `read`, `write` and `close` of a
 * `Deno.Conn`, so that any ordered, reliable byte stream can carry ttrpc.
 *
 * @example A stream that is not a Deno.Conn
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
 * import { createTtrpcTransport, type TtrpcByteStream, TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 *
 * const server = new TtrpcServer().register(
 *   createServiceImplSpec<typeof Task>(Task, { connect: () => ({ shimPid: 7 }) }),
 *   "containerd.task.v2.Task",
 * );
 * // A unix socket stands in for a VM's virtio-serial port: the server sees only the three calls.
 * const dir = await Deno.makeTempDir();
 * const listener = Deno.listen({ transport: "unix", path: `${dir}/port.sock` });
 * const transport = createTtrpcTransport({ path: `${dir}/port.sock` });
 * const answer = createClient(Task, transport).connect({ id: "c1" });
 * const conn = await listener.accept();
 * const port: TtrpcByteStream = {
 *   read: (p) => conn.read(p),
 *   write: (p) => conn.write(p),
 *   close: () => conn.close(),
 * };
 * const served = server.serveConn(port);
 * strictEqual((await answer).shimPid, 7);
 * await transport.close();
 * await server.close();
 * await served;
 * listener.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export type TtrpcByteStream = ByteStream;

/** Default {@linkcode TtrpcServerOptions.maxConnections}. */
export const DEFAULT_MAX_CONNECTIONS = 64;
/** Default {@linkcode TtrpcServerOptions.maxCallsPerConnection}. */
export const DEFAULT_MAX_CALLS_PER_CONNECTION = 1024;
/** Default {@linkcode TtrpcServerOptions.frameTimeoutMs}. */
export const DEFAULT_FRAME_TIMEOUT_MS = 15_000;
/** Default {@linkcode TtrpcServerOptions.writeTimeoutMs}. */
export const DEFAULT_WRITE_TIMEOUT_MS = 30_000;

/**
 * One method for {@linkcode TtrpcServer.registerWire}: its wire name, the codecs of its request
 * and response, and its handler (which may answer with any fields left out).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { WireMethod } from "@skiff/shim/ttrpc";
 * import { shimCodec } from "@skiff/shim/proto";
 * const connect: WireMethod = {
 *   name: "Connect",
 *   input: shimCodec("containerd.task.v2.ConnectRequest"),
 *   output: shimCodec("containerd.task.v2.ConnectResponse"),
 *   impl: () => ({ shimPid: 7 }),
 * };
 * strictEqual(connect.name, "Connect");
 * ```
 */
export interface WireMethod {
  /** The method's name on the wire, e.g. `Create`. */
  readonly name: string;
  /** Decodes the request. */
  // deno-lint-ignore no-explicit-any
  readonly input: WireCodec<any>;
  /** Encodes the response. */
  // deno-lint-ignore no-explicit-any
  readonly output: WireCodec<any>;
  /** The handler: the decoded request and the call's context in, the response's fields out. */
  // deno-lint-ignore no-explicit-any
  impl(request: any, context: HandlerContext): unknown;
}

let protobufEs: Promise<typeof import("@bufbuild/protobuf")> | undefined;

/**
 * protobuf-es's root, loaded when a Connect implementation is registered (which loaded its
 * schemas anyway): imported statically, the root would bring, in a code-split bundle, every
 * descriptor some other lazily loaded module uses into the server's start.
 */
function protobuf(): Promise<typeof import("@bufbuild/protobuf")> {
  return protobufEs ??= import("@bufbuild/protobuf").then((pb) => {
    setDetailEncoder((desc, value) =>
      pb.toBinary(desc, pb.create(desc, value as MessageInitShape<typeof desc>))
    );
    return pb;
  });
}

/** Routes a Connect implementation's methods by their proto name, as ttrpc requests carry. */
function connectEntry(spec: ServiceImplSpec): ServiceEntry {
  const loading = protobuf();
  // Surfaces (as Internal) on the first call if it failed; never unhandled.
  loading.catch(() => {});
  const methods = new Map<string, Route>();
  for (const m of Object.values(spec.methods)) {
    const output = m.method.output;
    const complete = async (o: unknown) =>
      (await loading).create(output, o as MessageInitShape<typeof output>);
    methods.set(m.method.name, {
      method: m.method,
      kind: m.kind === "unary" ? "unary" : "streaming",
      decode: async (bytes) => (await loading).fromBinary(m.method.input, bytes),
      complete,
      encode: async (o) => (await loading).toBinary(output, await complete(o)),
      impl: m.impl as Route["impl"],
    });
  }
  return { service: spec.service, methods };
}

/**
 * Routes wire methods. Handler contexts and interceptors take descriptors: lean ones
 * (lean_descriptor.ts), names only, so nothing loads protobuf-es's reflection.
 */
function wireEntry(typeName: string, list: readonly WireMethod[]): ServiceEntry {
  const lean = leanService(
    typeName,
    list.map((m) => ({ name: m.name, input: m.input.typeName, output: m.output.typeName })),
  );
  const methods = new Map<string, Route>();
  for (const m of list) {
    methods.set(m.name, {
      method: lean.methods.get(m.name)!,
      kind: "unary",
      decode: (bytes) => m.input.decode(bytes),
      complete: (o) => o,
      encode: (o) => m.output.encode(o as object),
      impl: (input, ctx) => m.impl(input, ctx),
    });
  }
  return { service: lean.service, methods };
}

/**
 * Options for {@linkcode TtrpcServer.listen}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { TtrpcListenOptions } from "@skiff/shim/ttrpc";
 * const options: TtrpcListenOptions = { mode: 0o600 };
 * strictEqual(options.mode, 0o600);
 * ```
 */
export interface TtrpcListenOptions {
  /** File mode of the socket. Default 0o600: only the owner (containerd runs as root) connects. */
  mode?: number;
  /**
   * Take the path over from a live socket (one this process inherited across a live upgrade):
   * the new socket is bound beside it and renamed onto the path, so a client's connect never
   * finds no socket there. Default false: a live server at the path is refused.
   */
  replace?: boolean;
}

/**
 * Options for {@linkcode TtrpcServer.close}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { TtrpcCloseOptions } from "@skiff/shim/ttrpc";
 * const options: TtrpcCloseOptions = { timeoutMs: 5000 };
 * strictEqual(options.timeoutMs, 5000);
 * ```
 */
export interface TtrpcCloseOptions {
  /**
   * How long to wait for running calls before aborting them (their signal aborts with
   * `Code.Unavailable`) and closing their connections. Default: wait for them.
   */
  timeoutMs?: number;
}

/**
 * A ttrpc server dispatching to Connect `ServiceImplSpec`s.
 *
 * Per connection, unary calls run concurrently and responses go out as handlers finish,
 * matched by stream id. Protocol violations get the same codes and messages as from Go's
 * server, and the connection keeps working. A hostile peer is bounded: connections, calls per
 * connection, the bytes held for a frame (what arrived, at most 4 MiB) and for answers (reading
 * pauses over 1 MiB), and how long a frame may stay incomplete or a write stuck
 * ({@linkcode TtrpcServerOptions}). Each call's `HandlerContext` carries the ttrpc
 * metadata as `requestHeader` (e.g. `containerd-namespace-ttrpc`), the `timeout_nano` deadline
 * as `timeoutMs` and `signal`, and `signal` also aborts when the client disconnects.
 *
 * @example Serve the Task API under both names containerd uses
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createServiceImplSpec } from "@connectrpc/connect";
 * import { TtrpcServer } from "@skiff/shim/ttrpc";
 * import { TaskService as Task } from "@skiff/shim/proto";
 *
 * const server = new TtrpcServer();
 * server.register(
 *   createServiceImplSpec<typeof Task>(Task, { state: (req) => ({ id: req.id, bundle: "/run/b" }) }),
 *   "containerd.task.v2.Task",
 *   "containerd.task.v3.Task",
 * );
 * const dir = await Deno.makeTempDir(); // containerd passes e.g. /run/containerd/s/0123abcd
 * await server.listen(`${dir}/shim.sock`);
 * strictEqual(Deno.statSync(`${dir}/shim.sock`).isSocket, true);
 * // ... later, e.g. after Task.Shutdown:
 * await server.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export class TtrpcServer {
  #services = new Map<string, ServiceEntry | LazyServiceEntry>();
  #interceptors: Interceptor[];
  #onError: (error: unknown) => void;
  #requireSameUser: boolean;
  #listeners = new Set<Deno.Listener>();
  #ownedPaths = new Set<string>();
  /** In accept order, which eviction relies on (oldest first). */
  #connections = new Map<ServerConnection, Promise<void>>();
  /** Accepted sockets' inodes (known only for listeners with a peer check). */
  #inodes = new Map<ServerConnection, number>();
  #resolvers = new Map<string, PeerCredentialResolver>();
  #carried: CarriedCall | undefined;
  #maxConnections: number;
  #maxCalls: number;
  #frameTimeoutMs: number;
  #writeTimeoutMs: number;
  #takeConnection: TtrpcServerOptions["takeConnection"];
  #closing: Promise<void> | undefined;
  #closed = Promise.withResolvers<void>();

  /**
   * Creates a server with no services; add them with {@linkcode register}.
   *
   * @param options peer check, interceptors and error reporting
   */
  constructor(options: TtrpcServerOptions = {}) {
    this.#interceptors = options.interceptors ?? [];
    this.#onError = options.onError ?? (() => {});
    this.#requireSameUser = options.requireSameUser ?? false;
    this.#maxConnections = options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    this.#maxCalls = options.maxCallsPerConnection ?? DEFAULT_MAX_CALLS_PER_CONNECTION;
    this.#frameTimeoutMs = options.frameTimeoutMs ?? DEFAULT_FRAME_TIMEOUT_MS;
    this.#writeTimeoutMs = options.writeTimeoutMs ?? DEFAULT_WRITE_TIMEOUT_MS;
    this.#takeConnection = options.takeConnection;
  }

  /** Number of connections being served. */
  get connectionCount(): number {
    return this.#connections.size;
  }

  /** Resolves once {@linkcode close} has finished. */
  get closed(): Promise<void> {
    return this.#closed.promise;
  }

  /** The service names registered so far. */
  get serviceNames(): string[] {
    return [...this.#services.keys()];
  }

  /**
   * Registers an implementation under one or more ttrpc service names; with no names, under
   * the service's own full name. One implementation may serve several names (e.g.
   * `containerd.task.v2.Task` and `containerd.task.v3.Task`, which differ only in package).
   *
   * @param spec the implementation, from `createServiceImplSpec(Service, impl)`
   * @param names service names as they appear on the wire
   * @returns this server, for chaining
   * @throws {ConnectError} `AlreadyExists` when a name is taken
   */
  register(spec: ServiceImplSpec, ...names: string[]): this {
    if (names.length === 0) names = [spec.service.typeName];
    for (const name of names) {
      if (this.#services.has(name)) {
        throw statusError(`ttrpc service "${name}" is already registered`, Code.AlreadyExists);
      }
    }
    const entry = connectEntry(spec);
    for (const name of names) this.#services.set(name, entry);
    return this;
  }

  /**
   * Registers methods served from wire codecs rather than from protobuf-es schemas and
   * Connect's `ServiceImplSpec`: a server that registers only these evaluates no generated
   * descriptor (a shim's Task API: see `proto/wire_table.ts`). Handlers get the same
   * `HandlerContext`, and interceptors see the call, with a descriptor that has the method's
   * and service's names (`req.method.name`, `req.service.typeName`) and no schemas.
   *
   * @param typeName the service's full name, e.g. `containerd.task.v2.Task`
   * @param methods the methods, each with its wire name, codecs and handler
   * @param names service names as they appear on the wire (default: `typeName`)
   * @returns this server, for chaining
   * @throws {ConnectError} `AlreadyExists` when a name is taken
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { createClient } from "@connectrpc/connect";
   * import { createTtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
   * import { TaskService as Task } from "@skiff/shim/proto";
   * import { shimCodec } from "@skiff/shim/proto";
   *
   * const server = new TtrpcServer().registerWire("containerd.task.v2.Task", [{
   *   name: "Connect",
   *   input: shimCodec("containerd.task.v2.ConnectRequest"),
   *   output: shimCodec("containerd.task.v2.ConnectResponse"),
   *   impl: (req) => ({ shimPid: 7, version: req.id }),
   * }]);
   * const dir = await Deno.makeTempDir();
   * await server.listen(`${dir}/shim.sock`);
   * const transport = createTtrpcTransport({ path: `${dir}/shim.sock` });
   * strictEqual((await createClient(Task, transport).connect({ id: "c1" })).version, "c1");
   * await transport.close();
   * await server.close();
   * await Deno.remove(dir, { recursive: true });
   * ```
   */
  registerWire(typeName: string, methods: readonly WireMethod[], ...names: string[]): this {
    if (names.length === 0) names = [typeName];
    for (const name of names) {
      if (this.#services.has(name)) {
        throw statusError(`ttrpc service "${name}" is already registered`, Code.AlreadyExists);
      }
    }
    const entry = wireEntry(typeName, methods);
    for (const name of names) this.#services.set(name, entry);
    return this;
  }

  /**
   * Registers a service whose implementation is loaded on its first request (e.g. with
   * `await import`), so a server pays for a service's code and descriptors only once it is
   * used. Requests that arrive while it loads wait for it; a load that fails answers them
   * `Internal` and is retried on the next request.
   *
   * @param load resolves to the implementation, from `createServiceImplSpec(Service, impl)`
   * @param names service names as they appear on the wire (at least one)
   * @returns this server, for chaining
   * @throws {ConnectError} `AlreadyExists` when a name is taken
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { createClient, createServiceImplSpec } from "@connectrpc/connect";
   * import { createTtrpcTransport, TtrpcServer } from "@skiff/shim/ttrpc";
   * import { SandboxService as Sandbox } from "@skiff/shim/proto";
   *
   * let loads = 0;
   * const server = new TtrpcServer().registerLazy(async () => {
   *   loads++; // a real shim imports the service's module here
   *   const { SandboxService } = await import("@skiff/shim/proto");
   *   return createServiceImplSpec<typeof SandboxService>(SandboxService, {
   *     pingSandbox: () => ({}),
   *   });
   * }, "containerd.runtime.sandbox.v1.Sandbox");
   * const dir = await Deno.makeTempDir();
   * await server.listen(`${dir}/shim.sock`);
   * strictEqual(loads, 0); // nothing loaded until the first request
   *
   * const transport = createTtrpcTransport({ path: `${dir}/shim.sock` });
   * const sandbox = createClient(Sandbox, transport);
   * await sandbox.pingSandbox({ sandboxId: "p1" });
   * await sandbox.pingSandbox({ sandboxId: "p1" });
   * strictEqual(loads, 1);
   * await transport.close();
   * await server.close();
   * await Deno.remove(dir, { recursive: true });
   * ```
   */
  registerLazy(load: () => Promise<ServiceImplSpec>, ...names: string[]): this {
    if (names.length === 0) throw new TypeError("registerLazy needs at least one service name");
    for (const name of names) {
      if (this.#services.has(name)) {
        throw statusError(`ttrpc service "${name}" is already registered`, Code.AlreadyExists);
      }
    }
    let loading: Promise<ServiceEntry> | undefined;
    const entry: LazyServiceEntry = {
      load: () => {
        loading ??= load().then((spec) => {
          const loaded = connectEntry(spec);
          for (const name of names) this.#services.set(name, loaded);
          return loaded;
        }, (e) => {
          loading = undefined;
          throw e;
        });
        return loading;
      },
    };
    for (const name of names) this.#services.set(name, entry);
    return this;
  }

  /**
   * Listens on a unix socket and serves it in the background. A stale socket file (nobody
   * accepting) is removed first; the socket gets mode 0600 and is removed again by
   * {@linkcode close}.
   *
   * @param path filesystem path of the socket
   * @param options the socket's file mode
   * @throws {ConnectError} `AlreadyExists` when a live server owns the path, or the path exists
   *   and is not a socket; `FailedPrecondition` when the server is closed
   */
  async listen(path: string, options: TtrpcListenOptions = {}): Promise<void> {
    if (this.#closing) {
      throw statusError(
        `ttrpc server is closed; cannot listen on ${path}`,
        Code.FailedPrecondition,
      );
    }
    const bindAt = options.replace ? `${path}.next` : path;
    await removeStaleSocket(bindAt);
    if (this.#closing) {
      throw statusError(
        `ttrpc server closed while preparing to listen on ${path}`,
        Code.FailedPrecondition,
      );
    }
    const listener = Deno.listen({ transport: "unix", path: bindAt });
    try {
      Deno.chmodSync(bindAt, options.mode ?? 0o600);
      if (bindAt !== path) Deno.renameSync(bindAt, path);
    } catch (err) {
      listener.close();
      try {
        Deno.removeSync(bindAt);
      } catch { /* not created */ }
      throw err;
    }
    this.#ownedPaths.add(path);
    // The listener's own address is the path it was bound at; the peer check must look for
    // sockets accepted from that name.
    void this.serve(listener);
  }

  /**
   * Accepts and serves connections from `listener` until {@linkcode close}. Unlike
   * {@linkcode listen}, the caller owns the socket file.
   *
   * @param listener any stream listener (usually a unix listener)
   * @returns resolves when the listener is closed
   */
  async serve(listener: Deno.Listener): Promise<void> {
    if (this.#closing) {
      listener.close();
      throw statusError(
        "ttrpc server is closed; cannot serve a listener",
        Code.FailedPrecondition,
      );
    }
    this.#listeners.add(listener);
    const path = listener.addr.transport === "unix" ? (listener.addr as Deno.UnixAddr).path : "";
    const peers = this.#requireSameUser && path ? this.#resolver(path) : undefined;
    let backoff = 0;
    try {
      while (!this.#closing) {
        let conn: Deno.Conn;
        try {
          conn = await listener.accept();
          backoff = 0;
        } catch (err) {
          if (this.#closing || err instanceof Deno.errors.BadResource) break;
          // Transient failures (e.g. out of descriptors) back off like Go's server does.
          this.#onError(err);
          backoff = Math.min(1000, backoff === 0 ? 5 : backoff * 2);
          await new Promise((r) => setTimeout(r, backoff));
          continue;
        }
        let inode: number | undefined;
        let fd = -1;
        if (this.#requireSameUser) {
          try {
            ({ inode, fd } = this.#checkPeer(peers));
          } catch (err) {
            this.#onError(err);
            conn.close();
            continue;
          }
        }
        let stream: TtrpcByteStream = conn;
        if (inode !== undefined && this.#takeConnection) {
          try {
            stream = this.#takeConnection(conn, inode, fd) ?? conn;
          } catch (err) {
            this.#onError(err);
            conn.close();
            peers?.release(inode);
            continue;
          }
        }
        void this.#serve(stream, inode).finally(() => {
          if (inode !== undefined) peers?.release(inode);
        });
      }
    } finally {
      this.#listeners.delete(listener);
    }
  }

  /**
   * Serves one already-established connection (e.g. from a custom listener or a socket pair),
   * or any byte stream with `read`, `write` and `close` (a VM guest's virtio-serial port: see
   * examples/vm/agent). It counts against {@linkcode TtrpcServerOptions.maxConnections}.
   *
   * @param conn the connection; closed when it ends
   * @returns resolves when the connection is closed
   */
  serveConn(conn: TtrpcByteStream): Promise<void> {
    return this.#serve(conn);
  }

  /**
   * Serves a connection this process did not accept itself: one inherited across a live
   * upgrade (with its `carry`), or one taken from an inherited listener's backlog. The socket's
   * peer is checked as an accepted one would be.
   *
   * @param conn the byte stream over the socket
   * @param fd the socket's descriptor
   * @param carry what the previous code handed over for it
   * @returns resolves when the connection is closed
   */
  async serveInherited(
    conn: TtrpcByteStream,
    fd: number,
    carry?: ConnectionCarry,
  ): Promise<void> {
    // Attributed under the name it was accepted from, so this listener's next accept is
    // still told apart from it.
    const peers = this.#resolver(socketName(fd) ?? "");
    let inode: number;
    try {
      const adopted = peers.adopt(fd);
      inode = adopted.inode;
      if (this.#requireSameUser) this.#checkCreds(adopted.creds);
    } catch (err) {
      this.#onError(err);
      conn.close();
      return;
    }
    try {
      await this.#serve(conn, inode, carry);
    } finally {
      peers.release(inode);
    }
  }

  /**
   * Holds every connection for a live upgrade (and those accepted from now on): requests are
   * kept, not dispatched, and `carried` calls are not waited for. See {@linkcode quiet},
   * {@linkcode carry} and {@linkcode release}.
   *
   * @param carried the calls carried over instead of awaited (e.g. `Wait`)
   */
  hold(carried: CarriedCall): void {
    this.#carried = carried;
    for (const sc of this.#connections.keys()) sc.hold(carried);
  }

  /** True when held and every connection runs only carried calls and has written everything. */
  get quiet(): boolean {
    if (!this.#carried) return false;
    for (const sc of this.#connections.keys()) if (!sc.quiet) return false;
    return true;
  }

  /**
   * Every connection's state for the next code, taken synchronously right before the process
   * image is replaced.
   *
   * @throws {Error} when a connection cannot be handed over (its socket is unknown, or it is
   *   skipping an oversized frame)
   */
  carry(): CarriedConnection[] {
    const out: CarriedConnection[] = [];
    for (const sc of this.#connections.keys()) {
      const inode = this.#inodes.get(sc);
      if (inode === undefined) {
        throw new Error(
          "a connection without a known socket (served with serveConn) cannot be carried",
        );
      }
      const carry = sc.carry();
      if (!carry) {
        throw new Error(
          `connection on socket inode ${inode} is mid-way through an oversized frame`,
        );
      }
      out.push({ inode, carry });
    }
    return out;
  }

  /** Ends a hold: every connection dispatches what it kept, in order. */
  release(): void {
    this.#carried = undefined;
    for (const sc of this.#connections.keys()) sc.release();
  }

  #resolver(path: string): PeerCredentialResolver {
    let r = this.#resolvers.get(path);
    if (!r) this.#resolvers.set(path, r = new PeerCredentialResolver(path));
    return r;
  }

  async #serve(conn: TtrpcByteStream, inode?: number, carry?: ConnectionCarry): Promise<void> {
    if (this.#closing) {
      conn.close();
      return;
    }
    if (!this.#makeRoom()) {
      conn.close();
      this.#onError(
        statusError(
          `ttrpc server refused a connection: ${this.#connections.size} connections ` +
            `(the maximum) have all made calls`,
          Code.ResourceExhausted,
        ),
      );
      return;
    }
    const sc = new ServerConnection(conn, {
      services: this.#services,
      interceptors: this.#interceptors,
      onError: this.#onError,
      maxCalls: this.#maxCalls,
      frameTimeoutMs: this.#frameTimeoutMs,
      writeTimeoutMs: this.#writeTimeoutMs,
    }, carry);
    if (this.#carried) sc.hold(this.#carried);
    if (inode !== undefined) this.#inodes.set(sc, inode);
    const done = sc.run();
    this.#connections.set(sc, done);
    try {
      await done;
    } finally {
      this.#connections.delete(sc);
      this.#inodes.delete(sc);
    }
  }

  /**
   * Stops accepting, lets running calls answer (new calls on open connections get
   * `Unavailable`), then closes every connection and removes the socket files it created.
   * Idempotent. Do not await it inside a handler: it waits for that handler too.
   *
   * @param options how long to let running calls finish
   * @returns resolves when everything is closed (same as {@linkcode closed})
   */
  close(options: TtrpcCloseOptions = {}): Promise<void> {
    this.#closing ??= this.#close(options.timeoutMs);
    return this.#closing;
  }

  /** Same as {@linkcode close} without a timeout, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #close(timeoutMs: number | undefined): Promise<void> {
    for (const listener of this.#listeners) {
      try {
        listener.close();
      } catch {
        // already closed
      }
    }
    this.#listeners.clear();
    for (const path of this.#ownedPaths) {
      try {
        if (Deno.lstatSync(path).isSocket) Deno.removeSync(path);
      } catch {
        // gone already
      }
    }
    for (const sc of this.#connections.keys()) sc.drain();
    const all = Promise.all(this.#connections.values());
    if (timeoutMs !== undefined) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const expired = new Promise<boolean>((r) => timer = setTimeout(() => r(true), timeoutMs));
      const timedOut = await Promise.race([all.then(() => false), expired]);
      clearTimeout(timer);
      if (timedOut) {
        const reason = statusError("ttrpc server closed", Code.Unavailable);
        for (const sc of this.#connections.keys()) sc.abort(reason);
      }
    }
    await all;
    this.#closed.resolve();
  }

  /** Room for one more connection: true when below the bound or an idle stranger was evicted. */
  #makeRoom(): boolean {
    if (this.#connections.size < this.#maxConnections) return true;
    for (const sc of this.#connections.keys()) {
      if (!sc.madeCalls) {
        // Removed now, not when its run ends, so that a burst evicts a different one each time.
        this.#connections.delete(sc);
        sc.abort(
          statusError(
            `ttrpc connection evicted: ${this.#maxConnections} connections open and it made no call`,
            Code.ResourceExhausted,
          ),
        );
        return true;
      }
    }
    return false;
  }

  #checkPeer(peers: PeerCredentialResolver | undefined): { inode: number; fd: number } {
    if (peers === undefined) {
      throw statusError(
        "ttrpc peer check needs a unix listener with a filesystem path",
        Code.PermissionDenied,
      );
    }
    const { inode, fd, creds } = peers.resolveLatest();
    try {
      this.#checkCreds(creds);
    } catch (err) {
      peers.release(inode);
      throw err;
    }
    return { inode, fd };
  }

  #checkCreds(creds: PeerCredentials): void {
    const self = effectiveIds();
    if (creds.uid !== self.uid || creds.gid !== self.gid) {
      throw statusError(
        `ttrpc peer (pid ${creds.pid}) has uid ${creds.uid} gid ${creds.gid}, expected uid ${self.uid} gid ${self.gid}`,
        Code.PermissionDenied,
      );
    }
  }
}

/** Removes a socket file nobody accepts on; refuses to touch live sockets and other files. */
async function removeStaleSocket(path: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = Deno.lstatSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  if (!info.isSocket) {
    throw statusError(
      `cannot listen on ${path}: it exists and is not a socket`,
      Code.AlreadyExists,
    );
  }
  let live: Deno.Conn | undefined;
  try {
    live = await Deno.connect({ transport: "unix", path });
  } catch {
    // ECONNREFUSED: a leftover from a server that is gone.
  }
  if (live) {
    live.close();
    throw statusError(
      `cannot listen on ${path}: another server accepts connections there`,
      Code.AlreadyExists,
    );
  }
  Deno.removeSync(path);
}
