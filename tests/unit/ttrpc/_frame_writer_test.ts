// _frame_writer.ts: frames go out in order, queued ones coalesced into one write, partial writes
// resumed; a failing or stuck sink is reported once and drops what is queued.
import assert from "node:assert/strict";
import { FrameWriter } from "../../../sdk/ttrpc/_frame_writer.ts";

class Sink {
  writes: number[][] = [];
  /** At most this many bytes taken per write (a partial write). */
  chunk = Infinity;
  gate: Promise<void> | undefined;
  fail: Error | undefined;
  async write(p: Uint8Array): Promise<number> {
    await this.gate;
    if (this.fail) throw this.fail;
    const n = Math.min(p.length, this.chunk);
    this.writes.push([...p.subarray(0, n)]);
    return n;
  }
}

Deno.test("frames queued while a write is in flight go out together, in order", async () => {
  const sink = new Sink();
  const gate = Promise.withResolvers<void>();
  sink.gate = gate.promise;
  const w = new FrameWriter(sink, () => assert.fail("no error expected"));
  w.send(new Uint8Array([1]));
  w.send(new Uint8Array([2, 3]));
  w.send(new Uint8Array([4]));
  assert.equal(w.queuedBytes, 4);
  gate.resolve();
  await w.drained();
  assert.deepEqual(sink.writes, [[1], [2, 3, 4]]);
  assert.equal(w.queuedBytes, 0);
});

Deno.test("a partial write is resumed where it stopped", async () => {
  const sink = new Sink();
  sink.chunk = 2;
  const w = new FrameWriter(sink, () => assert.fail("no error expected"));
  w.send(new Uint8Array([1, 2, 3, 4, 5]));
  await w.drained();
  assert.deepEqual(sink.writes, [[1, 2], [3, 4], [5]]);
});

Deno.test("a failing sink is reported once, and later frames are dropped", async () => {
  const sink = new Sink();
  sink.fail = new Error("EPIPE");
  const errors: unknown[] = [];
  const w = new FrameWriter(sink, (e) => errors.push(e));
  w.send(new Uint8Array([1]));
  await w.drained();
  w.send(new Uint8Array([2]));
  await w.drained();
  assert.equal(errors.length, 1);
  assert.match(String(errors[0]), /EPIPE/);
  assert.equal(w.queuedBytes, 0);
});

Deno.test("a sink that makes no progress fails after the timeout, naming it", async () => {
  const sink = new Sink();
  const never = Promise.withResolvers<void>();
  sink.gate = never.promise;
  const errors: unknown[] = [];
  const w = new FrameWriter(sink, (e) => errors.push(e), 20);
  // The writer's timer does not hold the event loop (a server's listener does): this one does.
  const alive = setTimeout(() => {}, 10_000);
  w.send(new Uint8Array([1]));
  await w.drained();
  clearTimeout(alive);
  assert.match(String(errors[0]), /no progress for 20 ms/);
  never.resolve();
});

Deno.test("close drops what is queued and wakes whoever waits", async () => {
  const sink = new Sink();
  const gate = Promise.withResolvers<void>();
  sink.gate = gate.promise;
  const w = new FrameWriter(sink, () => {});
  w.send(new Uint8Array([1]));
  w.send(new Uint8Array([2]));
  const drained = w.drained();
  w.close();
  gate.resolve();
  await drained;
  assert.equal(w.queuedBytes, 0);
  assert.deepEqual(sink.writes.flat().includes(2), false);
});
