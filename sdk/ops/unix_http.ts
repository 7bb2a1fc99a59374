/**
 * HTTP over unix sockets, both ways: a server with owner-only permissions that replaces only a
 * stale socket file, and a bounded GET client (Deno's `createHttpClient` with a unix-socket
 * proxy, which Deno 2.9 supports: the request goes to the socket whatever host the URL names).
 *
 * @module
 */

import {
  type BoundedFront,
  MAX_OPS_CONNECTIONS,
  OPS_CONNECTION_MS,
  serveBoundedFront,
} from "./_bounded_front.ts";

/**
 * A running unix-socket HTTP server.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { serveUnixHttp, type UnixHttpServer } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync();
 * const s: UnixHttpServer = await serveUnixHttp(`${dir}/x.ops`, () => new Response("ok"));
 * strictEqual(s.path, `${dir}/x.ops`);
 * await s.close();
 * strictEqual([...Deno.readDirSync(dir)].length, 0); // the socket file is removed
 * Deno.removeSync(dir);
 * ```
 */
export interface UnixHttpServer {
  /** The socket path. */
  readonly path: string;
  /** Stops serving and removes the socket file. */
  close(): Promise<void>;
}

/**
 * Options of {@linkcode serveUnixHttp}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { UnixHttpServerOptions } from "@skiff/shim/ops";
 * const o: UnixHttpServerOptions = { mode: 0o600 };
 * strictEqual(o.mode, 0o600);
 * ```
 */
export interface UnixHttpServerOptions {
  /** File mode of the socket. Default 0o600: only its owner (root, like containerd) connects. */
  mode?: number;
  /** Receives handler errors; the client gets a 500. */
  onError?: (error: unknown) => void;
  /** Connections served at once; more are closed unanswered. Default 16. */
  maxConnections?: number;
  /** Each connection is closed this long after it was accepted. Default 30000. */
  connectionTimeoutMs?: number;
}

