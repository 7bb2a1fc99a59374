// The server against hostile or broken clients speaking raw bytes on the socket.
import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  StateRequestSchema,
  StateResponseSchema,
  Task,
} from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import type { Response } from "../../../proto/gen/ttrpc/request_pb.ts";
import { encodeFrame, FrameFlags, FrameType } from "../../../sdk/ttrpc/frame.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { RawClient, requestBytes, startTaskServer } from "../../fixtures/ttrpc/helpers.ts";

const SVC = "containerd.task.v2.Task";

function stateRequest(id: string): Uint8Array {
  return toBinary(StateRequestSchema, create(StateRequestSchema, { id }));
}

function stateFrame(streamId: number, id: string): Uint8Array {
  return encodeFrame(
    streamId,
    FrameType.Request,
    0,
    requestBytes({ service: SVC, method: "State", payload: stateRequest(id) }),
  );
}

function header(length: number, streamId: number, type: number, flags = 0): Uint8Array {
  const h = new Uint8Array(10);
  const v = new DataView(h.buffer);
  v.setUint32(0, length);
  v.setUint32(4, streamId);
  h[8] = type;
  h[9] = flags;
  return h;
}

function assertStatus(res: Response, code: Code, message: string | RegExp): void {
  assert.ok(res.status, "expected an error status");
  assert.equal(res.status.code, code, res.status.message);
  if (typeof message === "string") assert.equal(res.status.message, message);
  else assert.match(res.status.message, message);
}

function stateId(res: Response): string {
  assert.equal(res.status, undefined, res.status?.message);
  return fromBinary(StateResponseSchema, res.payload).id;
}

/** Starts the server used by every test: State echoes, Wait blocks until its signal aborts. */
async function server() {
  const aborts: unknown[] = [];
  const waiting = Promise.withResolvers<void>();
  const abortSeen = Promise.withResolvers<unknown>();
  const srv = await startTaskServer({
    state: (req) => ({ id: req.id }),
    async wait(_req, ctx) {
      waiting.resolve();
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
      aborts.push(ctx.signal.reason);
      abortSeen.resolve(ctx.signal.reason);
      return {};
    },
  });
  return Object.assign(srv, { aborts, waiting: waiting.promise, abortSeen: abortSeen.promise });
}

/** A fresh client connection still gets served. */
async function assertServes(path: string): Promise<void> {
  await using transport = createTtrpcTransport({ path });
  assert.equal((await createClient(Task, transport).state({ id: "fresh" })).id, "fresh");
}

Deno.test("TtrpcServer answers an all-zero header (stream 0) with InvalidArgument and keeps serving", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(new Uint8Array(10));
    const { id, res } = await raw.response();
    assert.equal(id, 0);
    assertStatus(res, Code.InvalidArgument, "StreamID must be odd for client initiated streams");
    await raw.write(stateFrame(1, "after-zero"));
    assert.equal(stateId((await raw.response()).res), "after-zero");
  } finally {
    raw.close();
  }
  await assertServes(srv.path);
});

Deno.test("TtrpcServer survives garbage bytes and a client that leaves", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  // Read as a header, this announces a ~1.2 GB frame: skipped as it (never) arrives.
  await raw.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  raw.close();
  const raw2 = await RawClient.connect(srv.path);
  const junk = new Uint8Array(4096);
  crypto.getRandomValues(junk);
  junk[0] = 0; // keep the first announced length under 16 MiB so some of it parses as frames
  await raw2.write(junk);
  raw2.close();
  await assertServes(srv.path);
});

Deno.test("TtrpcServer handles a truncated header followed by a disconnect", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  await raw.write(stateFrame(1, "x").subarray(0, 5));
  raw.close();
  await assertServes(srv.path);
});

