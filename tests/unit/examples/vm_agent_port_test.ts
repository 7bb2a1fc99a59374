// The VM agent's virtio-serial port (examples/vm/agent/port.ts): one host connection after
// another on the same descriptors, so a connection that ended writes nothing more (a late answer
// would land in the next connection, whose stream ids start at 1 again).
import assert from "node:assert/strict";
import { portConnection, type PortFiles } from "../../../examples/vm/agent/port.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** A port whose reads return `reads` in turn (then end of file), and that records writes. */
function fakePort(reads: string[]): PortFiles & { written: string[] } {
  const written: string[] = [];
  return {
    written,
    read: (p) => {
      const next = reads.shift();
      if (next === undefined) return Promise.resolve(null);
      p.set(bytes(next));
      return Promise.resolve(next.length);
    },
    write: (p) => {
      written.push(text(p));
      return Promise.resolve(p.length);
    },
  };
}

Deno.test("vm agent port: a connection's writes after its end of file are dropped", async () => {
  const port = fakePort(["more"]);
  const conn = portConnection(port, bytes("first"));
  const buf = new Uint8Array(16);
  assert.equal(text(buf.subarray(0, (await conn.read(buf))!)), "first");
  assert.equal(await conn.write(bytes("answer-1")), 8);
  assert.equal(text(buf.subarray(0, (await conn.read(buf))!)), "more");
  assert.equal(await conn.read(buf), null, "the host left");
  // Reported as written (the server's writer goes on), but nothing reaches the port.
  assert.equal(await conn.write(bytes("late")), 4);
  assert.deepEqual(port.written, ["answer-1"]);
});

Deno.test("vm agent port: a connection's writes after close are dropped", async () => {
  const port = fakePort([]);
  const conn = portConnection(port, bytes("first"));
  await conn.write(bytes("answer-1"));
  conn.close();
  assert.equal(await conn.write(bytes("late")), 4);
  assert.deepEqual(port.written, ["answer-1"]);
  assert.equal(await conn.read(new Uint8Array(16)), null);
});
