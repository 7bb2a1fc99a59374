// The VM agent's Release (examples/vm/agent/long_polls.ts, service.ts) over ttrpc, without
// containers: a process's output and the OOM queue are the agent's own, the container table a
// stub. Released polls take nothing; what came first is answered, not released.
import assert from "node:assert/strict";
import { createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Agent } from "../../../examples/vm/proto/agent_pb.ts";
import type { Containers } from "../../../examples/vm/agent/containers.ts";
import { LongPolls } from "../../../examples/vm/agent/long_polls.ts";
import { Output } from "../../../examples/vm/agent/output.ts";
import { agentService, OomQueue } from "../../../examples/vm/agent/service.ts";
import { TtrpcServer } from "../../../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const tick = () => new Promise((r) => setTimeout(r, 20));

Deno.test("vm agent Release: pending reads and OomEvents answer at once, taking nothing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-agent-release-" });
  const path = `${dir}/agent.sock`;
  let pipe!: ReadableStreamDefaultController<Uint8Array>;
  const stdout = new Output(new ReadableStream({ start: (c) => void (pipe = c) }));
  const oomEvents = new OomQueue();
  const containers = {
    process: (id: string) => {
      if (id !== "c1") throw new Error(`no container ${id}`);
      return { stdout, stderr: new Output(new ReadableStream()) };
    },
  } as unknown as Containers;
  const server = new TtrpcServer();
  server.register(createServiceImplSpec<typeof Agent>(
    Agent,
    agentService(containers, { shutdown: () => {}, oomEvents, longPolls: new LongPolls() }),
  ));
  await server.listen(path);
  const transport = createTtrpcTransport({ path });
  try {
    const agent = createClient(Agent, transport);
    assert.equal((await agent.release({})).released, 0, "nothing pending");

    const out = agent.readStdout({ containerId: "c1" });
    const err = agent.readStderr({ containerId: "c1" });
    const oom = agent.oomEvent({});
    await tick();
    assert.equal((await agent.release({})).released, 3);
    for (const r of [await out, await err]) assert.deepEqual([r.data.length, r.eof], [0, false]);
    assert.deepEqual([(await oom).containerId, (await oom).released], ["", true]);

    // What arrives later is there for the next calls, which wait again.
    const next = agent.readStdout({ containerId: "c1" });
    const nextOom = agent.oomEvent({});
    await tick();
    pipe.enqueue(bytes("abc"));
    oomEvents.push("c1");
    assert.equal(text((await next).data), "abc");
    assert.deepEqual([(await nextOom).containerId, (await nextOom).released], ["c1", false]);

    // Held output is not taken by a Release: the next read returns it.
    pipe.enqueue(bytes("def"));
    await tick();
    assert.equal((await agent.release({})).released, 0);
    assert.equal(text((await agent.readStdout({ containerId: "c1" })).data), "def");
  } finally {
    await transport.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("vm agent Release: what came first is answered and not counted; two Releases count once", async () => {
  const polls = new LongPolls();
  const queue = new OomQueue();
  const poll = () =>
    polls.hold(async (release) => ({ id: await queue.next(release) }), (a) => a.id === undefined);

  // The event is queued in the same turn as the Release, before the poll could run again.
  const raced = poll();
  await tick();
  queue.push("c2");
  const count = polls.release();
  assert.deepEqual(await raced, { id: "c2" });
  assert.equal(await count, 0);

  const a = poll();
  const b = poll();
  const [first, second] = await Promise.all([polls.release(), polls.release()]);
  assert.deepEqual([first, second], [2, 0]);
  assert.deepEqual([await a, await b], [{ id: undefined }, { id: undefined }]);

  // Polls after a Release wait again.
  const later = poll();
  queue.push("c3");
  assert.deepEqual(await later, { id: "c3" });
});
