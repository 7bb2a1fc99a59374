// fd_conn.ts: an accepted unix connection taken out of Deno into a descriptor the server owns
// (real sockets; no root needed).
import assert from "node:assert/strict";
import { fdConn, takeAccepted } from "../../../../sdk/shim/server/fd_conn.ts";
import { descriptorsByLink } from "../../../../sdk/linux/descriptors.ts";
import { preloadLibc } from "../../../../sdk/linux/libc.ts";

preloadLibc();
const enc = new TextEncoder();
const dec = new TextDecoder();

function linksOf(link: string): number[] {
  const out: number[] = [];
  for (const e of Deno.readDirSync("/proc/self/fd")) {
    try {
      if (Deno.readLinkSync(`/proc/self/fd/${e.name}`) === link) out.push(Number(e.name));
    } catch { /* closed meanwhile */ }
  }
  return out;
}

function sockets(): Map<string, number> {
  return new Map([...descriptorsByLink()].filter(([link]) => link.startsWith("socket:[")));
}

Deno.test("takeAccepted serves the connection from a descriptor of its own; closing it closes Deno's too", async () => {
  const dir = await Deno.makeTempDir();
  const listener = Deno.listen({ transport: "unix", path: `${dir}/s.sock` });
  try {
    const client = await Deno.connect({ transport: "unix", path: `${dir}/s.sock` });
    const before = sockets();
    const conn = await listener.accept();
    const added = [...sockets()].filter(([link]) => !before.has(link));
    assert.equal(added.length, 1, "the accepted connection's socket");
    const [link, denoFd] = added[0];
    const inode = Number(/socket:\[(\d+)\]/.exec(link)![1]);
    const stream = takeAccepted(conn, inode);
    // Ours is a duplicate (close-on-exec); Deno's stays open, unread, until the stream closes.
    assert.equal(linksOf(link).length, 2);
    assert.ok(linksOf(link).includes(denoFd));
    await client.write(enc.encode("ping"));
    const buf = new Uint8Array(16);
    const n = await stream.read(buf);
    assert.equal(dec.decode(buf.subarray(0, n!)), "ping");
    await stream.write(enc.encode("pong"));
    const m = await client.read(buf);
    assert.equal(dec.decode(buf.subarray(0, m!)), "pong");
    // Closing the stream closes both: the peer sees the end.
    stream.close();
    for (let i = 0; i < 100 && linksOf(link).length > 0; i++) {
      await new Promise((r) => setTimeout(r, 10)); // FdStream closes once its poll is cancelled
    }
    assert.deepEqual(linksOf(link), []);
    assert.equal(await client.read(buf), null, "the peer sees end of stream");
    client.close();
  } finally {
    listener.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("takeAccepted refuses an inode no descriptor of this process has", () => {
  const conn = { close() {} } as unknown as Deno.Conn;
  assert.throws(() => takeAccepted(conn, 1), /no descriptor for accepted socket inode 1/);
  assert.equal(typeof fdConn, "function");
});