async function isLive(path: string): Promise<boolean> {
  try {
    const conn = await Deno.connect({ transport: "unix", path });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Serves `handler` on a unix socket. A socket file nobody accepts on (left by a killed
 * process) is replaced; a live one, or a path that is not a socket, is an error. The socket is
 * bound in a fresh 0700 directory beside `path`, given its mode there and then renamed into
 * place, so it is never reachable with the permissions the umask would give it. At most
 * 16 connections are served at once (more are closed unanswered) and each for at most 30 s,
 * so a peer that connects and idles or sends half a request cannot hold the server.
 *
 * @param path socket path
 * @param handler the fetch handler (e.g. a Hono app's `fetch`)
 * @param opts mode and error sink
 * @returns the server
 * @throws {Deno.errors.AlreadyExists} when a live server owns `path` or it is not a socket
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { serveUnixHttp, unixGet } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync();
 * const s = await serveUnixHttp(`${dir}/x.sock`, () => new Response("hi"));
 * strictEqual(Deno.statSync(`${dir}/x.sock`).mode! & 0o777, 0o600); // owner only
 * strictEqual((await unixGet(`${dir}/x.sock`, "/", { timeoutMs: 5000 })).body, "hi");
 * await s.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export async function serveUnixHttp(
  path: string,
  handler: (req: Request) => Response | Promise<Response>,
  opts: UnixHttpServerOptions = {},
): Promise<UnixHttpServer> {
  let st: Deno.FileInfo | undefined;
  try {
    st = await Deno.lstat(path);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  if (st) {
    if (!st.isSocket) {
      throw new Deno.errors.AlreadyExists(
        `cannot serve on "${path}": it exists and is not a socket`,
      );
    }
    if (await isLive(path)) {
      throw new Deno.errors.AlreadyExists(`cannot serve on "${path}": a live server listens there`);
    }
  }
  const onError = opts.onError;
  const slash = path.lastIndexOf("/");
  const dir = slash > 0 ? path.slice(0, slash) : slash === 0 ? "/" : ".";
  // A short name: sockaddr_un holds 108 bytes, and this path must fit as well as `path`.
  const tmp = await Deno.makeTempDir({ dir, prefix: ".http-" });
  let server: Deno.HttpServer | undefined;
  let front: BoundedFront | undefined;
  try {
    // Deno.serve listens in the private 0700 directory; peers reach it only through the
    // bounded front on `path` (connections at once and their lifetime: _bounded_front.ts).
    server = Deno.serve({
      path: `${tmp}/s`,
      onListen() {},
      onError(e) {
        onError?.(e);
        return new Response("internal error\n", { status: 500 });
      },
    }, handler);
    const listener = Deno.listen({ transport: "unix", path: `${tmp}/p` });
    front = serveBoundedFront(listener, `${tmp}/s`, {
      onError,
      maxConnections: opts.maxConnections ?? MAX_OPS_CONNECTIONS,
      connectionMs: opts.connectionTimeoutMs ?? OPS_CONNECTION_MS,
    });
    await Deno.chmod(`${tmp}/p`, opts.mode ?? 0o600);
    // rename(2) also replaces a stale socket in one step.
    await Deno.rename(`${tmp}/p`, path);
  } catch (e) {
    front?.close();
    await server?.shutdown();
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
    throw e;
  }
  const running = server;
  const runningFront = front;
  let closing: Promise<void> | undefined;
  return {
    path,
    close() {
      closing ??= (async () => {
        // Unlinked first, so nobody new connects while the graceful shutdown runs.
        await Deno.remove(path).catch(() => {});
        runningFront.close();
        await running.shutdown();
        await Deno.remove(tmp, { recursive: true }).catch(() => {});
      })();
      return closing;
    },
  };
}

/**
 * Options of {@linkcode unixGet}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { UnixGetOptions } from "@skiff/shim/ops";
 * const o: UnixGetOptions = { timeoutMs: 2000, maxBytes: 1 << 20 };
 * strictEqual(o.timeoutMs, 2000);
 * ```
 */
export interface UnixGetOptions {
  /** Deadline for connecting, the headers and the whole body. */
  timeoutMs: number;
  /** Largest body accepted. Default 8 MiB. */
  maxBytes?: number;
  /** Request method. Default GET. */
  method?: string;
}

/**
 * The answer of {@linkcode unixGet}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { serveUnixHttp, unixGet, type UnixGetResult } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync();
 * const s = await serveUnixHttp(`${dir}/x.sock`, () => new Response("gone", { status: 404 }));
 * const { status, body }: UnixGetResult = await unixGet(`${dir}/x.sock`, "/healthz", {
 *   timeoutMs: 5000,
 * });
 * strictEqual(status, 404); // any status is an answer, not an error
 * strictEqual(body, "gone");
 * await s.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export interface UnixGetResult {
  /** HTTP status. */
  status: number;
  /** Response headers. */
  headers: Headers;
  /** The body as text. */
  body: string;
}

/**
 * Requests `urlPath` from an HTTP server on a unix socket, with a deadline covering the whole
 * exchange: a server that accepts and then hangs costs at most `timeoutMs`.
 *
 * @param socket socket path
 * @param urlPath path and query, e.g. `/metrics`
 * @param opts deadline and size limit
 * @returns status, headers and body
 * @throws {DOMException} `TimeoutError` past the deadline; a `TypeError` when the socket
 *   refuses; a `RangeError` when the body exceeds `maxBytes`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { serveUnixHttp, unixGet } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync(); // stands in for /run/containerd/s
 * const s = await serveUnixHttp(
 *   `${dir}/ab12.ops`,
 *   (req) => new Response(`up 1 ${new URL(req.url).pathname}\n`),
 * );
 * const r = await unixGet(`${dir}/ab12.ops`, "/metrics", { timeoutMs: 5000 });
 * strictEqual(r.body, "up 1 /metrics\n");
 * await s.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export async function unixGet(
  socket: string,
  urlPath: string,
  opts: UnixGetOptions,
): Promise<UnixGetResult> {
  const client = Deno.createHttpClient({ proxy: { transport: "unix", path: socket } });
  const signal = AbortSignal.timeout(opts.timeoutMs);
  const max = opts.maxBytes ?? 8 << 20;
  try {
    const res = await fetch(`http://localhost${urlPath}`, {
      client,
      signal,
      method: opts.method ?? "GET",
    });
    const chunks: Uint8Array[] = [];
    let size = 0;
    if (res.body) {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.length;
        if (size > max) {
          await reader.cancel().catch(() => {});
          throw new RangeError(`response from "${socket}" exceeds ${max} bytes`);
        }
        chunks.push(value);
      }
    }
    const body = new Uint8Array(size);
    let off = 0;
    for (const c of chunks) {
      body.set(c, off);
      off += c.length;
    }
    return { status: res.status, headers: res.headers, body: new TextDecoder().decode(body) };
  } finally {
    client.close();
  }
}
