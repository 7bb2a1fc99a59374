// What TtrpcServer hands across a live upgrade (sdk/shim/server/upgrade.ts drives it): a held
// connection keeps new requests instead of dispatching them, is quiet once only carried calls
// run, carries their requests and what it kept, and another server continuing the same socket
// answers them all; a released hold dispatches what it kept.
import assert from "node:assert/strict";
import { createClient } from "@connectrpc/connect";
import { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { TtrpcServer } from "../../../sdk/ttrpc/server.ts";
import { createServiceImplSpec, type ServiceImpl } from "@connectrpc/connect";
import { FdStream } from "../../../sdk/linux/fd_stream.ts";
import { descriptorsByLink, dupCloseOnExec } from "../../../sdk/linux/descriptors.ts";
import { startTaskServer } from "../../fixtures/ttrpc/helpers.ts";

// The peer check is what finds each accepted connection's socket, which carry() names.
const SOCKETS_KNOWN = { requireSameUser: true };
const carried = (_service: string, method: string) => method === "Wait";

async function until(what: string, probe: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!probe()) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("a held connection keeps new calls, is quiet with only carried calls, and release() answers them", async () => {
  const exited = Promise.withResolvers<void>();
  let states = 0;
  await using srv = await startTaskServer({
    state: (r) => (states++, { id: r.id }),
    wait: async () => (await exited.promise, { exitStatus: 3 }),
  }, SOCKETS_KNOWN);
  await using transport = createTtrpcTransport({ path: srv.path });
  const client = createClient(Task, transport);
  const wait = client.wait({ id: "c" });
  wait.catch(() => {});
  await until("the Wait to run", () => srv.server.connectionCount === 1);
  await new Promise((r) => setTimeout(r, 50));
  srv.server.hold(carried);
  await until("quiet", () => srv.server.quiet);
  const state = client.state({ id: "held" });
  state.catch(() => {});
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(states, 0, "a call that arrives while held is kept, not dispatched");
  assert.equal(srv.server.quiet, true, "kept calls do not make it busy");
  const [carry] = srv.server.carry();
  assert.deepEqual(carry.carry.replay.map((r) => r.id), [1, 3], "the Wait, then the kept State");
  assert.equal(carry.carry.lastStreamId, 3);
  assert.equal(carry.carry.partial.length, 0);
  srv.server.release();
  assert.equal((await state).id, "held");
  exited.resolve();
  assert.equal((await wait).exitStatus, 3);
});

Deno.test("a held connection is not quiet while a call that is not carried runs", async () => {
  const slow = Promise.withResolvers<void>();
  await using srv = await startTaskServer({
    state: async (r) => (await slow.promise, { id: r.id }),
  }, SOCKETS_KNOWN);
  await using transport = createTtrpcTransport({ path: srv.path });
  const state = createClient(Task, transport).state({ id: "slow" });
  await until("the call to run", () => srv.server.connectionCount === 1);
  await new Promise((r) => setTimeout(r, 50));
  srv.server.hold(carried);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(srv.server.quiet, false);
  slow.resolve();
  await until("quiet once it answered", () => srv.server.quiet);
  srv.server.release();
  assert.equal((await state).id, "slow");
});

Deno.test("another server continues a carried connection on the same socket: the client's calls are answered once", async () => {
  const first = Promise.withResolvers<void>();
  await using srv = await startTaskServer({
    state: (r) => ({ id: `old:${r.id}` }),
    wait: async () => (await first.promise, { exitStatus: 1 }),
  }, SOCKETS_KNOWN);
  await using transport = createTtrpcTransport({ path: srv.path });
  const client = createClient(Task, transport);
  assert.equal((await client.state({ id: "before" })).id, "old:before");
  const wait = client.wait({ id: "c" });
  wait.catch(() => {});
  await new Promise((r) => setTimeout(r, 50));
  srv.server.hold(carried);
  const state = client.state({ id: "during" });
  state.catch(() => {});
  await new Promise((r) => setTimeout(r, 50));
  await until("quiet", () => srv.server.quiet);
  const [carry] = srv.server.carry();
  // What a live upgrade keeps across execve: the socket, under a descriptor of its own.
  const fd = dupCloseOnExec(descriptorsByLink().get(`socket:[${carry.inode}]`)!);
  // The old server stays as it is (held: it dispatches and writes nothing more); after an
  // execve it would be gone. The client sends nothing more, so neither reads.

  const impl: Partial<ServiceImpl<typeof Task>> = {
    state: (r) => ({ id: `new:${r.id}` }),
    wait: () => ({ exitStatus: 5 }),
  };
  // A short first-frame deadline: a continued connection is no new peer and must not get one.
  const next = new TtrpcServer({ frameTimeoutMs: 100 }).register(
    createServiceImplSpec(Task, impl),
    "containerd.task.v2.Task",
  );
  const s = new FdStream(fd, "carried connection");
  const served = next.serveInherited(
    {
      read: (b) => s.read(b as Uint8Array<ArrayBuffer>),
      write: async (b) => (await s.write(b), b.length),
      close: () => void s.close(),
    },
    fd,
    carry.carry,
  );
  assert.equal((await state).id, "new:during", "the kept call, answered by the next code");
  assert.equal((await wait).exitStatus, 5, "the carried Wait, answered by the next code");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(next.connectionCount, 1, "a silent continued connection stays open");
  await transport.close();
  await served;
  await next.close();
  first.resolve();
});
