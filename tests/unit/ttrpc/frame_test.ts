import assert from "node:assert/strict";
import {
  encodeFrame,
  FRAME_HEADER_LENGTH,
  FrameDecoder,
  FrameFlags,
  FrameType,
  MAX_PAYLOAD_LENGTH,
} from "../../../sdk/ttrpc/frame.ts";

Deno.test("encodeFrame() writes a big-endian 10-byte header then the payload", () => {
  const bytes = encodeFrame(
    0x01020305,
    FrameType.Data,
    FrameFlags.RemoteClosed | FrameFlags.NoData,
    new Uint8Array([9, 8, 7]),
  );
  assert.deepEqual(
    [...bytes],
    [0, 0, 0, 3, 1, 2, 3, 5, 3, 5, 9, 8, 7],
  );
  assert.equal(FRAME_HEADER_LENGTH, 10);
  assert.equal(MAX_PAYLOAD_LENGTH, 4194304);
});

Deno.test("encodeFrame() rejects payloads over 4 MiB and out-of-range fields", () => {
  assert.throws(() => encodeFrame(1, 1, 0, new Uint8Array(MAX_PAYLOAD_LENGTH + 1)), RangeError);
  assert.throws(() => encodeFrame(2 ** 32, 1, 0, new Uint8Array()), RangeError);
  assert.throws(() => encodeFrame(1, 256, 0, new Uint8Array()), RangeError);
  assert.equal(
    encodeFrame(1, 1, 0, new Uint8Array(MAX_PAYLOAD_LENGTH)).length,
    MAX_PAYLOAD_LENGTH + 10,
  );
});

Deno.test("FrameDecoder.push() decodes frames split at every byte boundary", () => {
  const payload = new Uint8Array([1, 2, 3, 4, 5]);
  const bytes = encodeFrame(7, FrameType.Request, FrameFlags.RemoteOpen, payload);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const d = new FrameDecoder();
    const a = d.push(bytes.subarray(0, cut));
    const b = d.push(bytes.subarray(cut));
    const all = [...a, ...b];
    assert.equal(all.length, 1, `cut at ${cut}`);
    const f = all[0];
    assert.equal(f.oversized, false);
    assert.deepEqual(f.header, { length: 5, streamId: 7, type: 1, flags: 2 });
    if (!f.oversized) assert.deepEqual([...f.payload], [...payload]);
    assert.equal(d.partial, false);
  }
});

Deno.test("FrameDecoder.push() decodes one byte at a time", () => {
  const bytes = encodeFrame(9, FrameType.Response, 0, new Uint8Array([42, 43]));
  const d = new FrameDecoder();
  const out = [];
  for (const b of bytes) out.push(...d.push(new Uint8Array([b])));
  assert.equal(out.length, 1);
  assert.equal(out[0].header.streamId, 9);
});

Deno.test("FrameDecoder.push() returns every frame of a coalesced read, in order", () => {
  const parts = [
    encodeFrame(1, FrameType.Request, 0, new Uint8Array([1])),
    encodeFrame(3, FrameType.Data, FrameFlags.NoData | FrameFlags.RemoteClosed, new Uint8Array()),
    encodeFrame(5, FrameType.Request, 0, new Uint8Array(1000).fill(5)),
    encodeFrame(7, 0x7f, 0, new Uint8Array([7, 7])),
  ];
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    all.set(p, off);
    off += p.length;
  }
  // Plus half of another frame, which must stay pending.
  const tail = encodeFrame(9, FrameType.Request, 0, new Uint8Array([9, 9, 9]));
  const chunk = new Uint8Array(all.length + 6);
  chunk.set(all);
  chunk.set(tail.subarray(0, 6), all.length);
  const d = new FrameDecoder();
  const frames = d.push(chunk);
  assert.deepEqual(frames.map((f) => [f.header.streamId, f.header.type, f.header.length]), [
    [1, 1, 1],
    [3, 3, 0],
    [5, 1, 1000],
    [7, 0x7f, 2],
  ]);
  assert.equal(d.partial, true);
  const rest = d.push(tail.subarray(6));
  assert.equal(rest.length, 1);
  assert.equal(rest[0].header.streamId, 9);
  assert.equal(d.partial, false);
});

Deno.test("FrameDecoder.push() copies payloads so the caller may reuse its buffer", () => {
  const buf = encodeFrame(1, FrameType.Request, 0, new Uint8Array([1, 2, 3]));
  const d = new FrameDecoder();
  const [f] = d.push(buf);
  buf.fill(0);
  assert.ok(!f.oversized);
  if (!f.oversized) assert.deepEqual([...f.payload], [1, 2, 3]);
});

Deno.test("FrameDecoder.push() skips an over-limit payload without buffering it and keeps the stream id", () => {
  const d = new FrameDecoder(16);
  const header = new Uint8Array(10);
  new DataView(header.buffer).setUint32(0, 1000);
  new DataView(header.buffer).setUint32(4, 11);
  header[8] = FrameType.Request;
  assert.deepEqual(d.push(header), []);
  // Feed the 1000 payload bytes in pieces; nothing is reported until all are skipped.
  for (let i = 0; i < 9; i++) assert.deepEqual(d.push(new Uint8Array(100)), []);
  const next = encodeFrame(13, FrameType.Request, 0, new Uint8Array([1]));
  const last = new Uint8Array(100 + next.length);
  last.set(next, 100);
  const out = d.push(last);
  assert.equal(out.length, 2);
  assert.deepEqual(out[0], {
    header: { length: 1000, streamId: 11, type: 1, flags: 0 },
    oversized: true,
  });
  assert.equal(out[1].header.streamId, 13);
  assert.equal(out[1].oversized, false);
});

Deno.test("FrameDecoder.push() accepts exactly the maximum and rejects one byte more", () => {
  const d = new FrameDecoder(8);
  const ok = encodeFrame(1, 1, 0, new Uint8Array(8));
  const big = new Uint8Array(10 + 9);
  new DataView(big.buffer).setUint32(0, 9);
  new DataView(big.buffer).setUint32(4, 3);
  big[8] = 1;
  const out = d.push(new Uint8Array([...ok, ...big]));
  assert.deepEqual(out.map((f) => f.oversized), [false, true]);
});

Deno.test("FrameDecoder.partial reports a truncated header", () => {
  const d = new FrameDecoder();
  assert.equal(d.partial, false);
  d.push(new Uint8Array([0, 0, 0]));
  assert.equal(d.partial, true);
});