Deno.test("TtrpcServer answers a frame over 4 MiB with ResourceExhausted on its stream and keeps the connection", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    const len = (4 << 20) + 1;
    await raw.write(header(len, 1, FrameType.Request));
    const chunk = new Uint8Array(1 << 20);
    for (let sent = 0; sent < len; sent += chunk.length) {
      await raw.write(chunk.subarray(0, Math.min(chunk.length, len - sent)));
    }
    await raw.write(stateFrame(3, "next"));
    const first = await raw.response();
    assert.equal(first.id, 1);
    assertStatus(
      first.res,
      Code.ResourceExhausted,
      "message length 4194305 exceed maximum message size of 4194304",
    );
    const second = await raw.response();
    assert.equal(second.id, 3);
    assert.equal(stateId(second.res), "next");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer accepts a request of exactly 4 MiB", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    // A State request whose id pads the ttrpc Request to exactly the maximum.
    let payload = requestBytes({ service: SVC, method: "State", payload: stateRequest("") });
    const pad = (4 << 20) - payload.length - 8; // tag and varint length bytes of both layers
    payload = requestBytes({
      service: SVC,
      method: "State",
      payload: stateRequest("x".repeat(pad)),
    });
    const exact = requestBytes({
      service: SVC,
      method: "State",
      payload: stateRequest("x".repeat(pad + (4 << 20) - payload.length)),
    });
    assert.equal(exact.length, 4 << 20);
    await raw.write(encodeFrame(1, FrameType.Request, 0, exact));
    const { id, res } = await raw.response();
    assert.equal(id, 1);
    // The echoed id makes the response nearly as large, which still fits.
    const echoed = stateId(res);
    assert.equal(echoed.length, pad + (4 << 20) - payload.length);
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer rejects even stream ids", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(stateFrame(2, "even"));
    const { id, res } = await raw.response();
    assert.equal(id, 2);
    assertStatus(res, Code.InvalidArgument, "StreamID must be odd for client initiated streams");
    await raw.write(stateFrame(1, "odd"));
    assert.equal(stateId((await raw.response()).res), "odd");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer rejects re-used and decreasing stream ids", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(stateFrame(5, "five"));
    assert.equal(stateId((await raw.response()).res), "five");
    for (const again of [5, 3]) {
      await raw.write(stateFrame(again, "again"));
      const { id, res } = await raw.response();
      assert.equal(id, again);
      assertStatus(res, Code.InvalidArgument, "StreamID cannot be re-used and must increment");
    }
    await raw.write(stateFrame(7, "seven"));
    assert.equal(stateId((await raw.response()).res), "seven");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer answers unknown services and methods with Unimplemented", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.request(1, "containerd.task.v9.Task", "State");
    assertStatus((await raw.response()).res, Code.Unimplemented, "service containerd.task.v9.Task");
    await raw.request(3, SVC, "Teleport");
    assertStatus((await raw.response()).res, Code.Unimplemented, "method Teleport");
    await raw.request(5, "", "");
    assertStatus((await raw.response()).res, Code.Unimplemented, "service ");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer answers a request payload that is not protobuf with InvalidArgument", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(encodeFrame(1, FrameType.Request, 0, new Uint8Array([0xff, 0xff, 0xff, 0xff])));
    const { id, res } = await raw.response();
    assert.equal(id, 1);
    assertStatus(res, Code.InvalidArgument, /^unmarshal request error: /);
    // The method's own message failing to decode is Internal, worded like Go's handlers.
    await raw.request(3, SVC, "State", new Uint8Array([0x0a, 0x05, 0x61]));
    assertStatus(
      (await raw.response()).res,
      Code.Internal,
      /^ttrpc: error unmarshalling payload: /,
    );
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer answers Data for an unknown stream, ignores unknown frame types and client Responses", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(
      encodeFrame(9, FrameType.Data, FrameFlags.RemoteClosed | FrameFlags.NoData, new Uint8Array()),
    );
    const { id, res } = await raw.response();
    assert.equal(id, 9);
    assertStatus(res, Code.InvalidArgument, "StreamID is no longer active");
    await raw.write(encodeFrame(11, 0x09, 0xff, new Uint8Array([1, 2, 3])));
    await raw.write(encodeFrame(13, FrameType.Response, 0, new Uint8Array()));
    await raw.write(stateFrame(15, "after"));
    const next = await raw.response();
    assert.equal(next.id, 15, "nothing was sent for the unknown type or the Response");
    assert.equal(stateId(next.res), "after");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer answers streaming-style flags on a unary method normally", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    await raw.write(
      encodeFrame(
        1,
        FrameType.Request,
        FrameFlags.RemoteOpen,
        requestBytes({ service: SVC, method: "State", payload: stateRequest("flags") }),
      ),
    );
    // Data frames on an active unary stream are ignored.
    await raw.write(encodeFrame(1, FrameType.Data, 0, new Uint8Array([1])));
    assert.equal(stateId((await raw.response()).res), "flags");
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer aborts a handler's signal when its client disconnects and keeps serving others", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  await raw.request(1, SVC, "Wait");
  await srv.waiting;
  raw.close();
  const reason = await srv.abortSeen;
  assert.ok(reason instanceof ConnectError && reason.code === Code.Canceled, String(reason));
  await assertServes(srv.path);
});

Deno.test("TtrpcServer answers 1,000 concurrent calls on one connection", async () => {
  await using srv = await server();
  const raw = await RawClient.connect(srv.path);
  try {
    const frames = Array.from({ length: 1000 }, (_, i) => stateFrame(1 + 2 * i, `call-${i}`));
    const all = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
    let off = 0;
    for (const f of frames) {
      all.set(f, off);
      off += f.length;
    }
    await raw.write(all);
    const seen = new Map<number, string>();
    for (let i = 0; i < 1000; i++) {
      const { id, res } = await raw.response();
      assert.equal(seen.has(id), false, `stream ${id} answered twice`);
      seen.set(id, stateId(res));
    }
    for (let i = 0; i < 1000; i++) assert.equal(seen.get(1 + 2 * i), `call-${i}`);
  } finally {
    raw.close();
  }
  // And through the transport: 1,000 calls multiplexed by one client.
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  const results = await Promise.all(
    Array.from({ length: 1000 }, (_, i) => task.state({ id: `t${i}` })),
  );
  assert.deepEqual(results.map((r) => r.id), Array.from({ length: 1000 }, (_, i) => `t${i}`));
  await assertServes(srv.path);
});

Deno.test("TtrpcServer memory stays bounded under oversized and abandoned frames", async () => {
  await using srv = await server();
  const before = Deno.memoryUsage().rss;
  // 1) A frame announcing ~4 GiB, of which 256 MiB are sent: skipped, never buffered.
  const raw = await RawClient.connect(srv.path);
  await raw.write(header(0xffff_ffff, 1, FrameType.Request));
  const chunk = new Uint8Array(1 << 20);
  for (let i = 0; i < 256; i++) await raw.write(chunk);
  await raw.write(new Uint8Array(0));
  // 2) Twenty connections that each start a maximum-size frame and abandon it halfway.
  const abandoned: RawClient[] = [];
  for (let i = 0; i < 20; i++) {
    const c = await RawClient.connect(srv.path);
    await c.write(header(4 << 20, 1, FrameType.Request));
    await c.write(new Uint8Array(2 << 20));
    abandoned.push(c);
  }
  // The server is still responsive while all that is pending.
  await assertServes(srv.path);
  const grown = (Deno.memoryUsage().rss - before) / (1 << 20);
  raw.close();
  for (const c of abandoned) c.close();
  assert.ok(grown < 200, `rss grew by ${grown.toFixed(0)} MiB`);
  await assertServes(srv.path);
});
