import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { StateResponseSchema, Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import {
  type Request,
  RequestSchema,
  ResponseSchema,
} from "../../../proto/gen/ttrpc/request_pb.ts";
import { StatusSchema } from "../../../proto/gen/google/rpc/status_pb.ts";
import { socketPathOf } from "../../../sdk/ttrpc/address.ts";
import { ClientConnection } from "../../../sdk/ttrpc/_client_connection.ts";
import { encodeFrame, FrameDecoder, FrameFlags, FrameType } from "../../../sdk/ttrpc/frame.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { spawnTaskServer, tempSocket } from "../../fixtures/ttrpc/helpers.ts";

const NS_KEY = "containerd-namespace-ttrpc";

/** Marks rejections handled now (they may come before the test awaits them); replays them later. */
function settle<T>(promises: Promise<T>[]): Array<() => Promise<T>> {
  for (const p of promises) p.catch(() => {});
  return promises.map((p) => () => p);
}

/** One frame-level connection accepted by {@linkcode FakeServer}. */
class FakeConn {
  conn: Deno.Conn;
  #decoder = new FrameDecoder();
  #queue: Array<{ id: number; type: number; flags: number; req?: Request }> = [];
  #buf = new Uint8Array(65536);
  constructor(conn: Deno.Conn) {
    this.conn = conn;
  }
  /** Next request frame (decoded) the client sent; null at EOF. */
  async next(): Promise<{ id: number; type: number; flags: number; req?: Request } | null> {
    while (this.#queue.length === 0) {
      const n = await this.conn.read(this.#buf).catch(() => null);
      if (n === null) return null;
      for (const f of this.#decoder.push(this.#buf.subarray(0, n))) {
        if (f.oversized) throw new Error("oversized frame from client");
        this.#queue.push({
          id: f.header.streamId,
          type: f.header.type,
          flags: f.header.flags,
          req: f.header.type === FrameType.Request
            ? fromBinary(RequestSchema, f.payload)
            : undefined,
        });
      }
    }
    return this.#queue.shift()!;
  }
  async write(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) off += await this.conn.write(bytes.subarray(off));
  }
  /** Answers a State call on `id` with a StateResponse naming `id`. */
  respondState(
    id: number,
    stateId: string,
    status?: { code: number; message: string },
  ): Promise<void> {
    const payload = status
      ? new Uint8Array()
      : toBinary(StateResponseSchema, create(StateResponseSchema, { id: stateId }));
    const res = create(ResponseSchema, {
      payload,
      status: status ? create(StatusSchema, status) : undefined,
    });
    return this.write(encodeFrame(id, FrameType.Response, 0, toBinary(ResponseSchema, res)));
  }
  close(): void {
    try {
      this.conn.close();
    } catch { /* closed */ }
  }
}

