// The server's bounds against a hostile peer: incomplete frames time out, connections are
// capped (strangers evicted first), calls per connection are capped, a peer that never reads
// its answers is dropped, and a frame claiming 4 MiB costs what was sent.
import assert from "node:assert/strict";
import { Code, createClient } from "@connectrpc/connect";
import { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { FrameDecoder, FrameType } from "../../../sdk/ttrpc/frame.ts";
import { RawClient, startTaskServer } from "../../fixtures/ttrpc/helpers.ts";

const SVC = "containerd.task.v2.Task";

function header(length: number, streamId: number, type: number): Uint8Array {
  const h = new Uint8Array(10);
  const v = new DataView(h.buffer);
  v.setUint32(0, length);
  v.setUint32(4, streamId);
  h[8] = type;
  return h;
}

/** Resolves once the server has closed `raw` (EOF or reset), after reading what it sent. */
async function closedByServer(raw: RawClient): Promise<void> {
  const buf = new Uint8Array(64 * 1024);
  for (;;) {
    const n = await raw.conn.read(buf).catch(() => null);
    if (n === null) return;
  }
}

async function callState(path: string, id: string): Promise<string> {
  await using transport = createTtrpcTransport({ path });
  return (await createClient(Task, transport).state({ id })).id;
}

Deno.test("a connection that sends no frame, or leaves a frame incomplete, is closed after frameTimeoutMs", async () => {
  const errors: unknown[] = [];
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    frameTimeoutMs: 200,
    onError: (e) => errors.push(e),
  });
  const silent = await RawClient.connect(srv.path);
  const partialHeader = await RawClient.connect(srv.path);
  await partialHeader.write(new Uint8Array([0, 0, 0]));
  const partialPayload = await RawClient.connect(srv.path);
  await partialPayload.write(header(4 << 20, 1, FrameType.Request));
  await partialPayload.write(new Uint8Array(4096));
  // A complete frame first (answered), then one that is never finished.
  const later = await RawClient.connect(srv.path);
  await later.write(new Uint8Array(10));
  assert.equal((await later.response()).id, 0);
  await later.write(header(100, 3, FrameType.Request));
  const all = [silent, partialHeader, partialPayload, later];
  await Promise.all(all.map(closedByServer));
  for (const c of all) c.close();
  const messages = errors.map((e) => (e as Error).message);
  assert.ok(messages.some((m) => /sent no complete frame within 200 ms/.test(m)), messages.join());
  assert.ok(messages.some((m) => /left a frame incomplete within 200 ms/.test(m)), messages.join());
  assert.equal(srv.server.connectionCount, 0);
  assert.equal(await callState(srv.path, "still-served"), "still-served");
});

Deno.test("a connection idle between complete frames is not timed out", async () => {
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    frameTimeoutMs: 100,
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const client = createClient(Task, transport);
  assert.equal((await client.state({ id: "first" })).id, "first");
  await new Promise((r) => setTimeout(r, 400));
  // Same connection: the transport would fail this call (Unavailable) had it been closed.
  assert.equal((await client.state({ id: "after-idle" })).id, "after-idle");
  assert.equal(srv.server.connectionCount, 1);
});

Deno.test("over maxConnections, the oldest connection that made no call is evicted; one that did is kept", async () => {
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    maxConnections: 2,
  });
  // containerd's connection: it has made a call.
  await using transport = createTtrpcTransport({ path: srv.path });
  const client = createClient(Task, transport);
  assert.equal((await client.state({ id: "containerd" })).id, "containerd");
  const stranger = await RawClient.connect(srv.path);
  // Let it be accepted before the next one arrives.
  while (srv.server.connectionCount < 2) await new Promise((r) => setTimeout(r, 5));
  const next = await RawClient.connect(srv.path);
  await closedByServer(stranger);
  stranger.close();
  // The newcomer took the stranger's place and is served; containerd's connection still works.
  await next.request(1, SVC, "State");
  assert.equal((await next.response()).id, 1);
  assert.equal((await client.state({ id: "still" })).id, "still");
  // Both connections have made calls now: a third is closed at once, unanswered.
  const refused = await RawClient.connect(srv.path);
  await closedByServer(refused);
  refused.close();
  assert.equal((await client.state({ id: "after-refusal" })).id, "after-refusal");
  next.close();
});

Deno.test("calls over maxCallsPerConnection are answered ResourceExhausted without running", async () => {
  const release = Promise.withResolvers<void>();
  let started = 0;
  await using srv = await startTaskServer({
    async wait() {
      started++;
      await release.promise;
      return {};
    },
  }, { maxCallsPerConnection: 2 });
  const raw = await RawClient.connect(srv.path);
  try {
    for (const id of [1, 3, 5]) await raw.request(id, SVC, "Wait");
    const over = await raw.response();
    assert.equal(over.id, 5);
    assert.equal(over.res.status?.code, Code.ResourceExhausted);
    assert.match(over.res.status?.message ?? "", /too many calls on this connection: 2 running/);
    assert.equal(started, 2);
    release.resolve();
    const ids = [(await raw.response()).id, (await raw.response()).id].sort();
    assert.deepEqual(ids, [1, 3]);
  } finally {
    raw.close();
  }
});

Deno.test("a peer that never reads its answers is dropped after writeTimeoutMs", async () => {
  const errors: unknown[] = [];
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    writeTimeoutMs: 300,
    onError: (e) => errors.push(e),
  });
  const raw = await RawClient.connect(srv.path);
  // Each even stream id is answered InvalidArgument: 40,000 answers fill the socket.
  const flood = new Uint8Array(10 * 40_000);
  const writing = raw.write(flood).catch(() => {});
  while (srv.server.connectionCount > 0 || errors.length === 0) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(
    errors.some((e) => /no progress for 300 ms/.test(String((e as Error).message))),
    errors.map(String).join(),
  );
  raw.close();
  await writing;
  assert.equal(await callState(srv.path, "after-flood"), "after-flood");
});

Deno.test("FrameDecoder holds what arrived of a frame, not what its header claims", () => {
  const d = new FrameDecoder();
  d.push(header(4 << 20, 1, FrameType.Request));
  d.push(new Uint8Array(4096));
  assert.ok(d.buffered <= 64 * 1024, `${d.buffered} bytes held`);
  for (let i = 0; i < 32; i++) d.push(new Uint8Array(64 * 1024));
  assert.ok(d.buffered >= 4096 + 32 * 64 * 1024, `${d.buffered} bytes held`);
  const [frame] = d.push(new Uint8Array((4 << 20) - 4096 - 32 * 64 * 1024));
  assert.ok(frame && !frame.oversized && frame.payload.length === 4 << 20);
  assert.equal(d.buffered, 0);
});