/** A hand-driven ttrpc server: tests see and answer raw frames. */
class FakeServer {
  listener: Deno.UnixListener;
  path: string;
  #sock: { remove(): Promise<void> };
  #conns: FakeConn[] = [];
  private constructor(
    listener: Deno.UnixListener,
    path: string,
    sock: { remove(): Promise<void> },
  ) {
    this.listener = listener;
    this.path = path;
    this.#sock = sock;
  }
  static async start(): Promise<FakeServer> {
    const sock = await tempSocket();
    return new FakeServer(Deno.listen({ transport: "unix", path: sock.path }), sock.path, sock);
  }
  async accept(): Promise<FakeConn> {
    const c = new FakeConn(await this.listener.accept());
    this.#conns.push(c);
    return c;
  }
  async [Symbol.asyncDispose](): Promise<void> {
    for (const c of this.#conns) c.close();
    try {
      this.listener.close();
    } catch { /* closed */ }
    await this.#sock.remove();
  }
}

Deno.test("socketPathOf() accepts unix://, ttrpc+unix:// and plain paths", () => {
  assert.equal(socketPathOf("unix:///run/containerd/s/ab"), "/run/containerd/s/ab");
  assert.equal(socketPathOf("ttrpc+unix:///run/x.sock"), "/run/x.sock");
  assert.equal(socketPathOf("ttrpc+unix:///run/x.sock?streaming_id=3"), "/run/x.sock");
  assert.equal(
    socketPathOf("/run/containerd/containerd.sock.ttrpc"),
    "/run/containerd/containerd.sock.ttrpc",
  );
  assert.equal(socketPathOf(" unix:///a\n"), "/a");
  for (const bad of ["vsock://3:1024", "grpc+unix:///x", "", "unix://"]) {
    assert.throws(
      () => socketPathOf(bad),
      (e: unknown) => e instanceof ConnectError && e.code === Code.InvalidArgument,
      bad,
    );
  }
});

Deno.test("createTtrpcTransport() dials all three address forms", async () => {
  await using fake = await FakeServer.start();
  for (const path of [fake.path, `unix://${fake.path}`, `ttrpc+unix://${fake.path}`]) {
    await using transport = createTtrpcTransport({ path });
    const call = createClient(Task, transport).state({ id: path });
    const conn = await fake.accept();
    const f = await conn.next();
    await conn.respondState(f!.id, f!.req!.service);
    assert.equal((await call).id, "containerd.task.v2.Task");
  }
});

Deno.test("createTtrpcTransport() multiplexes concurrent calls on one connection with odd increasing ids", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const calls = Array.from({ length: 50 }, (_, i) => task.state({ id: `c${i}` }));
  const conn = await fake.accept();
  const frames = [];
  for (let i = 0; i < 50; i++) frames.push((await conn.next())!);
  assert.deepEqual(frames.map((f) => f.id), Array.from({ length: 50 }, (_, i) => 1 + 2 * i));
  assert.ok(frames.every((f) => f.type === FrameType.Request && f.flags === 0));
  // Answer in reverse: each call still gets its own response.
  for (const f of frames.toReversed()) {
    const req = f.req!;
    assert.equal(req.service, "containerd.task.v2.Task");
    assert.equal(req.method, "State");
    await conn.respondState(f.id, `answer-${f.id}`);
  }
  const results = await Promise.all(calls);
  assert.deepEqual(results.map((r) => r.id), frames.map((f) => `answer-${f.id}`));
});

Deno.test("createTtrpcTransport() sends the deadline as timeout_nano and headers as metadata", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const a = task.state({ id: "a" }, {
    timeoutMs: 3000,
    headers: { [NS_KEY]: "skiff-test", "x-k": "v" },
  });
  const conn = await fake.accept();
  const fa = (await conn.next())!;
  const ns = fa.req!.timeoutNano;
  assert.ok(ns > 0n && ns <= 3_000_000_000n, `timeout_nano ${ns}`);
  assert.deepEqual(
    fa.req!.metadata.map((kv) => [kv.key, kv.value]).sort(),
    [[NS_KEY, "skiff-test"], ["x-k", "v"]],
  );
  await conn.respondState(fa.id, "a");
  await a;
  const b = task.state({ id: "b" });
  const fb = (await conn.next())!;
  assert.equal(fb.req!.timeoutNano, 0n);
  assert.deepEqual(fb.req!.metadata, []);
  await conn.respondState(fb.id, "b");
  await b;
});

Deno.test("createTtrpcTransport() applies defaultTimeoutMs and interceptors", async () => {
  await using fake = await FakeServer.start();
  const seen: string[] = [];
  const interceptor: Interceptor = (next) => (req) => {
    req.header.set(NS_KEY, "from-interceptor");
    seen.push(req.url);
    return next(req);
  };
  await using transport = createTtrpcTransport({
    path: fake.path,
    defaultTimeoutMs: 1234,
    interceptors: [interceptor],
  });
  const call = createClient(Task, transport).state({ id: "x" });
  const conn = await fake.accept();
  const f = (await conn.next())!;
  assert.ok(f.req!.timeoutNano > 0n && f.req!.timeoutNano <= 1_234_000_000n);
  assert.equal(f.req!.metadata.find((kv) => kv.key === NS_KEY)?.value, "from-interceptor");
  await conn.respondState(f.id, "x");
  await call;
  assert.deepEqual(seen, ["/containerd.task.v2.Task/State"]);
});

Deno.test("createTtrpcTransport() turns a non-zero status into a ConnectError with that code", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const call = task.state({ id: "x" });
  const conn = await fake.accept();
  const f = (await conn.next())!;
  await conn.respondState(f.id, "", { code: Code.NotFound, message: "container x not found" });
  await assert.rejects(call, (e: unknown) => {
    assert.ok(e instanceof ConnectError);
    assert.equal(e.code, Code.NotFound);
    assert.equal(e.rawMessage, "container x not found");
    return true;
  });
  // An explicit status with code 0 is success, like an absent one.
  const ok = task.state({ id: "y" });
  const g = (await conn.next())!;
  const res = create(ResponseSchema, {
    status: create(StatusSchema, { code: 0 }),
    payload: toBinary(StateResponseSchema, create(StateResponseSchema, { id: "y" })),
  });
  await conn.write(encodeFrame(g.id, FrameType.Response, 0, toBinary(ResponseSchema, res)));
  assert.equal((await ok).id, "y");
});

Deno.test("createTtrpcTransport() skips Data frames of any flags and unknown frame types", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const call = createClient(Task, transport).state({ id: "x" });
  const conn = await fake.accept();
  const f = (await conn.next())!;
  const junk = [
    encodeFrame(f.id, FrameType.Data, 0, new Uint8Array([1, 2, 3])),
    encodeFrame(
      f.id,
      FrameType.Data,
      FrameFlags.RemoteClosed | FrameFlags.NoData,
      new Uint8Array(),
    ),
    encodeFrame(f.id, FrameType.Data, FrameFlags.RemoteOpen, new Uint8Array(70_000)),
    encodeFrame(f.id, 0x42, 0xff, new Uint8Array([9])),
    encodeFrame(f.id + 100, FrameType.Response, 0, new Uint8Array()),
  ];
  for (const j of junk) await conn.write(j);
  await conn.respondState(f.id, "real");
  assert.equal((await call).id, "real");
});

Deno.test("createTtrpcTransport() cancellation stops waiting, sends nothing and ignores the late answer", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const ac = new AbortController();
  const call = task.state({ id: "cancel-me" }, { signal: ac.signal });
  const conn = await fake.accept();
  const f1 = (await conn.next())!;
  ac.abort();
  await assert.rejects(call, (e: unknown) => e instanceof ConnectError && e.code === Code.Canceled);
  // The late answer to the cancelled call is dropped; the next call gets its own.
  await conn.respondState(f1.id, "late");
  const next = task.state({ id: "next" });
  const f2 = (await conn.next())!;
  // Nothing was sent for the cancellation: the frame after the first request is the second.
  assert.equal(f2.type, FrameType.Request);
  assert.equal(f2.id, f1.id + 2);
  await conn.respondState(f2.id, "next");
  assert.equal((await next).id, "next");
});

Deno.test("createTtrpcTransport() fails in-flight calls with Unavailable when the connection drops, then redials", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const calls = settle([task.state({ id: "1" }), task.state({ id: "2" })]);
  const conn = await fake.accept();
  await conn.next();
  await conn.next();
  conn.close();
  for (const c of calls) {
    await assert.rejects(
      c(),
      (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable,
    );
  }
  const again = task.state({ id: "3" });
  const conn2 = await fake.accept();
  const f = (await conn2.next())!;
  assert.equal(f.id, 1, "a new connection starts again at stream id 1");
  await conn2.respondState(f.id, "3");
  assert.equal((await again).id, "3");
});

Deno.test("createTtrpcTransport() reports an undialable socket as Unavailable and a closed transport likewise", async () => {
  const sock = await tempSocket();
  try {
    const transport = createTtrpcTransport({ path: sock.path });
    await assert.rejects(
      createClient(Task, transport).state({ id: "x" }),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.Unavailable &&
        e.rawMessage.includes(sock.path),
    );
    await transport.close();
    await assert.rejects(
      createClient(Task, transport).state({ id: "x" }),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.Unavailable && /closed/.test(e.rawMessage),
    );
  } finally {
    await sock.remove();
  }
});

Deno.test("createTtrpcTransport() close() fails calls in flight with Unavailable", async () => {
  await using fake = await FakeServer.start();
  const transport = createTtrpcTransport({ path: fake.path });
  const call = createClient(Task, transport).state({ id: "x" });
  const conn = await fake.accept();
  await conn.next();
  await transport.close();
  await assert.rejects(
    call,
    (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable,
  );
  assert.equal(await conn.next(), null, "the server sees the connection close");
});

Deno.test("createTtrpcTransport() stream() is Unimplemented", async () => {
  await using transport = createTtrpcTransport({ path: "/nonexistent.sock" });
  await assert.rejects(
    transport.stream(
      Task.method.state as never,
      undefined,
      undefined,
      undefined,
      (async function* () {})(),
    ),
    (e: unknown) => e instanceof ConnectError && e.code === Code.Unimplemented,
  );
});

Deno.test("createTtrpcTransport() fails a call whose response frame is over 4 MiB with ResourceExhausted", async () => {
  await using fake = await FakeServer.start();
  await using transport = createTtrpcTransport({ path: fake.path });
  const task = createClient(Task, transport);
  const call = task.state({ id: "big" });
  const conn = await fake.accept();
  const f = (await conn.next())!;
  const header = new Uint8Array(10);
  new DataView(header.buffer).setUint32(0, (4 << 20) + 1);
  new DataView(header.buffer).setUint32(4, f.id);
  header[8] = FrameType.Response;
  await conn.write(header);
  await conn.write(new Uint8Array((4 << 20) + 1));
  await assert.rejects(
    call,
    (e: unknown) => e instanceof ConnectError && e.code === Code.ResourceExhausted,
  );
  // The connection survives.
  const next = task.state({ id: "after" });
  const g = (await conn.next())!;
  await conn.respondState(g.id, "after");
  assert.equal((await next).id, "after");
});

Deno.test("ClientConnection retires after the last stream id once its call is answered", async () => {
  await using fake = await FakeServer.start();
  const closed = Promise.withResolvers<void>();
  const c = new ClientConnection(
    await Deno.connect({ transport: "unix", path: fake.path }),
    fake.path,
    () => closed.resolve(),
    0xffff_ffff,
  );
  const conn = await fake.accept();
  const call = c.call({
    service: "s",
    method: "m",
    payload: new Uint8Array(),
    timeoutNano: 0n,
    metadata: [],
  }, new AbortController().signal);
  assert.equal(c.usable, false, "no ids left after 0xffffffff");
  const f = (await conn.next())!;
  assert.equal(f.id, 0xffff_ffff);
  await conn.respondState(f.id, "last");
  const res = await call;
  assert.equal(fromBinary(StateResponseSchema, res.payload).id, "last");
  await closed.promise;
  assert.equal(await conn.next(), null, "the retired connection is closed");
});

Deno.test(
  "createTtrpcTransport() fails in-flight calls Unavailable when the server process dies and reconnects after its restart",
  async () => {
    const sock = await tempSocket();
    let child = await spawnTaskServer(sock.path);
    const transport = createTtrpcTransport({ path: sock.path });
    try {
      const task = createClient(Task, transport);
      const first = await task.state({ id: "a" });
      assert.equal(first.pid, child.pid);
      const inflight = settle([task.wait({ id: "a" }), task.wait({ id: "b" })]);
      await task.state({ id: "sync" }); // the waits are on the wire before the kill
      await child.kill();
      for (const c of inflight) {
        await assert.rejects(
          c(),
          (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable,
        );
      }
      // While it is down, calls fail Unavailable (the socket file is stale).
      await assert.rejects(
        task.state({ id: "down" }),
        (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable,
      );
      // The restarted server replaces the stale socket; the same transport reconnects.
      child = await spawnTaskServer(sock.path);
      const again = await task.state({ id: "b" });
      assert.equal(again.pid, child.pid);
      assert.equal(again.bundle, "/bundles/b");
    } finally {
      await transport.close();
      await child.kill();
      await sock.remove();
    }
  },
);

Deno.test("createTtrpcTransport() rejects an already-aborted call without dialing (no stray rejection)", async () => {
  const transport = createTtrpcTransport({ path: "/nonexistent/skiff-no-server.sock" });
  const client = createClient(Task, transport);
  await assert.rejects(
    client.state({ id: "x" }, { signal: AbortSignal.abort() }),
    (e: unknown) => ConnectError.from(e).code === Code.Canceled,
  );
  // A dial started and left unhandled would surface here as an uncaught error.
  await new Promise((r) => setTimeout(r, 50));
  await assert.rejects(
    client.state({ id: "x" }),
    (e: unknown) => ConnectError.from(e).code === Code.Unavailable,
  );
  await transport.close();
});
